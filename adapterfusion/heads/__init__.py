from adapterfusion.heads.config import (
    ClassificationHead,
    HeadConfig,
    MultipleChoiceHead,
    RegressionHead,
    head_config_from_dict,
)
from adapterfusion.heads.module import PredictionHead

__all__ = [
    "ClassificationHead",
    "HeadConfig",
    "MultipleChoiceHead",
    "PredictionHead",
    "RegressionHead",
    "head_config_from_dict",
]
