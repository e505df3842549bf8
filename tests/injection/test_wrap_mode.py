"""Wrapping keeps the wrapped model's train/eval mode in everything we add: a model loaded with from_pretrained is in
eval mode, and a user who never calls .eval() must not get a head's or a fusion's dropout at inference."""

from __future__ import annotations

import pytest
import torch

import adapterfusion as af
from tiny_models import tiny_encoder, tiny_inputs


def _modes(model: af.AdaptedModel) -> set[bool]:
    return {module.training for module in model.modules()}


@pytest.mark.parametrize("training", [False, True])
def test_sites_adapters_fusions_and_heads_take_the_wrapped_models_mode(training: bool) -> None:
    model = af.wrap(tiny_encoder().train(training))
    for name in ("a", "b"):
        model.add_adapter(name, af.AdapterConfig.pfeiffer(4, init="bert"))
    model.add_fusion("f", ["a", "b"], af.FusionConfig.dynamic(score_dropout=0.5))
    model.add_head("h", af.ClassificationHead(num_labels=2, dropout=0.5))
    assert _modes(model) == {training}


def test_an_eval_mode_model_wrapped_gives_the_same_logits_twice() -> None:
    model = af.wrap(tiny_encoder())  # eval mode, as from_pretrained gives it
    for name in ("a", "b"):
        model.add_adapter(name, af.AdapterConfig.pfeiffer(4, init="bert"))
    model.add_fusion("f", ["a", "b"], af.FusionConfig.dynamic(score_dropout=0.5))
    model.add_head("h", af.ClassificationHead(num_labels=2, dropout=0.5))
    model.activate(fusion="f", head="h")
    with torch.no_grad():
        first = model(**tiny_inputs()).logits
        assert torch.equal(model(**tiny_inputs()).logits, first)
        model.train()
        torch.manual_seed(0)
        assert not torch.equal(model(**tiny_inputs()).logits, first)  # dropout acts only once asked for
