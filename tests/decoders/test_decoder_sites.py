"""Adapters and fusion on decoders (issue #23): where the adapter sits in a pre-norm block, checked against a hand
computation from the bare model's own sub-modules; fusion's fast path against its literal reference; generation with
and without the KV cache.

The hand computation (float64): run the bare model with hooks that capture, at one site, the residual stream r (the
input of the norm in front of the sub-layer) and the sub-layer's output x; the adapted model must then carry
r + x + A(x + r) for Pfeiffer (seq_bn) and r + x + A(x) for Houlsby (double_seq_bn), A = up(act(down(.))), as
AdapterHub 1.3.0 computes them on pre-norm blocks (MISSION.md §5; docs/adapterhub.md).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import adapterfusion as af
from adapterfusion.injection.architectures import architecture_for_config, architecture_rows
from tiny_decoders import (
    CONFIG_VARIANTS,
    EXTRA_DECODER_CONFIGS,
    randomise_pieces,
    tiny_decoder,
    tiny_decoder_config,
    tiny_decoder_inputs,
)
from tolerances import assert_close

# model_type -> (layers under base_model, attention sub-layer, its norm, feed-forward sub-layer, its norm)
PRE_NORM_BLOCKS: dict[str, tuple[str, str, str, str, str]] = {
    "gpt2": ("h", "attn", "ln_1", "mlp", "ln_2"),
    "llama": ("layers", "self_attn", "input_layernorm", "mlp", "post_attention_layernorm"),
    "mistral": ("layers", "self_attn", "input_layernorm", "mlp", "post_attention_layernorm"),
    "qwen2": ("layers", "self_attn", "input_layernorm", "mlp", "post_attention_layernorm"),
    "qwen3": ("layers", "self_attn", "input_layernorm", "mlp", "post_attention_layernorm"),
    "gemma": ("layers", "self_attn", "input_layernorm", "mlp", "post_attention_layernorm"),
    "phi3": ("layers", "self_attn", "input_layernorm", "mlp", "post_attention_layernorm"),
    "gemma2": ("layers", "self_attn", "input_layernorm", "mlp", "pre_feedforward_layernorm"),
    "gemma3_text": ("layers", "self_attn", "input_layernorm", "mlp", "pre_feedforward_layernorm"),
    # The rows beyond issue #23's (tiny_decoders.EXTRA_DECODER_CONFIGS); on the mixtures of experts the feed-forward
    # sub-layer is the whole `mlp` (router and experts).
    **{
        model_type: ("layers", "self_attn", "input_layernorm", "mlp", "post_attention_layernorm")
        for model_type in (
            "starcoder2",
            "olmo",
            "smollm3",
            "helium",
            "glm",
            "mixtral",
            "qwen2_moe",
            "qwen3_moe",
            "stablelm",
            "ministral",
            "ernie4_5",
            "seed_oss",
            "gpt_oss",
            "glm4_moe",
            "deepseek_v2",
            "deepseek_v3",
            "granite",
        )
    },
    "granitemoe": ("layers", "self_attn", "input_layernorm", "block_sparse_moe", "post_attention_layernorm"),
    "granitemoeshared_experts_only": (
        "layers",
        "self_attn",
        "input_layernorm",
        "block_sparse_moe",
        "post_attention_layernorm",
    ),
    # The feed-forward is block_sparse_moe(x) + shared_mlp(x) (SUMMED): the site sits on shared_mlp, run second.
    "granitemoeshared": ("layers", "self_attn", "input_layernorm", "shared_mlp", "post_attention_layernorm"),
    "gpt_neo": ("h", "attn", "ln_1", "mlp", "ln_2"),
    "gpt_bigcode": ("h", "attn", "ln_1", "mlp", "ln_2"),
    "olmo3": ("layers", "self_attn", "self_attn", "mlp", "mlp"),
    "exaone4": ("layers", "self_attn", "self_attn", "mlp", "mlp"),
    "cohere2": ("layers", "self_attn", "input_layernorm", "mlp", "input_layernorm"),
    "codegen": ("h", "attn", "ln_1", "mlp", "ln_1"),
    "falcon": ("h", "self_attention", "input_layernorm", "mlp", "post_attention_layernorm"),
    "glm4": ("layers", "self_attn", "input_layernorm", "mlp", "post_attention_layernorm"),
    # OLMo2 has no norm in front of a sub-layer: r is the sub-layer's own input ("norm" = the sub-layer itself).
    "olmo2": ("layers", "self_attn", "self_attn", "mlp", "mlp"),
    # Parallel-residual blocks: one norm in front of both sub-layers (PARALLEL below).
    "gptj": ("h", "attn", "ln_1", "mlp", "ln_1"),
    "phi": ("layers", "self_attn", "input_layernorm", "mlp", "input_layernorm"),
    "cohere": ("layers", "self_attn", "input_layernorm", "mlp", "input_layernorm"),
    "gpt_neox": ("layers", "attention", "input_layernorm", "mlp", "post_attention_layernorm"),
    # The other blocks of model types whose config chooses them (tiny_decoders.CONFIG_VARIANTS).
    "falcon_parallel": ("h", "self_attention", "input_layernorm", "mlp", "input_layernorm"),
    "falcon_new_decoder": ("h", "self_attention", "ln_attn", "mlp", "ln_mlp"),
    "falcon_new_decoder_one_norm": ("h", "self_attention", "input_layernorm", "mlp", "input_layernorm"),
    "stablelm_parallel": ("layers", "self_attn", "input_layernorm", "mlp", "input_layernorm"),
    "gpt_neox_sequential": ("layers", "attention", "input_layernorm", "mlp", "post_attention_layernorm"),
}
# r + attention(N(r)) + mlp(N'(r)) (N' = N but on GPT-NeoX): the feed-forward reads N'(r), not the stream after
# attention, and the block adds both outputs to r. As AdapterHub's GPT-J block does, the feed-forward site's residual
# stream is r + the attention site's output: r + a + x + A(x + r + a) for Pfeiffer, a the attention output.
PARALLEL = (
    "gptj",
    "phi",
    "cohere",
    "cohere2",
    "codegen",
    "gpt_neox",
    "falcon_parallel",
    "falcon_new_decoder",
    "falcon_new_decoder_one_norm",
    "stablelm_parallel",
)
# Blocks that also normalise each sub-layer's output before adding it to r: (after attention, after feed-forward).
POST_NORMS = {
    "gemma2": ("post_attention_layernorm", "post_feedforward_layernorm"),
    "gemma3_text": ("post_attention_layernorm", "post_feedforward_layernorm"),
    "glm4": ("post_self_attn_layernorm", "post_mlp_layernorm"),
    "olmo2": ("post_attention_layernorm", "post_feedforward_layernorm"),
    "olmo3": ("post_attention_layernorm", "post_feedforward_layernorm"),
    "exaone4": ("post_attention_layernorm", "post_feedforward_layernorm"),
}
# Blocks that add r + m * output (Granite's residual_multiplier): the adapter works on m * output, the stream's share.
SCALED = ("granite", "granitemoe", "granitemoeshared", "granitemoeshared_experts_only")
# Blocks whose feed-forward output is the sum of two sub-layers' outputs: the one the block runs first, beside the
# feed-forward sub-layer of PRE_NORM_BLOCKS (GraniteMoE-shared's experts beside its shared MLP).
SUMMED = {"granitemoeshared": "block_sparse_moe"}
PRE_NORM = tuple(PRE_NORM_BLOCKS)
# Decoders of post-norm BERT layers (BERT's output modules, LN(dense(h) + r)): (layers under base_model, attention
# output module, feed-forward output module, the intermediate in front of it).
POST_NORM_BLOCKS: dict[str, tuple[str, str, str, str]] = {
    "bert-generation": ("encoder.layer", "attention.output", "output", "intermediate")
}
DECODERS = (*PRE_NORM, *POST_NORM_BLOCKS)
# OPT's rows: its feed-forward is no module, so the hand computations here do not fit; test_opt.py has its own.
FLATTENED = ("opt", "opt_post_norm")
MIXTURES_OF_EXPERTS = ("mixtral", "qwen2_moe", "qwen3_moe", "gpt_oss")


def _post_norms(layer: nn.Module, model_type: str) -> tuple[Any, Any]:
    """The block's norms of the attention and feed-forward outputs (identity where it has none)."""
    names = POST_NORMS.get(model_type)
    if names is None:
        return _unchanged, _unchanged
    return layer.get_submodule(names[0]), layer.get_submodule(names[1])


