"""Adapters and fusion on encoder-decoders (T5, BART; issue #23): sites in the encoder's layers and in the
decoder's self-attention and feed-forward, numbered on from the encoder's (AdapterHub's global layer index).
Placement is checked against a hand computation from the bare sub-modules in float64: T5's pre-norm blocks carry
r + x + A(x + r) (Pfeiffer); BART's post-norm ones LN(r + x + A(LN(x + r))), LN the norm after the feed-forward."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import transformers
from torch import nn

import adapterfusion as af
from tiny_decoders import (
    EXTRA_SEQ2SEQ_CONFIGS,
    SEQ2SEQ_TYPES,
    randomise_pieces,
    tiny_decoder,
    tiny_decoder_config,
    tiny_decoder_inputs,
)
from tolerances import assert_close

SEQ2SEQ = ("t5", "bart")
# The tests below that name no module take these too; the sites of EXTRA_SEQ2SEQ_CONFIGS' rows (mT5, mBART, Marian,
# Pegasus) are checked by hand in test_more_seq2seq_architectures.py.
EVERY_SEQ2SEQ = (*SEQ2SEQ, *EXTRA_SEQ2SEQ_CONFIGS)


def test_every_encoder_decoder_row_is_tested_here() -> None:
    assert {t for t, spec in af.ARCHITECTURES.items() if spec.decoder is not None} == set(EVERY_SEQ2SEQ)


@pytest.mark.parametrize("model_type", EVERY_SEQ2SEQ)
def test_wrapping_keeps_logits_and_loss_and_numbers_decoder_layers_after_the_encoders(model_type: str) -> None:
    bare = tiny_decoder(model_type, dtype=torch.float64)
    inputs = tiny_decoder_inputs(model_type)
    labels = inputs.pop("decoder_input_ids")
    expected = bare(**inputs, labels=labels)
    model = af.wrap(bare)
    assert model.num_layers == 4 and [site.layer_index for site in model.sites] == [0, 0, 1, 1, 2, 2, 2, 3, 3, 3]
    assert [site.position for site in model.sites[4:7]] == ["attention", "cross", "output"]
    output = model(**inputs, labels=labels)
    assert torch.equal(output.logits, expected.logits) and torch.equal(output.loss, expected.loss)


def _last_decoder_layer(model: af.AdaptedModel) -> nn.Module:
    stack = model.architecture.decoder
    assert stack is not None
    return model.model.base_model.get_submodule(stack.layers)[-1]


@pytest.mark.parametrize("model_type", SEQ2SEQ)
def test_pfeiffer_at_the_decoders_last_feed_forward_by_hand(model_type: str) -> None:
    model = af.wrap(tiny_decoder(model_type, dtype=torch.float64))
    inputs = tiny_decoder_inputs(model_type)
    model.add_adapter("a", af.AdapterConfig.pfeiffer(4, leave_out=[0, 1, 2]))
    randomise_pieces(model, seed=5)
    layer = _last_decoder_layer(model)
    if model_type == "t5":  # layer.2 = T5LayerFF: r + DenseReluDense(layer_norm(r))
        r_module, x_module, out_module, norm = (
            layer.layer[2].layer_norm,
            layer.layer[2].DenseReluDense,
            layer.layer[2],
            None,
        )
    else:  # BART: final_layer_norm(r + fc2(act(fc1(r))))
        r_module, x_module, out_module, norm = layer.fc1, layer.fc2, layer.final_layer_norm, layer.final_layer_norm
    seen: dict[str, torch.Tensor] = {}
    hooks = [
        r_module.register_forward_pre_hook(lambda m, args: seen.__setitem__("r", args[0])),
        x_module.register_forward_hook(lambda m, args, out: seen.__setitem__("x", out)),
        out_module.register_forward_hook(lambda m, args, out: seen.__setitem__("out", out)),
    ]
    with torch.no_grad():
        model(**inputs)
        r, x = seen["r"], seen["x"]
        adapter = model.sites_with_adapter("a")[0].adapters["a"]
        down, up = adapter.down, adapter.up

        def bottleneck(value: torch.Tensor) -> torch.Tensor:
            return torch.relu(value @ down.weight.T + down.bias) @ up.weight.T + up.bias

        if norm is None:
            expected = r + x + bottleneck(x + r)
        else:
            expected = norm(r + x + bottleneck(norm(x + r)))
        model.activate(adapter="a")
        model(**inputs)
    for hook in hooks:
        hook.remove()
    assert model.sites_with_adapter("a")[0].layer_index == 3
    assert_close(seen["out"], expected, dtype=torch.float64)


@pytest.mark.parametrize("model_type", SEQ2SEQ)
def test_pfeiffer_after_the_decoders_last_cross_attention_by_hand(model_type: str) -> None:
    """positions=('cross',): the adapter sits after each decoder layer's cross-attention only, placed as at the
    other sites (AdapterHub's cross_adapter)."""
    model = af.wrap(tiny_decoder(model_type, dtype=torch.float64))
    inputs = tiny_decoder_inputs(model_type)
    model.add_adapter("a", af.AdapterConfig.pfeiffer(4, positions=("cross",), leave_out=[2]))
    randomise_pieces(model, seed=5)
    assert [site.key for site in model.sites_with_adapter("a")] == ["layer.3.cross"]
    layer = _last_decoder_layer(model)
    if model_type == "t5":  # layer.1 = T5LayerCrossAttention: r + EncDecAttention(layer_norm(r), encoder states)
        r_module, x_module, out_module, norm = (
            layer.layer[1].layer_norm,
            layer.layer[1].EncDecAttention,
            layer.layer[1],
            None,
        )
    else:  # BART: encoder_attn_layer_norm(r + encoder_attn(r, encoder states))
        r_module, x_module = layer.encoder_attn, layer.encoder_attn
        out_module = norm = layer.encoder_attn_layer_norm
    seen: dict[str, torch.Tensor] = {}

    def first(value: Any) -> torch.Tensor:
        return value[0] if isinstance(value, tuple) else value

    hooks = [
        r_module.register_forward_pre_hook(lambda m, args: seen.__setitem__("r", args[0])),
        x_module.register_forward_hook(lambda m, args, out: seen.__setitem__("x", first(out))),
        out_module.register_forward_hook(lambda m, args, out: seen.__setitem__("out", first(out))),
    ]
    with torch.no_grad():
        model(**inputs)
        r, x = seen["r"], seen["x"]
        adapter = model.sites_with_adapter("a")[0].adapters["a"]

        def bottleneck(value: torch.Tensor) -> torch.Tensor:
            return torch.relu(value @ adapter.down.weight.T + adapter.down.bias) @ adapter.up.weight.T + adapter.up.bias

        expected = r + x + bottleneck(x + r) if norm is None else norm(r + x + bottleneck(norm(x + r)))
        model.activate(adapter="a")
        model(**inputs)
    for hook in hooks:
        hook.remove()
    assert_close(seen["out"], expected, dtype=torch.float64)


def test_a_cross_position_needs_cross_attention() -> None:
    model = af.wrap(tiny_decoder("llama"))
    with pytest.raises(af.ConfigError, match="cross-attention"):
        model.add_adapter("a", af.AdapterConfig.pfeiffer(positions=("cross", "output")))
    assert "a" not in model.adapter_configs


@pytest.mark.parametrize(
    ("model_type", "words"),
    [
        ("bart", "whose block applies its LayerNorm after the sub-layer itself"),
        ("t5", "whose pre-norm block adds the residual stream after the sub-layer itself"),
        ("llama", "whose pre-norm block adds the residual stream after the sub-layer itself"),
    ],
)
def test_original_ln_after_false_is_refused_for_the_block_the_site_is_in(model_type: str, words: str) -> None:
    """BART's blocks are post-norm: its fc2 site (which takes the residual stream from fc1's input) was refused as
    a "pre-norm block"; T5's and Llama's are pre-norm."""
    model = af.wrap(tiny_decoder(model_type))
    for positions in (("attention",), ("output",)):
        with pytest.raises(af.ConfigError, match="original_ln_after=False is impossible") as caught:
            model.add_adapter("a", af.AdapterConfig.pfeiffer(positions=positions, original_ln_after=False))
        message = str(caught.value)
        assert words in message, message
        assert model_type != "bart" or "pre-norm" not in message
    assert "a" not in model.adapter_configs


# adapter config -> the fusion sites it gives on 2 encoder + 2 decoder layers
FUSED_SITES = {
    "pfeiffer": dict(positions=("output",), sites=4),
    "houlsby": dict(positions=("attention", "output"), sites=8),
    "pfeiffer after cross-attention too": dict(positions=("cross", "output"), sites=6),  # the decoder's 2 cross sites
}


@pytest.mark.parametrize("model_type", EVERY_SEQ2SEQ)
@pytest.mark.parametrize("adapter", list(FUSED_SITES))
def test_fusion_fast_path_equals_the_literal_reference_on_encoder_decoders(model_type: str, adapter: str) -> None:
    model = af.wrap(tiny_decoder(model_type, dtype=torch.float64))
    positions, sites = FUSED_SITES[adapter]["positions"], FUSED_SITES[adapter]["sites"]
    preset = adapter.split()[0]
    for name in ("a", "b"):
        config = af.AdapterConfig.from_name(preset, reduction_factor=4, train_layer_norm=False, positions=positions)
        model.add_adapter(name, config)
    model.add_fusion("f", ["a", "b"])
    randomise_pieces(model, seed=5)
    model.activate(fusion="f")
    inputs = tiny_decoder_inputs(model_type)
    with torch.no_grad():
        fast = model(**inputs, output_fusion_attentions=True)
        model.set_fusion_implementation("reference")
        reference = model(**inputs, output_fusion_attentions=True)
    assert_close(fast.logits, reference.logits, dtype=torch.float64)
    assert len(fast.fusion_attentions_by_site) == sites
    for key, weights in fast.fusion_attentions_by_site.items():
        assert_close(weights, reference.fusion_attentions_by_site[key], dtype=torch.float64, label=str(key))


@pytest.mark.parametrize("model_type", EVERY_SEQ2SEQ)
def test_seq2seq_generation_with_the_cache_equals_generation_without_it(model_type: str) -> None:
    model = af.wrap(tiny_decoder(model_type, dtype=torch.float64))
    for name in ("a", "b"):  # at every site, cross-attention's included (whose keys come from the cache)
        model.add_adapter(name, af.AdapterConfig.pfeiffer(4, positions=("attention", "cross", "output")))
    model.add_fusion("f", ["a", "b"])
    randomise_pieces(model, seed=5)
    model.activate(fusion="f")
    inputs = tiny_decoder_inputs(model_type)
    inputs.pop("decoder_input_ids")
    options = dict(max_new_tokens=5, do_sample=False, num_beams=1)
    cached = model.generate(**inputs, use_cache=True, **options)
    assert torch.equal(cached, model.generate(**inputs, use_cache=False, **options))
    model.activate()
    assert not torch.equal(cached, model.generate(**inputs, **options))


def test_t5_encoder_alone_is_refused_naming_what_to_load() -> None:
    """T5EncoderModel shares model_type 't5' with the whole model but has no decoder: the error says so, instead of
    blaming the transformers version alone."""
    encoder_only = transformers.T5EncoderModel(tiny_decoder_config("t5"))
    with pytest.raises(af.UnsupportedArchitectureError, match="T5EncoderModel, has no decoder.*AutoModelForSeq2SeqLM"):
        af.wrap(encoder_only)


@pytest.mark.parametrize("model_type", SEQ2SEQ_TYPES)
def test_a_fusion_only_at_cross_attention_is_in_fusion_attentions(model_type: str) -> None:
    """fusion_attentions[layer] falls back from 'output' and 'attention' to the 'cross' site: a fusion of adapters
    placed only after cross-attention shows in the per-layer tuple, not only per site."""
    model = af.wrap(tiny_decoder(model_type))
    for name in ("a", "b"):
        model.add_adapter(name, {"positions": ["cross"]})
    model.add_fusion("f", ["a", "b"])
    model.activate(fusion="f")
    output = model(**tiny_decoder_inputs(model_type), output_fusion_attentions=True)
    by_site = output.fusion_attentions_by_site
    assert by_site and all(position == "cross" for _, position in by_site)
    for layer, weights in enumerate(output.fusion_attentions):
        assert weights is by_site.get((layer, "cross"))
