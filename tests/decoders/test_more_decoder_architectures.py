"""The decoder rows beyond issue #23's (tests/tiny_decoders.py EXTRA_DECODER_CONFIGS), each checked as
test_decoder_sites.py checks those: wrapping changes nothing, Pfeiffer and Houlsby equal the hand computation from the
bare model's own sub-modules (float64), fusion's fast path equals its literal reference, greedy generation with the
KV cache equals generation without it, and a saved setup and a classification head work.

The hand computation: r is the residual stream (the input of the module the row takes it from: the norm in front of
the sub-layer, or OLMo2's sub-layer itself), x the sub-layer's output, P the block's post-norm of x (identity where it
has none); the layer then carries r + P(x + A(P(x + r))) for Pfeiffer and r + P(x + A(x)) for Houlsby.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from test_decoder_sites import _bottleneck, _capture, _fused, _generating, _left_padded
from torch import nn
from torch.nn import functional as F

import adapterfusion as af
from tiny_decoders import (
    EXTRA_DECODER_CONFIGS,
    HIDDEN,
    LAYERS,
    randomise_pieces,
    tiny_decoder,
    tiny_decoder_config,
    tiny_decoder_inputs,
)
from tolerances import assert_close

_LLAMA = ("self_attn", "input_layernorm", "mlp", "post_attention_layernorm", None)
# model_type -> (attention sub-layer, where r comes from, feed-forward sub-layer, where r comes from,
#                (post-norm of the attention output, of the feed-forward output) or None); layers are `layers`.
BLOCKS: dict[str, tuple[str, str, str, str, tuple[str, str] | None]] = {
    "starcoder2": _LLAMA,
    "olmo": _LLAMA,
    "smollm3": _LLAMA,
    "helium": _LLAMA,
    "glm": _LLAMA,
    "mixtral": _LLAMA,
    "qwen2_moe": _LLAMA,
    "qwen3_moe": _LLAMA,
    "glm4": (
        "self_attn",
        "input_layernorm",
        "mlp",
        "post_attention_layernorm",
        ("post_self_attn_layernorm", "post_mlp_layernorm"),
    ),
    "olmo2": ("self_attn", "self_attn", "mlp", "mlp", ("post_attention_layernorm", "post_feedforward_layernorm")),
}
DECODERS = tuple(BLOCKS)
MIXTURES_OF_EXPERTS = ("mixtral", "qwen2_moe", "qwen3_moe")


def test_the_table_covers_every_extra_tiny_decoder() -> None:
    assert set(DECODERS) == set(EXTRA_DECODER_CONFIGS)
    assert all(af.ARCHITECTURES[t].causal and not af.ARCHITECTURES[t].in_adapterhub for t in DECODERS)
    for model_type in DECODERS:
        config = tiny_decoder_config(model_type)
        assert (config.model_type, config.hidden_size, config.num_hidden_layers) == (model_type, HIDDEN, LAYERS)


def _unchanged(value: torch.Tensor) -> torch.Tensor:
    return value


def _post_norms(layer: nn.Module, model_type: str) -> tuple[Any, Any]:
    names = BLOCKS[model_type][4]
    if names is None:
        return _unchanged, _unchanged
    return layer.get_submodule(names[0]), layer.get_submodule(names[1])


def _pre_norm(layer: nn.Module, model_type: str) -> Any:
    """The norm the block applies to r in front of the feed-forward (none where r itself goes in: OLMo2)."""
    _, _, ffn, source, _ = BLOCKS[model_type]
    return _unchanged if source == ffn else layer.get_submodule(source)


@pytest.mark.parametrize("model_type", DECODERS)
def test_wrapping_keeps_logits_and_loss(model_type: str) -> None:
    bare = tiny_decoder(model_type, dtype=torch.float64)
    inputs = tiny_decoder_inputs(model_type)
    labels = inputs["input_ids"].masked_fill(inputs["attention_mask"] == 0, -100)
    moe = {"output_router_logits": True} if model_type in MIXTURES_OF_EXPERTS else {}
    expected = bare(**inputs, labels=labels, **moe)
    model = af.wrap(bare)
    assert len(model.sites) == 2 * model.num_layers
    output = model(**inputs, labels=labels, **moe)
    assert torch.equal(output.logits, expected.logits)
    assert torch.equal(output.loss, expected.loss)  # with the routers' auxiliary loss where `moe` asks for it
    if moe:  # transformers still finds the routers inside the wrapped `mlp`
        assert len(output.router_logits) == len(expected.router_logits) > 0
        assert torch.equal(output.aux_loss, expected.aux_loss)


@pytest.mark.parametrize("model_type", DECODERS)
def test_pfeiffer_is_r_plus_post_norm_of_x_plus_adapter(model_type: str) -> None:
    """Adapter at the last layer's feed-forward only (on the MoE rows a mixture of experts)."""
    model = af.wrap(tiny_decoder(model_type, dtype=torch.float64))
    inputs = tiny_decoder_inputs(model_type)
    last = model.num_layers - 1
    model.add_adapter("a", af.AdapterConfig.pfeiffer(4, leave_out=list(range(last))))
    randomise_pieces(model, seed=3)
    _, _, ffn, source, _ = BLOCKS[model_type]
    layer = model.model.base_model.layers[last]
    seen: dict[str, torch.Tensor] = {}
    hooks = [
        _capture(layer.get_submodule(source), seen, "r", input_=True),
        _capture(layer.get_submodule(ffn), seen, "x", input_=False),
        _capture(layer, seen, "out", input_=False),
    ]
    with torch.no_grad():
        model(**inputs)  # nothing active: the bare model
        r, x = seen["r"], seen["x"]
        adapter = model.sites_with_adapter("a")[0].adapters["a"]
        _, post = _post_norms(layer, model_type)
        expected = r + post(x + _bottleneck(adapter, post(x + r), torch.relu))
        model.activate(adapter="a")
        model(**inputs)
    for hook in hooks:
        hook.remove()
    assert_close(seen["out"], expected, dtype=torch.float64)
    assert (seen["out"] - (r + post(x))).abs().max() > 1e-3