def _scale(model: af.AdaptedModel, model_type: str) -> float:
    """The m of a block that adds r + m * output (SCALED), else 1."""
    return model.model.config.residual_multiplier if model_type in SCALED else 1.0


def _ffn_norm(layer: nn.Module, model_type: str) -> Any:
    """The norm the block applies to r in front of the feed-forward (none where r itself goes in: OLMo2)."""
    _, _, _, ffn, norm = PRE_NORM_BLOCKS[model_type]
    return _unchanged if norm == ffn else layer.get_submodule(norm)


def test_every_decoder_row_is_tested_here() -> None:
    """Every decoder row, a model type's config variants included, is the row of one tiny model here."""
    rows = {(model_type, id(row)) for model_type, row in architecture_rows() if row.causal}
    names = (*DECODERS, *FLATTENED)
    tested = {
        (tiny_decoder_config(name).model_type, id(architecture_for_config(tiny_decoder_config(name)))) for name in names
    }
    assert tested == rows and len(names) == len(rows)
    assert set(EXTRA_DECODER_CONFIGS) | set(CONFIG_VARIANTS) < set(names)


def _unchanged(value: torch.Tensor) -> torch.Tensor:
    return value


def _bottleneck(adapter: nn.Module, value: torch.Tensor, activation: Any) -> torch.Tensor:
    """up(act(down(value))), written out from the adapter's weights."""
    down, up = adapter.down, adapter.up
    return (activation(value @ down.weight.T + down.bias)) @ up.weight.T + up.bias


