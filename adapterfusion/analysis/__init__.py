"""Analysis of trained models: what a fusion attends to (Pfeiffer et al. Fig. 4/6). Pure read-only code that
turns model outputs into numpy arrays and JSON; plotting lives in adapterfusion.experiments.figures."""

from adapterfusion.analysis.fusion_attention import (
    FUSION_ATTENTION_FILE,
    FusionActivation,
    average_activations,
    load_fusion_activation,
    mean_fusion_attention,
)

__all__ = [
    "FUSION_ATTENTION_FILE",
    "FusionActivation",
    "average_activations",
    "load_fusion_activation",
    "mean_fusion_attention",
]
