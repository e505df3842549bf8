from adapterfusion.heads.config import (
    ClassificationHead,
    HeadConfig,
    MultipleChoiceHead,
    QuestionAnsweringHead,
    RegressionHead,
    TokenClassificationHead,
    head_config_from_dict,
)
from adapterfusion.heads.module import PredictionHead
from adapterfusion.heads.question_answering import qa_labels
from adapterfusion.heads.token_classification import word_labels_to_tokens

__all__ = [
    "ClassificationHead",
    "HeadConfig",
    "MultipleChoiceHead",
    "PredictionHead",
    "QuestionAnsweringHead",
    "RegressionHead",
    "TokenClassificationHead",
    "head_config_from_dict",
    "qa_labels",
    "word_labels_to_tokens",
]