def _first(output: Any) -> torch.Tensor:
    return output[0] if isinstance(output, tuple) else output


def _capture(module: nn.Module, store: dict[str, torch.Tensor], key: str, *, input_: bool) -> Any:
    if input_:
        return module.register_forward_pre_hook(
            lambda m, args, kwargs: store.__setitem__(key, args[0] if args else next(iter(kwargs.values()))),
            with_kwargs=True,
        )
    # A copy: Falcon's parallel block adds the attention output into the feed-forward's output in place.
    return module.register_forward_hook(lambda m, args, output: store.__setitem__(key, _first(output).clone()))


def _layers(model: nn.Module, model_type: str) -> nn.ModuleList:
    layers = PRE_NORM_BLOCKS[model_type][0] if model_type in PRE_NORM_BLOCKS else POST_NORM_BLOCKS[model_type][0]
    return model.base_model.get_submodule(layers)


def _ffn_output(layer: nn.Module, model_type: str, normed: torch.Tensor) -> torch.Tensor:
    """The bare feed-forward's output on the normalised stream: its sub-layer's, plus the other sub-layer's the block
    sums with it (SUMMED)."""
    output = _first(layer.get_submodule(PRE_NORM_BLOCKS[model_type][3])(normed))  # inactive site: the bare MLP
    if model_type in SUMMED:
        output = output + _first(layer.get_submodule(SUMMED[model_type])(normed))
    return output


@pytest.mark.parametrize("model_type", DECODERS)
def test_wrapping_a_decoder_keeps_its_logits_and_loss(model_type: str) -> None:
    bare = tiny_decoder(model_type, dtype=torch.float64)
    inputs = tiny_decoder_inputs(model_type)
    labels = inputs["input_ids"].masked_fill(inputs["attention_mask"] == 0, -100)
    moe = {"output_router_logits": True} if model_type in MIXTURES_OF_EXPERTS else {}
    expected = bare(**inputs, labels=labels, **moe)
    model = af.wrap(bare)
    assert len(model.sites) == 2 * model.num_layers
    output = model(**inputs, labels=labels, **moe)
    assert torch.equal(output.logits, expected.logits)
    assert torch.equal(output.loss, expected.loss)  # transformers' shifted loss, -100 ignored (+ the routers' aux loss)
    if moe:  # transformers still finds the routers inside the wrapped `mlp`
        assert len(output.router_logits) == len(expected.router_logits) > 0
        assert torch.equal(output.aux_loss, expected.aux_loss)


