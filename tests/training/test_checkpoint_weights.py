"""`weights_mismatch`: a checkpoint's trainable weights that do not fit the model (other names, shapes or an integer
dtype) are refused before anything is copied, where `copy_` would broadcast, round or fail inside torch."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from adapterfusion.training.checkpoints import TrainableWeights, weights_mismatch
from adapterfusion.training.errors import TrainingError


def _model() -> nn.Module:
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    model[0].requires_grad_(False)
    return model


def _trained(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() + 1 for name, p in model.named_parameters() if p.requires_grad}


def test_fitting_weights_load():
    model = _model()
    weights = _trained(model)
    assert weights_mismatch(model, weights) is None
    TrainableWeights(model).load_state_dict(weights)
    assert torch.equal(model[1].bias, weights["1.bias"])


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (
            lambda w: w.update({"1.bias": torch.zeros(1)}),
            "1.bias of shape (1,), where this model's parameter has shape (2,)",
        ),
        (lambda w: w.update({"1.weight": torch.zeros(2, 4, 1)}), "shape (2, 4, 1)"),
        (lambda w: w.update({"1.bias": torch.zeros(2, dtype=torch.int64)}), "torch.int64, not a floating-point"),
        (lambda w: w.pop("1.bias"), "lacks trainable parameters"),
        (lambda w: w.update({"2.bias": torch.zeros(2)}), "lacks: ['2.bias']"),
    ],
    ids=["broadcastable", "other-rank", "integer", "missing", "unknown"],
)
def test_unfitting_weights_are_refused_and_nothing_is_copied(change, words):
    model = _model()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    weights = _trained(model)
    change(weights)
    assert words in (weights_mismatch(model, weights) or "")
    with pytest.raises(TrainingError, match="does not fit this model"):
        TrainableWeights(model).load_state_dict(weights)
    assert all(torch.equal(p, before[name]) for name, p in model.named_parameters())
