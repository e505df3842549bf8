"""The fusion controls, as changes to what runs: each returns a new ActiveState (state.py) that the model
hands to every site (`set_fusion_implementation`, `set_fusion_step`, `set_fusion_mask`), plus what the training loss
adds for the active fusion (`regularization`, `value_trains`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

from adapterfusion._validation import check_choice
from adapterfusion.fusion.layer import FUSION_IMPLEMENTATIONS, FusionLayer
from adapterfusion.injection.state import ActiveState, kept_adapters


def with_implementation(state: ActiveState, implementation: str) -> ActiveState:
    """`state` computing fusions the 'fast' way or the 'reference' way (the paper's equations, literally)."""
    check_choice(implementation, FUSION_IMPLEMENTATIONS, "fusion implementation")
    return dataclasses.replace(state, fusion_implementation=implementation)


def with_step(state: ActiveState, step: int) -> ActiveState:
    """`state` at training step `step`, which drives a fusion's softmax temperature schedule."""
    return dataclasses.replace(state, fusion_step=step)


def with_mask(state: ActiveState, fusion: str, fused: tuple[str, ...], keep: Sequence[str] | None) -> ActiveState:
    """`state` with fusion `fusion` (over `fused`) keeping only the adapters in `keep`, or all of them (keep=None)."""
    masks = {name: kept for name, kept in state.fusion_masks.items() if name != fusion}
    if keep is not None:
        masks[fusion] = kept_adapters(fusion, fused, keep)
    return dataclasses.replace(state, fusion_masks=masks)


def regularization(layers: Sequence[FusionLayer], reference: torch.Tensor) -> torch.Tensor:
    """Sum over a fusion's layers of weight * ||V - I||², on the device and dtype of `reference`."""
    total = torch.zeros((), device=reference.device, dtype=reference.dtype)
    for layer in layers:
        total = total + layer.regularization()
    return total


def value_trains(layers: Sequence[FusionLayer]) -> bool:
    """Whether a fusion's V is being trained (so the loss adds its regularisation)."""
    return any(layer.value is not None and layer.value.weight.requires_grad for layer in layers)