@pytest.mark.parametrize("model_type", PRE_NORM)
def test_pfeiffer_on_a_decoder_is_r_plus_x_plus_adapter_of_x_plus_r(model_type: str) -> None:
    """Adapter at the last layer's feed-forward only: everything before it is the bare model's. With post-norms
    (Gemma2/3): r + LN(x + A(LN(x + r))), LN the block's norm of the feed-forward output."""
    model = af.wrap(tiny_decoder(model_type, dtype=torch.float64))
    inputs = tiny_decoder_inputs(model_type)
    last = model.num_layers - 1
    model.add_adapter("a", af.AdapterConfig.pfeiffer(4, leave_out=list(range(last))))
    randomise_pieces(model, seed=3)
    _, _, _, ffn, ffn_norm = PRE_NORM_BLOCKS[model_type]
    layer = _layers(model.model, model_type)[last]
    seen: dict[str, torch.Tensor] = {}
    hooks = [
        _capture(layer.get_submodule(ffn_norm), seen, "r", input_=True),
        _capture(layer.get_submodule(ffn), seen, "x", input_=False),
        _capture(layer, seen, "out", input_=False),
        _capture(layer.get_submodule(PRE_NORM_BLOCKS[model_type][1]), seen, "attention", input_=False),
    ]
    if model_type in SUMMED:
        hooks.append(_capture(layer.get_submodule(SUMMED[model_type]), seen, "summed", input_=False))
    with torch.no_grad():
        model(**inputs)  # nothing active: the bare model
        r, x = seen["r"], (seen["x"] + seen.get("summed", 0.0)) * _scale(model, model_type)
        if model_type in PARALLEL:  # the stream after attention, which the block never forms
            r = r + seen["attention"]
        adapter = model.sites_with_adapter("a")[0].adapters["a"]
        _, post = _post_norms(layer, model_type)
        expected = r + post(x + _bottleneck(adapter, post(x + r), torch.relu))
        model.activate(adapter="a")
        model(**inputs)
    for hook in hooks:
        hook.remove()
    assert_close(seen["out"], expected, dtype=torch.float64)
    assert (seen["out"] - (r + post(x))).abs().max() > 1e-3  # the adapter did change the layer


@pytest.mark.parametrize("model_type", PRE_NORM)
def test_houlsby_on_a_decoder_is_r_plus_x_plus_adapter_of_x(model_type: str) -> None:
    """Houlsby at layer 0's attention and feed-forward; layer 0's output from the bare sub-modules by hand."""
    model = af.wrap(tiny_decoder(model_type, dtype=torch.float64))
    inputs = tiny_decoder_inputs(model_type)
    model.add_adapter("h", af.AdapterConfig.houlsby(4, leave_out=list(range(1, model.num_layers))))
    randomise_pieces(model, seed=3)
    _, attention, attention_norm, _, _ = PRE_NORM_BLOCKS[model_type]
    layer = _layers(model.model, model_type)[0]
    seen: dict[str, torch.Tensor] = {}
    hooks = [
        _capture(layer.get_submodule(attention_norm), seen, "r", input_=True),
        _capture(layer.get_submodule(attention), seen, "x", input_=False),
        _capture(layer, seen, "out", input_=False),
    ]
    with torch.no_grad():
        model(**inputs)
        r, x = seen["r"], seen["x"] * _scale(model, model_type)
        attention_adapter, ffn_adapter = (site.adapters["h"] for site in model.sites_with_adapter("h"))
        after_attention, after_ffn = _post_norms(layer, model_type)
        middle = r + after_attention(x + _bottleneck(attention_adapter, x, F.silu))
        ffn_in = r if model_type in PARALLEL else middle  # a parallel block's feed-forward reads N(r)
        ffn_out = _ffn_output(layer, model_type, _ffn_norm(layer, model_type)(ffn_in)) * _scale(model, model_type)
        expected = middle + after_ffn(ffn_out + _bottleneck(ffn_adapter, ffn_out, F.silu))
        model.activate(adapter="h")
        model(**inputs)
    for hook in hooks:
        hook.remove()
    assert_close(seen["out"], expected, dtype=torch.float64)


def _capture_inputs(module: nn.Module, store: dict[str, tuple[torch.Tensor, ...]], key: str) -> Any:
    """The positional inputs of a BERT output module, (sub-layer output before dense, residual r)."""
    return module.register_forward_pre_hook(lambda m, args: store.__setitem__(key, args))


