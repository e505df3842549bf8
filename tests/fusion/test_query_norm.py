"""FusionConfig(query_norm=True): the fusion's query at unit root mean square before Q, checked against the site
equation written out by hand on a decoder (where the option is for: the query there is the raw residual stream),
in both implementations and inside `inference_cache()`, and saved, loaded and refused for AdapterHub's format."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import adapterfusion as af
from adapterfusion.errors import ConfigError
from adapterfusion.interop import export_adapterhub
from tiny_decoders import randomise_pieces, tiny_decoder, tiny_decoder_inputs
from tolerances import assert_close

NAMES = ("a", "b", "c")


def _fused_last_layer(query_norm: bool) -> af.AdaptedModel:
    """A float64 Llama with Pfeiffer adapters and a fusion at the last layer's feed-forward only."""
    model = af.wrap(tiny_decoder("llama", dtype=torch.float64))
    last = model.num_layers - 1
    for name in NAMES:
        model.add_adapter(name, af.AdapterConfig.pfeiffer(4, leave_out=list(range(last))))
    model.add_fusion("f", list(NAMES), af.FusionConfig.dynamic(query_norm=query_norm))
    randomise_pieces(model, seed=5)
    with torch.no_grad():  # a query large enough that its scale would decide the softmax without the option
        for site in model.sites_with_adapter("a"):
            site.fusions["f"].query.weight.mul_(3.0)
    model.activate(fusion="f")
    return model


def _by_hand(model: af.AdaptedModel, inputs: dict[str, torch.Tensor], query_norm: bool) -> tuple[torch.Tensor, ...]:
    """The last layer's output and fusion weights from the bare sub-modules: x the feed-forward output, r the
    residual before it, u = x + r the adapters' input and the query (normalised with the option), z_n = A_n(u),
    s = softmax_n((Q u' + b_Q)·(K z_n + b_K)), out = r + x + sum_n s_n V z_n."""
    layer = model.model.model.layers[-1]
    seen: dict[str, torch.Tensor] = {}
    hooks = [
        layer.post_attention_layernorm.register_forward_pre_hook(lambda m, args: seen.__setitem__("r", args[0])),
        layer.mlp.register_forward_hook(lambda m, args, out: seen.__setitem__("x", out)),
    ]
    with torch.no_grad(), model.activated():  # nothing active: the bare model's x and r
        model(**inputs)
    for hook in hooks:
        hook.remove()
    r, x = seen["r"], seen["x"]
    u = x + r
    query = u / u.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt() if query_norm else u
    site = model.sites_with_adapter("a")[-1]
    fusion = site.fusions["f"]
    deltas = []
    for name in NAMES:
        adapter = site.adapters[name]
        deltas.append(torch.relu(u @ adapter.down.weight.T + adapter.down.bias) @ adapter.up.weight.T + adapter.up.bias)
    q = query @ fusion.query.weight.T + fusion.query.bias
    scores = torch.stack([(q * (z @ fusion.key.weight.T + fusion.key.bias)).sum(-1) for z in deltas], dim=-1)
    weights = scores.softmax(-1)
    mixed = sum(weights[..., n : n + 1] * (z @ fusion.value.weight.T) for n, z in enumerate(deltas))
    return r + x + mixed, weights


def _last_layer_output(model: af.AdaptedModel, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    seen: dict[str, torch.Tensor] = {}
    layer = model.model.model.layers[-1]
    hook = layer.register_forward_hook(
        lambda m, args, out: seen.__setitem__("out", out[0] if isinstance(out, tuple) else out)
    )
    with torch.no_grad():
        out = model(**inputs, output_fusion_attentions=True)
    hook.remove()
    return seen["out"], out.fusion_attentions[-1]


@pytest.mark.parametrize("implementation", ["fast", "reference"])
def test_the_normalised_query_is_the_site_equation_by_hand(implementation: str) -> None:
    model = _fused_last_layer(query_norm=True)
    model.set_fusion_implementation(implementation)
    inputs = tiny_decoder_inputs("llama")
    expected_out, expected_weights = _by_hand(model, inputs, query_norm=True)
    out, weights = _last_layer_output(model, inputs)
    assert_close(out, expected_out, dtype=torch.float64)
    assert_close(weights, expected_weights, dtype=torch.float64)
    with model.inference_cache():  # no inference lane covers the option: the general path, the same numbers
        cached, _ = _last_layer_output(model, inputs)
    assert_close(cached, expected_out, dtype=torch.float64)
    # The option changes the weights: the raw query gives others (the hand equation without it agrees with them).
    raw_model = _fused_last_layer(query_norm=False)
    _, raw_weights = _last_layer_output(raw_model, inputs)
    assert_close(raw_weights, _by_hand(raw_model, inputs, query_norm=False)[1], dtype=torch.float64)
    assert (raw_weights - weights).abs().max() > 1e-2


def test_fast_and_reference_gradients_agree_with_the_normalised_query() -> None:
    model = _fused_last_layer(query_norm=True)
    model.train_fusion("f")
    model.eval()
    inputs = tiny_decoder_inputs("llama")
    labels = inputs["input_ids"].masked_fill(inputs["attention_mask"] == 0, -100)
    grads = {}
    for implementation in ("reference", "fast"):
        model.set_fusion_implementation(implementation)
        model.zero_grad()
        model(**inputs, labels=labels).loss.backward()
        grads[implementation] = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    assert grads["fast"].keys() == grads["reference"].keys() and grads["fast"]
    for name, grad in grads["reference"].items():
        if not name.endswith("key.bias"):  # zero up to rounding in both (the softmax cancels it)
            assert_close(grads["fast"][name], grad, dtype=torch.float64, label=name)


def test_the_option_is_saved_loaded_and_written_only_when_set(tmp_path: Path) -> None:
    assert "query_norm" not in af.FusionConfig.dynamic().to_dict()  # older configs and their hashes stay as they were
    config = af.FusionConfig.dynamic(query_norm=True)
    assert config.to_dict()["query_norm"] is True
    assert af.FusionConfig.from_dict(config.to_dict()) == config
    model = _fused_last_layer(query_norm=True)
    model.save_pretrained(tmp_path / "setup")
    restored = af.AdaptedModel.from_pretrained(tiny_decoder("llama", dtype=torch.float64), tmp_path / "setup")
    assert restored.fusion_setup("f").config == config
    with pytest.raises(ConfigError, match="query_norm=True cannot be exported to AdapterHub"):
        export_adapterhub(model, "fusion", "f", tmp_path / "hub")
    with pytest.raises(ConfigError, match="query_norm"):
        af.FusionConfig.dynamic(query_norm="yes")
    with pytest.raises(ConfigError, match="does not use"):
        af.FusionConfig.scalearn(query_norm=True)
