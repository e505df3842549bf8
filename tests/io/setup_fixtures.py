"""A model with every kind of piece and a non-default active setup, and the check that a restored model equals it;
shared by test_setup.py and test_hub.py."""

from __future__ import annotations

from typing import Any

import torch

import adapterfusion as af
from adapterfusion.serialization.setup_index import ActiveSetup
from tiny_models import randomise, tiny_encoder, tiny_inputs


def build_setup(dtype: torch.dtype = torch.float64, encoder: torch.nn.Module | None = None) -> af.AdaptedModel:
    """Three adapters (two fused, one Houlsby), a fusion with a temperature schedule, a mask and a late step, two
    heads; fusion active on layer 0 only (layer 1 skipped)."""
    model = af.wrap((encoder if encoder is not None else tiny_encoder()).to(dtype))
    model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4))
    model.add_adapter("b", af.AdapterConfig.pfeiffer(reduction_factor=8))
    model.add_adapter("c", af.AdapterConfig.houlsby(reduction_factor=4))
    model.add_fusion("f", ["a", "b"], af.FusionConfig(temperature=True, temperature_steps=500))
    model.add_head("cls", af.ClassificationHead(num_labels=3))
    model.add_head("reg", af.RegressionHead())
    site_modules = (m for s in model.sites for m in (*s.adapters.values(), *s.fusions.values()))
    for module in [*model.heads.values(), *site_modules]:
        randomise(module, std=0.2)
    model.set_fusion_mask("f", ["b"])
    model.set_fusion_step(137)
    model.activate(fusion="f", head="cls", skip_layers=[1])
    return model.eval()


def outputs(model: af.AdaptedModel) -> torch.Tensor:
    with torch.no_grad():
        return model(**tiny_inputs()).logits


def assert_same_model(restored: af.AdaptedModel, saved: af.AdaptedModel) -> None:
    assert restored.adapter_configs == saved.adapter_configs
    fusions = [{name: model.fusion_setup(name) for name in model.fusion_names} for model in (restored, saved)]
    assert fusions[0] == fusions[1]
    assert {n: h.config for n, h in restored.heads.items()} == {n: h.config for n, h in saved.heads.items()}
    assert ActiveSetup.of(restored) == ActiveSetup.of(saved)
    mine, theirs = restored.state_dict(), saved.state_dict()
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)
    assert torch.equal(outputs(restored), outputs(saved))
    for adapter, head in (("c", "reg"), ("a", "cls")):  # and the other pieces, under another activation
        for model in (restored, saved):
            model.activate(adapter=adapter, head=head)
        assert torch.equal(outputs(restored), outputs(saved))


def fail_call(monkeypatch: Any, target: Any, attribute: str, n: int, error: BaseException) -> None:
    """Make the `n`-th call of target.attribute raise `error` (disk full, Ctrl-C) and the others run."""
    original, calls = getattr(target, attribute), [0]

    def flaky(*args, **kwargs):
        calls[0] += 1
        if calls[0] == n:
            raise error
        return original(*args, **kwargs)

    monkeypatch.setattr(target, attribute, flaky)