@pytest.mark.parametrize("model_type", POST_NORM_BLOCKS)
def test_pfeiffer_on_a_post_norm_decoder_is_bert_s_output_adapter(model_type: str) -> None:
    """At the last layer's feed-forward output module, LN(dense(i) + r) becomes LN(h + A(LN(h + r)) + r), h = dense(i),
    LN the module's own LayerNorm: the encoder's Pfeiffer site, in a causal decoder."""
    model = af.wrap(tiny_decoder(model_type, dtype=torch.float64))
    inputs = tiny_decoder_inputs(model_type)
    last = model.num_layers - 1
    model.add_adapter("a", af.AdapterConfig.pfeiffer(4, leave_out=list(range(last))))
    randomise_pieces(model, seed=3)
    _, _, output, _ = POST_NORM_BLOCKS[model_type]
    layer = _layers(model.model, model_type)[last]
    site = layer.get_submodule(output)
    seen: dict[str, Any] = {}
    hooks = [_capture_inputs(site, seen, "in"), _capture(layer, seen, "out", input_=False)]
    with torch.no_grad():
        model(**inputs)  # nothing active: the bare model
        intermediate, r = seen["in"]
        bare = site.base_layer
        h = bare.dense(intermediate)
        adapter = model.sites_with_adapter("a")[0].adapters["a"]
        expected = bare.LayerNorm(h + _bottleneck(adapter, bare.LayerNorm(h + r), torch.relu) + r)
        model.activate(adapter="a")
        model(**inputs)
    for hook in hooks:
        hook.remove()
    assert_close(seen["out"], expected, dtype=torch.float64)
    assert (seen["out"] - bare.LayerNorm(h + r)).abs().max() > 1e-3  # the adapter did change the layer


@pytest.mark.parametrize("model_type", POST_NORM_BLOCKS)
def test_houlsby_on_a_post_norm_decoder_is_bert_s_two_adapters(model_type: str) -> None:
    """Layer 0 by hand: LN_a(h + A(h) + r) after attention, then the feed-forward on it, LN_o(h' + A'(h') + r'), each
    LN the adapter's own trained copy (randomised here) in place of the module's."""
    model = af.wrap(tiny_decoder(model_type, dtype=torch.float64))
    inputs = tiny_decoder_inputs(model_type)
    model.add_adapter("h", af.AdapterConfig.houlsby(4, leave_out=list(range(1, model.num_layers))))
    randomise_pieces(model, seed=3)
    _, attention, output, intermediate = POST_NORM_BLOCKS[model_type]
    layer = _layers(model.model, model_type)[0]
    attention_site, output_site = layer.get_submodule(attention), layer.get_submodule(output)
    seen: dict[str, Any] = {}
    hooks = [_capture_inputs(attention_site, seen, "in"), _capture(layer, seen, "out", input_=False)]
    with torch.no_grad():
        model(**inputs)
        context, r = seen["in"]
        first, second = (site.adapters["h"] for site in model.sites_with_adapter("h"))
        h = attention_site.base_layer.dense(context)
        middle = first.layer_norm(h + _bottleneck(first, h, F.silu) + r)
        h = output_site.base_layer.dense(layer.get_submodule(intermediate)(middle))
        expected = second.layer_norm(h + _bottleneck(second, h, F.silu) + middle)
        model.activate(adapter="h")
        model(**inputs)
    for hook in hooks:
        hook.remove()
    assert_close(seen["out"], expected, dtype=torch.float64)


def _fused(model_type: str, adapter: str = "pfeiffer") -> af.AdaptedModel:
    model = af.wrap(tiny_decoder(model_type, dtype=torch.float64))
    for name in ("a", "b", "c"):
        model.add_adapter(name, af.AdapterConfig.from_name(adapter, reduction_factor=4))
    model.add_fusion("f", ["a", "b", "c"])
    randomise_pieces(model, seed=3)
    model.activate(fusion="f")
    return model