@pytest.mark.parametrize("model_type", DECODERS)
def test_houlsby_is_r_plus_post_norm_of_x_plus_adapter_of_x(model_type: str) -> None:
    """Houlsby at layer 0's attention and feed-forward; layer 0's output from the bare sub-modules by hand."""
    model = af.wrap(tiny_decoder(model_type, dtype=torch.float64))
    inputs = tiny_decoder_inputs(model_type)
    model.add_adapter("h", af.AdapterConfig.houlsby(4, leave_out=list(range(1, model.num_layers))))
    randomise_pieces(model, seed=3)
    attention, source, ffn, _, _ = BLOCKS[model_type]
    layer = model.model.base_model.layers[0]
    seen: dict[str, torch.Tensor] = {}
    hooks = [
        _capture(layer.get_submodule(source), seen, "r", input_=True),
        _capture(layer.get_submodule(attention), seen, "x", input_=False),
        _capture(layer, seen, "out", input_=False),
    ]
    with torch.no_grad():
        model(**inputs)
        r, x = seen["r"], seen["x"]
        attention_adapter, ffn_adapter = (site.adapters["h"] for site in model.sites_with_adapter("h"))
        after_attention, after_ffn = _post_norms(layer, model_type)
        middle = r + after_attention(x + _bottleneck(attention_adapter, x, F.silu))
        ffn_out = layer.get_submodule(ffn)(_pre_norm(layer, model_type)(middle))  # inactive site: the bare MLP
        expected = middle + after_ffn(ffn_out + _bottleneck(ffn_adapter, ffn_out, F.silu))
        model.activate(adapter="h")
        model(**inputs)
    for hook in hooks:
        hook.remove()
    assert_close(seen["out"], expected, dtype=torch.float64)


@pytest.mark.parametrize("model_type", DECODERS)
@pytest.mark.parametrize("adapter", ["pfeiffer", "houlsby"])
def test_fusion_fast_path_equals_the_literal_reference(model_type: str, adapter: str) -> None:
    model = _fused(model_type, adapter)
    inputs = tiny_decoder_inputs(model_type)
    with torch.no_grad():
        fast = model(**inputs, output_fusion_attentions=True)
        model.set_fusion_implementation("reference")
        reference = model(**inputs, output_fusion_attentions=True)
    assert_close(fast.logits, reference.logits, dtype=torch.float64)
    assert len(fast.fusion_attentions_by_site) == (2 if adapter == "houlsby" else 1) * model.num_layers
    for key, weights in fast.fusion_attentions_by_site.items():
        assert_close(weights, reference.fusion_attentions_by_site[key], dtype=torch.float64)


@pytest.mark.parametrize("model_type", DECODERS)
def test_greedy_generation_with_the_cache_equals_generation_without_it(model_type: str) -> None:
    """On a left-padded batch (SDPA attention, as test_decoder_sites.py's _generating explains)."""
    model = _generating(model_type)
    inputs = _left_padded(model_type)
    options = dict(max_new_tokens=5, do_sample=False, pad_token_id=0)
    cached = model.generate(**inputs, use_cache=True, **options)
    uncached = model.generate(**inputs, use_cache=False, **options)
    assert torch.equal(cached, uncached)
    model.activate()
    assert not torch.equal(model.generate(**inputs, **options), cached)  # the fusion changed what is generated


@pytest.mark.parametrize("model_type", DECODERS)
def test_a_setup_saves_and_loads_to_the_same_outputs(model_type: str, tmp_path: Path) -> None:
    model = _fused(model_type).eval()
    inputs = tiny_decoder_inputs(model_type)
    with torch.no_grad():
        expected = model(**inputs).logits
    model.save_pretrained(tmp_path / "setup")
    again = af.AdaptedModel.from_pretrained(tiny_decoder(model_type, dtype=torch.float64), tmp_path / "setup").eval()
    assert again.active_fusion == "f" and again.adapter_names == model.adapter_names
    with torch.no_grad():
        assert torch.equal(again(**inputs).logits, expected)


@pytest.mark.parametrize("model_type", DECODERS)
def test_a_classification_head_pools_each_rows_last_token(model_type: str) -> None:
    """Left-padded rows: each row's logits equal the head on that row alone, unpadded."""
    model = _generating(model_type)
    model.add_head("cls", af.ClassificationHead(num_labels=3, pooling="last"))
    model.activate(fusion="f", head="cls")
    inputs = _left_padded(model_type)
    with torch.no_grad():
        logits = model(**inputs).logits
        assert logits.shape == (2, 3)
        for row, (ids, mask) in enumerate(zip(inputs["input_ids"], inputs["attention_mask"], strict=True)):
            alone = model(input_ids=ids[mask.bool()][None]).logits[0]
            assert_close(logits[row], alone, dtype=torch.float64, label=f"row {row}")
