"""The AdamW parameter groups of a run: weight decay for the weight matrices, none for biases, LayerNorm weights,
fusion V matrices (V is pulled towards the identity by its own regulariser, not towards zero) and ScaLearn's scales
(which start near 2 / N and are not weights to shrink; the authors train them without weight decay)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from adapterfusion.fusion.layer import FusionLayer
from adapterfusion.fusion.scalearn import ScaLearnLayer

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel


def fusion_value_parameters(model: AdaptedModel) -> list[torch.Tensor]:
    """Every fusion layer's V matrix, found through the model's sites."""
    return [
        fusion.value.weight
        for site in model.sites
        for fusion in site.fusions.values()
        if isinstance(fusion, FusionLayer) and fusion.value is not None
    ]


def parameter_groups(model: AdaptedModel, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW groups over the trainable parameters: no decay for biases and other 1-D tensors, LayerNorm
    weights, fusion V matrices and ScaLearn scales; `weight_decay` for the rest. Empty groups are left out."""
    no_decay = {id(p) for p in fusion_value_parameters(model)}
    no_decay |= {id(m.scales) for m in model.modules() if isinstance(m, ScaLearnLayer)}
    no_decay |= {id(p) for module in model.modules() if isinstance(module, nn.LayerNorm) for p in module.parameters()}
    trainable = [p for p in model.parameters() if p.requires_grad]
    no_decay |= {id(p) for p in trainable if p.ndim < 2}
    groups = [
        {"params": [p for p in trainable if id(p) not in no_decay], "weight_decay": weight_decay},
        {"params": [p for p in trainable if id(p) in no_decay], "weight_decay": 0.0},
    ]
    return [g for g in groups if g["params"]]