@pytest.mark.parametrize("model_type", DECODERS)
@pytest.mark.parametrize("adapter", ["pfeiffer", "houlsby"])
def test_fusion_fast_path_equals_the_literal_reference_on_decoders(model_type: str, adapter: str) -> None:
    model = _fused(model_type, adapter)
    inputs = tiny_decoder_inputs(model_type)
    with torch.no_grad():
        fast = model(**inputs, output_fusion_attentions=True)
        model.set_fusion_implementation("reference")
        reference = model(**inputs, output_fusion_attentions=True)
    assert_close(fast.logits, reference.logits, dtype=torch.float64)
    assert fast.fusion_attentions_by_site.keys() == reference.fusion_attentions_by_site.keys()
    assert len(fast.fusion_attentions_by_site) == (2 if adapter == "houlsby" else 1) * model.num_layers
    for key, weights in fast.fusion_attentions_by_site.items():
        assert_close(weights, reference.fusion_attentions_by_site[key], dtype=torch.float64)


# transformers has only eager attention for these: their prompts are not padded (see _generating).
EAGER_ONLY = ("gemma2", "gpt_oss")


def _generating(model_type: str) -> af.AdaptedModel:
    """A fused float64 model with SDPA attention: in float64, transformers' eager attention turns the fully masked
    rows of left padding into NaN, which then reach every position (float32 and SDPA are not affected)."""
    model = _fused(model_type)
    if model_type not in EAGER_ONLY:
        model.model.set_attn_implementation("sdpa")
    return model


def _left_padded(model_type: str) -> dict[str, torch.Tensor]:
    inputs = tiny_decoder_inputs(model_type, batch=2, seq=6)
    ids, mask = inputs["input_ids"].clone(), torch.ones_like(inputs["input_ids"])
    if model_type not in EAGER_ONLY:
        ids[1, :2], mask[1, :2] = 0, 0  # row 1 left-padded by 2, as decoders batch prompts
    return {"input_ids": ids, "attention_mask": mask}


@pytest.mark.parametrize("model_type", DECODERS)
def test_greedy_generation_with_the_cache_equals_generation_without_it(model_type: str) -> None:
    model = _generating(model_type)
    inputs = _left_padded(model_type)
    options = dict(max_new_tokens=5, do_sample=False, pad_token_id=0)
    cached = model.generate(**inputs, use_cache=True, **options)
    uncached = model.generate(**inputs, use_cache=False, **options)
    assert torch.equal(cached, uncached)
    model.activate()
    bare = model.generate(**inputs, **options)
    assert not torch.equal(bare, cached)  # the fusion changed what is generated


def test_each_generated_row_equals_the_uncached_forward_of_its_own_prefix() -> None:
    """The cached steps compute what a full forward computes: the greedy token at each step is the argmax of the
    full forward over the sequence generated so far."""
    model = _generating("llama")
    inputs = _left_padded("llama")
    generated = model.generate(**inputs, max_new_tokens=4, do_sample=False, pad_token_id=0)
    prompt = inputs["input_ids"].shape[1]
    with torch.no_grad():
        for step in range(prompt, generated.shape[1]):
            mask = torch.cat([inputs["attention_mask"], torch.ones(2, step - prompt, dtype=torch.long)], dim=1)
            logits = model(input_ids=generated[:, :step], attention_mask=mask).logits
            assert torch.isfinite(logits).all()
            assert torch.equal(logits[:, -1].argmax(-1), generated[:, step])


def test_fusion_attentions_recorded_during_generation_cover_every_position_run() -> None:
    model = _generating("llama")
    inputs = _left_padded("llama")
    with model.recording_fusion_attentions() as weights:
        generated = model.generate(**inputs, max_new_tokens=4, do_sample=False, pad_token_id=0)
    assert weights is not None and len(weights) == model.num_layers
    for per_site in weights.values():
        # the prompt, then one position per step but the last (its token is never fed back)
        assert per_site.shape == (2, generated.shape[1] - 1, 3)
        assert_close(per_site.sum(-1), torch.ones(per_site.shape[:-1], dtype=torch.float64), dtype=torch.float64)


