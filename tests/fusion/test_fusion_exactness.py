"""Fusion exactness in float64: a one-adapter fusion with V = I is the adapter alone (Houlsby's own LayerNorm
copies included), fusion over Houlsby adapters against a hand-written site equation, fast == reference with
score dropout on in training, and every trainable parameter gets a gradient (DDP with
find_unused_parameters=False needs that)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModel

import adapterfusion as af
from adapterfusion.fusion import FusionConfig, FusionLayer, fuse_fast, fuse_reference
from tiny_models import tiny_encoder, tiny_inputs

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "adapterhub" / "bert"
# float64 only: exactness, not kernel rounding, is what these tests check.
TIGHT = dict(rtol=1e-10, atol=1e-10)


def _adapted(
    preset: str,
    names: tuple[str, ...],
    fusion: FusionConfig,
    value_identity: bool = False,
    without_copy: tuple[str, ...] = (),
) -> af.AdaptedModel:
    """A float64 tiny BERT with random adapters (their LayerNorm copies moved away from the pretrained
    ones; none for the adapters in `without_copy`), random Q/K (biases included) and a fusion over `names`."""
    model = af.wrap(tiny_encoder("bert").double())
    for name in names:
        overrides = {"train_layer_norm": False} if name in without_copy else {}
        model.add_adapter(name, af.AdapterConfig.from_name(preset, reduction_factor=4, **overrides))
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


@pytest.mark.parametrize("implementation", ["fast", "reference"])
@pytest.mark.parametrize("preset", ["pfeiffer", "houlsby"])
def test_one_adapter_fusion_with_identity_value_is_the_adapter_alone(preset: str, implementation: str) -> None:
    model = _adapted(preset, ("a",), FusionConfig.dynamic(), value_identity=True)
    if preset == "houlsby":
        site = model.sites_with_adapter("a")[0]
        assert not torch.equal(site.adapters["a"].layer_norm.weight, site.pretrained_layer_norm.weight)
    inputs = tiny_inputs()
    model.set_fusion_implementation(implementation)
    with torch.no_grad():
        model.activate(adapter="a")
        alone = model(**inputs).last_hidden_state
        model.activate(fusion="f")
        fused = model(**inputs).last_hidden_state
    torch.testing.assert_close(fused, alone, **TIGHT)


@pytest.mark.parametrize("implementation", ["fast", "reference"])
@pytest.mark.parametrize("without_copy", [(), ("b",)], ids=["all-copies", "b-without-copy"])
def test_houlsby_fusion_is_the_site_equation_with_each_adapters_layer_norm(
    implementation: str, without_copy: tuple[str, ...]
) -> None:
    """Written out by hand at one BERT output site: o = sum_n s_n V z_n + h, then sum_n s_n LN_n(o + r),
    LN_n the adapter's own trained LayerNorm copy (the pretrained LayerNorm for an adapter without one): the
    attention-weighted mix of the LayerNorms each adapter ends with when it runs alone."""
    names = ("a", "b", "c")
    model = _adapted("houlsby", names, FusionConfig.dynamic(), without_copy=without_copy)
    site = model.sites[1]  # layer 0, 'output'
    adapters = [site.adapters[n] for n in names]
    ends = [a.layer_norm if a.layer_norm is not None else site.base_layer.LayerNorm for a in adapters]
    assert [n for n, norm in zip(names, ends, strict=True) if norm is site.base_layer.LayerNorm] == list(without_copy)
    layer = site.fusions["f"]
    base = site.base_layer
    generator = torch.Generator().manual_seed(5)
    hidden = torch.randn(2, 5, 64, dtype=torch.float64, generator=generator)
    r = torch.randn(2, 5, 32, dtype=torch.float64, generator=generator)
    model.activate(fusion="f")
    model.set_fusion_implementation(implementation)
    with torch.no_grad():
        actual = site(hidden, r)
        h = F.linear(hidden, base.dense.weight, base.dense.bias)
        z = [F.linear(F.silu(F.linear(h, a.down.weight, a.down.bias)), a.up.weight, a.up.bias) for a in adapters]
        q = F.linear(h, layer.query.weight, layer.query.bias)
        scores = torch.stack([(q * F.linear(z_n, layer.key.weight, layer.key.bias)).sum(-1) for z_n in z], -1)
        s = scores.softmax(-1)
        o = sum(s[..., n, None] * F.linear(z[n], layer.value.weight) for n in range(3)) + h
        norms = [F.layer_norm(o + r, (32,), norm.weight, norm.bias, norm.eps) for norm in ends]
        expected = sum(s[..., n, None] * norms[n] for n in range(3))
    torch.testing.assert_close(actual, expected, **TIGHT)


def test_houlsby_fusion_fast_equals_reference_in_the_whole_model() -> None:
    model = _adapted("houlsby", ("a", "b", "c"), FusionConfig.dynamic())
    model.train_fusion("f", head="h")
    model.eval()
    inputs = tiny_inputs(batch=3, seq=9)
    labels = torch.tensor([0, 2, 1])
    results = {}
    for implementation in ("reference", "fast"):
        model.set_fusion_implementation(implementation)
        model.zero_grad()
        out = model(**inputs, labels=labels)
        out.loss.backward()
        results[implementation] = (
            out.last_hidden_state,
            {n: p.grad for n, p in model.named_parameters() if p.grad is not None},
        )
    (ref, ref_grads), (fast, fast_grads) = results["reference"], results["fast"]
    torch.testing.assert_close(fast, ref, **TIGHT)
    assert ref_grads.keys() == fast_grads.keys()
    for name, grad in ref_grads.items():
        torch.testing.assert_close(fast_grads[name], grad, **TIGHT, msg=name)


def test_fusion_refuses_layer_norm_copies_before_the_adapters() -> None:
    """With original_ln_before each adapter would see its own LN_n(h + r): no single input or query for a fusion."""
    model = af.wrap(tiny_encoder("bert"))
    for name in ("a", "b"):
        model.add_adapter(name, af.AdapterConfig.pfeiffer(train_layer_norm=True))
    with pytest.raises(af.ConfigError, match="train_layer_norm"):
        model.add_fusion("f", ["a", "b"])
    assert "f" not in model.fusion_names


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
    assert model.fusion_setup(name).config.score_dropout == 0.1
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
    for ref_attention, fast_attention in zip(ref.fusion_attentions, fast.fusion_attentions, strict=True):
        torch.testing.assert_close(fast_attention, ref_attention, **TIGHT)
    torch.testing.assert_close(fast.logits, ref.logits, **TIGHT)
    for name, grad in ref_grads.items():
        torch.testing.assert_close(fast_grads[name], grad, **TIGHT, msg=name)


# ---- every trainable parameter gets a gradient --------------------------------------------------------------
@pytest.mark.parametrize("implementation", ["fast", "reference"])
@pytest.mark.parametrize("fusion", ["dynamic", "static", "no-query"])
@pytest.mark.parametrize("preset", ["pfeiffer", "houlsby"])
def test_every_trainable_parameter_gets_a_gradient(preset: str, fusion: str, implementation: str) -> None:
    config = {
        "dynamic": FusionConfig.dynamic(score_dropout=0.1),
        "static": FusionConfig.static(),
        "no-query": FusionConfig(query=False),
    }[fusion]
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
    if implementation == "fast" and config.score_dropout == 0:
        # The softmax cancels the key-bias term: its true gradient, exactly zero, not noise that Adam would amplify.
        key_biases = [p.grad for n, p in model.named_parameters() if n.endswith(".fusions.f.key.bias")]
        assert key_biases and all(torch.equal(grad, torch.zeros_like(grad)) for grad in key_biases)
