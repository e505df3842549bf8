"""adapterfusion: bottleneck adapters and AdapterFusion on any HuggingFace encoder.

import adapterfusion as af
model = af.wrap(AutoModel.from_pretrained(af.default_encoder_path()))
model.add_adapter("rte", af.AdapterConfig.pfeiffer(reduction_factor=16))
"""

# First: as the `adapterfusion` command, a Ctrl-C during the imports below (seconds) ends it without a traceback.
import adapterfusion._startup  # noqa: F401, I001 - imported for that effect, before anything else
from adapterfusion._version import __version__ as __version__
from adapterfusion.adapters import AdapterConfig, BottleneckAdapter
from adapterfusion.blocks import Average, BatchSplit, Block, Fuse, Parallel, Stack, average_adapters
from adapterfusion.defaults import default_decoder_path, default_encoder_path
from adapterfusion.errors import (
    AdapterFusionError,
    BaseModelMismatchWarning,
    ConfigError,
    DefaultModelMissingError,
    HubError,
    StorageFullError,
    IncompatibleModelError,
    ModelUnloadedError,
    NameNotFoundError,
    PieceExistsError,
    SavedSettingError,
    SerializationError,
    UnknownFormatVersionWarning,
    UnsupportedArchitectureError,
)
from adapterfusion.fusion import FusionConfig, FusionLayer
from adapterfusion.heads import (
    ClassificationHead,
    HeadConfig,
    MultipleChoiceHead,
    QuestionAnsweringHead,
    RegressionHead,
    TokenClassificationHead,
    qa_labels,
    word_labels_to_tokens,
)
from adapterfusion.injection.architectures import ARCHITECTURES
from adapterfusion.model import AdaptedModel, wrap
from adapterfusion.outputs import AdaptedModelOutput
from adapterfusion.parameters import ParameterReport
from adapterfusion.pipelines import PipelineModel, pipeline

__all__ = [
    "ARCHITECTURES",
    "AdaptedModel",
    "AdaptedModelOutput",
    "AdapterConfig",
    "AdapterFusionError",
    "BaseModelMismatchWarning",
    "Average",
    "BatchSplit",
    "Block",
    "BottleneckAdapter",
    "ClassificationHead",
    "ConfigError",
    "DefaultModelMissingError",
    "FusionConfig",
    "Fuse",
    "FusionLayer",
    "HeadConfig",
    "HubError",
    "StorageFullError",
    "IncompatibleModelError",
    "ModelUnloadedError",
    "MultipleChoiceHead",
    "NameNotFoundError",
    "PieceExistsError",
    "SavedSettingError",
    "Parallel",
    "ParameterReport",
    "PipelineModel",
    "QuestionAnsweringHead",
    "RegressionHead",
    "SerializationError",
    "Stack",
    "TokenClassificationHead",
    "UnknownFormatVersionWarning",
    "UnsupportedArchitectureError",
    "average_adapters",
    "default_decoder_path",
    "default_encoder_path",
    "pipeline",
    "qa_labels",
    "word_labels_to_tokens",
    "wrap",
]