@pytest.mark.parametrize("use_cache", [True, False])
def test_generations_recorded_weights_equal_one_forward_over_what_it_ran(use_cache: bool) -> None:
    """With the cache each step adds its position; without it each step runs every position again and replaces the
    recording. Either way the block ends with one forward's weights over the generated sequence (but the last
    token), and a second generate() in the block replaces the first's (it used to be appended to it)."""
    model = _generating("llama")
    inputs = _left_padded("llama")
    options = dict(max_new_tokens=4, do_sample=False, pad_token_id=0, use_cache=use_cache)
    with model.recording_fusion_attentions() as weights:
        model.generate(**{key: value[:, 1:] for key, value in inputs.items()}, **options)  # another length first
        generated = model.generate(**inputs, **options)
    mask = torch.cat([inputs["attention_mask"], torch.ones(2, 3, dtype=torch.long)], dim=1)
    with model.inference_cache(), model.recording_fusion_attentions() as expected:  # the folds generate() used
        model(input_ids=generated[:, :-1], attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0))
    assert weights is not None and expected is not None and weights.keys() == expected.keys()
    for site, per_site in weights.items():
        real = mask.bool()  # padded positions attend to nothing, their weights are not compared
        assert per_site.shape == expected[site].shape
        assert_close(per_site[real], expected[site][real], dtype=torch.float64)


@pytest.mark.parametrize("model_type", ["llama", "t5"])
@pytest.mark.parametrize("drafting", ["assistant_model", "prompt_lookup_num_tokens"])
def test_assisted_generations_recorded_weights_equal_one_forward_over_the_kept_tokens(
    model_type: str, drafting: str
) -> None:
    """Assisted decoding verifies several candidate tokens in one forward, then crops the rejected ones from the
    cache and runs their positions again: the recording follows the cache (it recorded the first step alone, or
    its last step's positions, before), and ends with one forward's weights over the generated sequence."""
    model = _generating(model_type)
    draft = {
        "assistant_model": tiny_decoder(model_type, dtype=torch.float64, seed=5),  # mostly rejected candidates
        "prompt_lookup_num_tokens": 3,
    }[drafting]
    prompt = torch.tensor([[11, 42, 17, 88, 23, 42, 17]])
    with model.recording_fusion_attentions() as weights:
        generated = model.generate(input_ids=prompt, max_new_tokens=10, min_new_tokens=10, **{drafting: draft})
    decoder = {"decoder_input_ids": generated[:, :-1]} if model_type == "t5" else {}
    with model.inference_cache(), model.recording_fusion_attentions() as expected:
        model(input_ids=prompt if decoder else generated[:, :-1], **decoder)
    assert weights is not None and expected is not None and weights.keys() == expected.keys()
    for site, per_site in weights.items():
        assert per_site.shape == expected[site].shape
        assert_close(per_site, expected[site], dtype=torch.float64)


@pytest.mark.parametrize(
    ("setting", "words"),
    [
        ("assistant_early_exit", ("assistant_early_exit=1", "the recorded model's own fusion sites")),
        ("assistant_model", ("assistant_model=<the recorded model>", "prompt_lookup_num_tokens")),
        ("penalty_alpha", ("penalty_alpha=0.6", "contrastive search")),
        ("guidance_scale", ("guidance_scale=1.5", "classifier-free guidance", "negative prompt")),
    ],
)
def test_recording_refuses_decoding_whose_forwards_it_cannot_follow(setting: str, words: tuple[str, ...]) -> None:
    """A draft run by the recorded model itself records draft steps among the verifying ones; contrastive search
    runs its candidates as extra rows; classifier-free guidance runs the negative prompt beside each step (a record
    of one position per row, before it was refused)."""
    model = _fused("llama")
    values = {"assistant_early_exit": 1, "assistant_model": model.model, "penalty_alpha": 0.6, "guidance_scale": 1.5}
    value = values[setting]
    with model.recording_fusion_attentions(), pytest.raises(af.ConfigError) as error:
        model.generate(input_ids=torch.tensor([[11, 42, 17]]), max_new_tokens=3, **{setting: value})
    assert all(word in str(error.value) for word in words), str(error.value)
    generated = model.generate(input_ids=torch.tensor([[11, 42, 17]]), max_new_tokens=3, assistant_early_exit=1)
    assert generated.shape == (1, 6)  # not recording: generated as transformers does


@pytest.mark.parametrize("model_type", ["gpt2", "t5"])
def test_early_exit_drafting_is_refused_where_the_layers_do_not_stop_at_the_draft(model_type: str) -> None:
    """transformers drafts with assistant_early_exit by lowering config.num_hidden_layers; GPT-2's layer loop does
    not stop there (an IndexError inside transformers) and T5's base model is not where it looks (an AttributeError).
    Llama's runs (the test above)."""
    model = _fused(model_type)
    inputs = {"input_ids": torch.tensor([[11, 42, 17]])}
    with pytest.raises(af.ConfigError, match=r"assistant_early_exit=1.*Llama-style.*prompt_lookup_num_tokens"):
        model.generate(**inputs, max_new_tokens=3, assistant_early_exit=1)


