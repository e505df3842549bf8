"""Fusion exactness in float64: fast == reference with score dropout on in training, and every trainable
parameter gets a gradient (DDP with find_unused_parameters=False needs that)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModel

import adapterfusion as af
from adapterfusion.fusion import FusionConfig, FusionLayer, fuse_fast, fuse_reference
from conftest import tiny_encoder, tiny_inputs

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "adapterhub" / "bert"
# float64 only: exactness, not kernel rounding, is what these tests check.
TIGHT = dict(rtol=1e-10, atol=1e-10)


def _adapted(preset: str, names: tuple[str, ...], fusion: FusionConfig, value_identity: bool = False,
             model_type: str = "bert") -> af.AdaptedModel:
    """A float64 tiny encoder with random adapters (their LayerNorm copies moved away from the pretrained
    ones), random Q/K (biases included) and a fusion over `names`."""
    model = af.wrap(tiny_encoder(model_type).double())
    for name in names:
        model.add_adapter(name, af.AdapterConfig.from_name(preset, reduction_factor=4))
        with torch.no_grad():
            for parameter in model.adapter_parameters(name):
                parameter.add_(torch.randn_like(parameter) * 0.3)
    model.add_fusion("f", names, fusion)
    with torch.no_grad():
        for site in model.sites_with_fusion("f"):
            layer = site.fusions["f"]
            for linear in (layer.query, layer.key):
                if linear is not None:
                    linear.weight.normal_(0.0, 0.3)
                    linear.bias.normal_(0.0, 0.3)
            if layer.value is not None:
                eye = torch.eye(layer.hidden_size, dtype=torch.float64)
                layer.value.weight.copy_(eye if value_identity else eye + torch.randn_like(eye) * 0.2)
    model.add_head("h", af.ClassificationHead(num_labels=3, dropout=0.0))
    return model.eval()


# ---- score dropout ------------------------------------------------------------------------------------------
FUSION_OPTIONS = {
    "dynamic": FusionConfig.dynamic(score_dropout=0.3),
    "static": FusionConfig.static(score_dropout=0.3),
    "residual-before": FusionConfig.dynamic(score_dropout=0.3, residual_before=True),
    "no-query": FusionConfig(query=False, score_dropout=0.3),
    "temperature": FusionConfig.dynamic(score_dropout=0.3, temperature=True, temperature_start=3.0),
}


@pytest.mark.parametrize("option", FUSION_OPTIONS)
def test_fast_equals_reference_with_score_dropout_in_training(option: str) -> None:
    torch.manual_seed(0)
    d = 24
    adapters = [af.BottleneckAdapter(d, size, af.AdapterConfig(non_linearity="relu")).double() for size in (6, 3, 9)]
    layer = FusionLayer(d, FUSION_OPTIONS[option]).double().train()
    with torch.no_grad():
        for module, std in ((adapters[0], 0.5), (adapters[1], 0.5), (adapters[2], 0.5), (layer, 0.1)):
            for parameter in module.parameters():
                parameter.add_(torch.randn_like(parameter) * std)
    x, query, residual = (torch.randn(4, 7, d, dtype=torch.float64) for _ in range(3))
    without_dropout = fuse_reference(layer.eval(), adapters, x, query, residual, temperature=2.0)[1]
    layer.train()
    results = []
    for fuse in (fuse_reference, fuse_fast):
        layer.zero_grad()
        torch.manual_seed(123)  # the same dropout mask for both paths
        out, probs = fuse(layer, adapters, x, query, residual, temperature=2.0)
        (out * torch.linspace(-1, 1, d, dtype=torch.float64)).sum().backward()
        results.append((out, probs, {n: p.grad.clone() for n, p in layer.named_parameters()}))
    (ref_out, ref_probs, ref_grads), (fast_out, fast_probs, fast_grads) = results
    assert not torch.allclose(ref_probs, without_dropout), "dropout must change the attention"
    torch.testing.assert_close(fast_probs, ref_probs, **TIGHT)
    torch.testing.assert_close(fast_out, ref_out, **TIGHT)
    for name, grad in ref_grads.items():
        torch.testing.assert_close(fast_grads[name], grad, **TIGHT, msg=name)


def test_imported_adapterhub_fusion_fast_equals_reference_in_training() -> None:
    """The AdapterHub import sets score_dropout to the encoder's attention dropout (0.1); training mode."""
    model = af.wrap(AutoModel.from_pretrained(FIXTURES / "base_model").double())
    for adapter in ("pf", "pf_relu", "pf3"):
        model.load_adapter(FIXTURES / "adapters" / adapter)
    name = model.load_fusion(FIXTURES / "fusions" / "dynamic")
    assert model.fusion_setups[name][0].score_dropout == 0.1
    model.load_head(FIXTURES / "heads" / "cls")
    model.train_fusion(name, head="cls")
    model.train()
    inputs = tiny_inputs(batch=4, seq=9)
    results = {}
    for implementation in ("reference", "fast"):
        model.set_fusion_implementation(implementation)
        model.zero_grad()
        torch.manual_seed(7)  # the same dropout masks (encoder and fusion scores) for both paths
        out = model(**inputs, labels=torch.tensor([0, 1, 1, 0]), output_fusion_attentions=True)
        out.loss.backward()
        results[implementation] = (out, {n: p.grad for n, p in model.named_parameters() if p.requires_grad})
    (ref, ref_grads), (fast, fast_grads) = results["reference"], results["fast"]
    for ref_attention, fast_attention in zip(ref.fusion_attentions, fast.fusion_attentions):
        torch.testing.assert_close(fast_attention, ref_attention, **TIGHT)
    torch.testing.assert_close(fast.logits, ref.logits, **TIGHT)
    for name, grad in ref_grads.items():
        torch.testing.assert_close(fast_grads[name], grad, **TIGHT, msg=name)


# ---- every trainable parameter gets a gradient --------------------------------------------------------------
@pytest.mark.parametrize("implementation", ["fast", "reference"])
@pytest.mark.parametrize("fusion", ["dynamic", "static", "no-query"])
@pytest.mark.parametrize("preset", ["pfeiffer", "houlsby"])
def test_every_trainable_parameter_gets_a_gradient(preset: str, fusion: str, implementation: str) -> None:
    config = {"dynamic": FusionConfig.dynamic(score_dropout=0.1), "static": FusionConfig.static(),
              "no-query": FusionConfig(query=False)}[fusion]
    model = _adapted(preset, ("a", "b"), config)
    model.train_fusion("f", head="h")
    model.set_fusion_implementation(implementation)
    model.train()
    out = model(**tiny_inputs(), labels=torch.tensor([0, 2]))
    out.loss.backward()
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert any(n.endswith("key.bias") for n in trainable)
    missing = sorted(n for n, p in model.named_parameters() if p.requires_grad and p.grad is None)
    assert not missing, f"trainable parameters without a gradient: {missing}"