def test_beam_search_and_sampling_run_with_a_fusion() -> None:
    model = _generating("qwen2")
    inputs = _left_padded("qwen2")
    beams = model.generate(**inputs, max_new_tokens=3, num_beams=3, do_sample=False, pad_token_id=0)
    torch.manual_seed(0)
    sampled = model.generate(**inputs, max_new_tokens=3, do_sample=True, top_k=5, pad_token_id=0)
    assert beams.shape == sampled.shape == (2, inputs["input_ids"].shape[1] + 3)


def test_a_model_without_a_language_model_head_cannot_generate() -> None:
    bare = tiny_decoder("llama").base_model  # LlamaModel: no LM head
    model = af.wrap(bare)
    with pytest.raises(af.ConfigError, match="AutoModelForCausalLM"):
        model.generate(input_ids=torch.tensor([[5, 6, 7]]), max_new_tokens=2)


def test_a_site_called_without_its_block_says_so() -> None:
    model = af.wrap(tiny_decoder("llama"))
    model.add_adapter("a")
    model.activate(adapter="a")
    mlp = _layers(model.model, "llama")[0].mlp
    with pytest.raises(af.ConfigError, match="ran without its block"):
        mlp(torch.zeros(1, 3, 32))


def test_folds_are_reused_across_calls_until_a_weight_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    """generate() folds each fusion site once and reuses the fold in later calls; an in-place change of any weight
    it was made from (an optimizer step) makes a new one, so the output follows the weights."""
    model = _generating("llama")
    inputs = _left_padded("llama")
    options = dict(max_new_tokens=3, do_sample=False, pad_token_id=0, output_scores=True, return_dict_in_generate=True)
    folds: list[int] = []
    original = af.injection.site.fold_fusion

    def counting(*args: Any, **kwargs: Any) -> Any:
        folds.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(af.injection.site, "fold_fusion", counting)
    monkeypatch.setattr(af.injection.lanes, "fold_fusion", counting)  # generate's decode steps run lanes
    first = model.generate(**inputs, **options)
    again = model.generate(**inputs, **options)
    assert len(folds) == model.num_layers  # one fold per fusion site, for both calls
    assert torch.equal(first.scores[0], again.scores[0])
    with torch.no_grad():
        model.sites_with_fusion("f")[0].fusions["f"].query.weight.add_(0.5)
    changed = model.generate(**inputs, **options)
    assert len(folds) == model.num_layers + 1  # only the changed site folds again
    model.set_fusion_implementation("reference")
    expected = model.generate(**inputs, **options)
    assert_close(changed.scores[0], expected.scores[0], dtype=torch.float64)


def _norm_hooks(model: af.AdaptedModel) -> int:
    return sum(len(m._forward_pre_hooks) for m in model.model.modules() if "norm" in type(m).__name__.lower())


def test_residual_hooks_sit_on_the_norms_only_while_a_site_is_active_and_follow_a_deep_copy() -> None:
    """A bare forward, and every site left inactive, must not pay torch's hooked call path; a deep-copied model
    listens on its own norms."""
    model = af.wrap(tiny_decoder("llama", dtype=torch.float64)).eval()
    inputs = tiny_decoder_inputs("llama")
    model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4))
    assert _norm_hooks(model) == 0
    model.activate(adapter="a")
    layers = model.num_layers
    assert _norm_hooks(model) == layers  # Pfeiffer: one adapted site per layer, one norm in front of it
    with torch.no_grad():
        adapted = model(**inputs).logits
        twin = copy.deepcopy(model)
        assert torch.equal(twin(**inputs).logits, adapted)
        twin.activate()
        assert _norm_hooks(twin) == 0 and _norm_hooks(model) == layers
        assert torch.equal(model(**inputs).logits, adapted)
        model.activate(adapter="a", skip_layers=[0])
        assert _norm_hooks(model) == layers - 1
        model.activate()
        assert _norm_hooks(model) == 0
        assert not torch.equal(model(**inputs).logits, adapted)
