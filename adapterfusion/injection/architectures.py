"""Where adapters go, per architecture: module paths only, never copied forward code.

Each encoder layer has two insertion sites, 'attention' (after multi-head attention, "bottom") and
'output' (after the feed-forward block, "top"); an encoder-decoder's decoder layers a third, 'cross' (after
cross-attention, between the two). A site is one of three kinds:

  POST_LN_OUTPUT  a BERT-style output module `forward(hidden_states, input_tensor)` computing
                  LayerNorm(dropout(dense(hidden_states)) + input_tensor). Its sub-modules are called by
                  name; this is exactly the site of the Pfeiffer and Houlsby adapters.
  PRE_RESIDUAL    a sub-layer whose output (or output[0]) goes into `LayerNorm(output + input)` computed by its parent
                  block (DistilBERT, MPNet's attention, BART, Marian, PLBART). The wrapped module's first input is the
                  residual, unless `residual_input` names the module whose input it is (BART's fc2 site takes it from
                  fc1); `layer_norm` names the parent's LayerNorm, relative to the layer.
  PRE_NORM        a sub-layer of a pre-LayerNorm block whose output is added to the residual stream by the parent
                  (decoders: GPT-2, Llama, Mistral, Qwen, Phi-3, GPT-J; encoder-decoders: T5, mT5, mBART,
                  Pegasus, M2M-100; ModernBERT). There is no LayerNorm after the sub-layer. `residual_input` names the
                  block's norm in front of the sub-layer (OLMo2, with none there: the sub-layer itself): its input is
                  the residual stream r, which a forward pre-hook hands to the site, so that the adapter sees what
                  AdapterHub's does (original_ln_before adds r to the adapter input; the block adds r after the site,
                  as original_ln_after would). Without it (ModernBERT) the adapter sees the sub-layer output only and
                  the LayerNorm options are ignored. Where the block sums two sub-layers' outputs (GraniteMoE-shared's
                  experts and shared MLP) the site wraps the second and `output_adds` names the first.

To support another encoder, add a row to ARCHITECTURES keyed by its `config.model_type`; where its config chooses
between blocks under the same modules, one row per block (`_config_rows`: `variants`, each with its `requires`).

`batch_arguments` names the arguments of a layer's forward that carry one row per example besides the hidden
states (the attention mask, MPNet's position bias). composition.forward_parallel uses them to run the encoder once
on the plain batch up to the first adapter site and repeat it per route only there: it repeats these arguments for
the layers after. Empty means it never shares (the batch is repeated at the input); so do `prefix_blockers`,
module paths (from the HF base model) whose presence mixes the plain batch into later layers (DeBERTa-v2's
optional convolution over the embeddings).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from torch import nn

from adapterfusion._validation import is_finite_number
from adapterfusion.errors import UnsupportedArchitectureError


class SiteKind(str, Enum):
    POST_LN_OUTPUT = "post_ln_output"
    PRE_RESIDUAL = "pre_residual"
    PRE_NORM = "pre_norm"


def site_key(layer: int, position: str) -> str:
    """The name of the insertion site at `position` ('attention', 'cross' or 'output') of layer `layer`: the one
    spelling of a site in piece tensors and in AdapterSite.key."""
    return f"layer.{layer}.{position}"


@dataclass(frozen=True)
class SiteSpec:
    kind: SiteKind
    path: str  # relative to one encoder layer
    # PRE_RESIDUAL: the parent's LayerNorm after the sub-layer; PRE_NORM: the block's post-norm of the sub-layer's
    # output, if it has one (Gemma2/3), which original_ln_before applies to h + r. Relative to the layer.
    layer_norm: str | None = None
    # The module whose first input is the residual stream r, relative to the layer: PRE_NORM, the norm in front of
    # the sub-layer; PRE_RESIDUAL, when r is not the wrapped module's own input (BART's fc1 before the fc2 site).
    residual_input: str | None = None
    # PRE_NORM in a parallel-residual block, r + attn(N(r)) + mlp(N'(r)): the sub-layer whose output the block adds
    # beside this one's, relative to the layer. The site's residual stream is then r plus that (adapted) output, the
    # stream after attention that the block never forms and AdapterHub's GPT-J block builds (attention adapters on
    # r, then output adapters on their result).
    residual_adds: str | None = None
    # PRE_NORM where the block adds r + m * output (Granite's residual_multiplier): the config attribute holding m. The
    # site adapts the stream's share m * output, as the adapter would in a block without m, and hands the block back
    # its output divided by m.
    output_scale: str | None = None
    # PRE_NORM where the block sums this sub-layer's output with another's before adding them to the stream
    # (GraniteMoE-shared: block_sparse_moe(x) + shared_mlp(x), this site on shared_mlp): that other sub-layer, relative
    # to the layer, which the block runs first. A forward hook hands the site its output e; the site adapts the sum
    # h + e, the feed-forward's whole output, and hands the block back its result less e.
    output_adds: str | None = None
    # A sub-layer run on the batch flattened to [B*T, d] (OPT's feed-forward): the module, relative to the layer, whose
    # first input is the layer's [B, T, d] stream; the site views the flattened rows back as [B, T, d] by its shape,
    # so that per-example routing and fusion attentions see examples and tokens.
    rows_from: str | None = None
    # Where AdapterHub 1.3.0 keeps its adapter layer for this site, relative to the layer, where that is not `path`
    # (it patches decoder blocks and hangs 'attention_adapters'/'output_adapters' on the layer).
    adapterhub_path: str | None = None
    dense: str = "dense"  # POST_LN_OUTPUT only: sub-module names inside the output module
    dropout: str = "dropout"
    norm: str = "LayerNorm"


@dataclass(frozen=True)
class LayerStack:
    """One ModuleList of layers (path from the HF base model) and where each position's site is in its layers;
    `cross`: an encoder-decoder's decoder layers also have one after their cross-attention (AdapterHub's
    cross_adapter), between the other two."""

    layers: str
    attention: SiteSpec
    output: SiteSpec
    cross: SiteSpec | None = None

    def site(self, position: str) -> SiteSpec:
        spec = {"attention": self.attention, "cross": self.cross, "output": self.output}[position]
        assert spec is not None, f"{self.layers} has no {position} site"
        return spec

    @property
    def positions(self) -> tuple[str, ...]:
        """The positions its layers have sites at, in the order a layer runs them."""
        return ("attention", "cross", "output") if self.cross is not None else ("attention", "output")


@dataclass(frozen=True)
class ArchitectureSpec:
    layers: str  # path from the HF base model to the ModuleList of encoder layers
    attention: SiteSpec
    output: SiteSpec
    batch_arguments: tuple[str, ...] = ()
    prefix_blockers: tuple[str, ...] = ()
    causal: bool = False  # a decoder: each position sees only those before it (heads pool the last token)
    # Encoder-decoders: the decoder's layers, numbered after the encoder's (AdapterHub's global layer index, which
    # leave_out, skip_layers, per-layer reduction factors and fusion attentions use).
    decoder: LayerStack | None = None
    # Whether adapters 1.3.0 runs this model type at all (it refuses CamemBERT, Data2Vec-text and ERNIE, though
    # their layers are BERT's): its files then translate where the sites do (in_adapterhub).
    adapterhub_model: bool = True
    # The config values under which the model type builds the blocks these sites express: (config attribute, the
    # value it must have). Checked when a model is wrapped, against this row and its `variants`.
    requires: tuple[tuple[str, object], ...] = ()
    # The model type's other blocks, one row each, built under other config values (each with its own `requires`):
    # Falcon's and StableLM's parallel-residual configs beside their sequential ones, GPT-NeoX's sequential beside its
    # parallel one. `blocks` says what a row's blocks are, for error messages and `adapterfusion info`.
    variants: tuple[ArchitectureSpec, ...] = ()
    blocks: str = ""
    # A model that runs its layers several times over in one forward, with the same weights (ALBERT): the module, from
    # the HF base model, whose one call runs them all, and the config attribute counting its distinct layers (the
    # layers sites are in, which leave_out, top-k and skip_layers count), where num_hidden_layers counts repetitions.
    repeats: str | None = None
    distinct_layers: str | None = None

    def site(self, position: str) -> SiteSpec:
        return self.attention if position == "attention" else self.output

    @property
    def pools_last_token(self) -> bool:
        """Whether a head reads the last non-padding position by default: a decoder's, or an encoder-decoder's
        decoder run on the input shifted right (as transformers' Bart/T5ForSequenceClassification read the end
        token there); only that position has read the whole input."""
        return self.causal or self.decoder is not None

    def stacks(self) -> tuple[LayerStack, ...]:
        """The encoder's layers, then the decoder's for an encoder-decoder."""
        encoder = LayerStack(self.layers, self.attention, self.output)
        return (encoder,) if self.decoder is None else (encoder, self.decoder)

    @property
    def has_cross_attention(self) -> bool:
        """Whether some layers have a site after cross-attention (the 'cross' position)."""
        return any(stack.cross is not None for stack in self.stacks())

    @property
    def layer_norm_copies(self) -> bool:
        """Whether Houlsby adapters can train their own LayerNorm copies at the attention and output sites (not
        where the block applies its LayerNorm itself: PRE_RESIDUAL)."""
        sites = [stack.site(position) for stack in self.stacks() for position in ("attention", "output")]
        return all(site.kind is not SiteKind.PRE_RESIDUAL for site in sites)

    @property
    def in_adapterhub(self) -> bool:
        """Whether AdapterHub 1.3.0 has adapters on this architecture at the same places, so that its files
        translate: BERT-style output modules, or the decoder blocks it patches."""
        sites = [stack.site(position) for stack in self.stacks() for position in stack.positions]
        return self.adapterhub_model and all(
            site.kind is SiteKind.POST_LN_OUTPUT or site.adapterhub_path is not None for site in sites
        )


_BERT_LIKE = ArchitectureSpec(
    layers="encoder.layer",
    attention=SiteSpec(SiteKind.POST_LN_OUTPUT, "attention.output"),
    output=SiteSpec(SiteKind.POST_LN_OUTPUT, "output"),
    batch_arguments=("attention_mask",),
)


def _pre_norm_decoder(
    layers: str,
    attention: tuple[str, ...],
    output: tuple[str, ...],
    in_adapterhub: bool = True,
    output_scale: str | None = None,
) -> ArchitectureSpec:
    """A decoder of pre-norm blocks: (sub-layer, norm in front of it[, post-norm of its output]) for the attention
    and the feed-forward; `in_adapterhub`: whether AdapterHub 1.3.0 supports it (its adapter layers then sit on the
    block); `output_scale`: the config attribute by which the block scales each sub-layer's output (SiteSpec)."""

    def site(parts: tuple[str, ...], adapterhub_path: str) -> SiteSpec:
        return SiteSpec(
            SiteKind.PRE_NORM,
            parts[0],
            residual_input=parts[1],
            layer_norm=parts[2] if len(parts) > 2 else None,
            output_scale=output_scale,
            adapterhub_path=adapterhub_path if in_adapterhub else None,
        )

    return ArchitectureSpec(
        layers=layers,
        attention=site(attention, "attention_adapters"),
        output=site(output, "output_adapters"),
        causal=True,
    )


_LLAMA_LIKE = _pre_norm_decoder("layers", ("self_attn", "input_layernorm"), ("mlp", "post_attention_layernorm"))
_GEMMA2_LIKE = _pre_norm_decoder(
    "layers",
    ("self_attn", "input_layernorm", "post_attention_layernorm"),
    ("mlp", "pre_feedforward_layernorm", "post_feedforward_layernorm"),
)
_LLAMA_LIKE_NOT_IN_ADAPTERHUB = _pre_norm_decoder(
    "layers", ("self_attn", "input_layernorm"), ("mlp", "post_attention_layernorm"), in_adapterhub=False
)


def _parallel_decoder(
    layers: str,
    attention: str,
    norm: str,
    mlp: str,
    mlp_norm: str | None = None,
    in_adapterhub: bool = True,
    **options: object,
) -> ArchitectureSpec:
    """A decoder of parallel-residual blocks, r + attention(N(r)) + mlp(N'(r)), N' = N unless `mlp_norm` names a
    second norm of r (GPT-NeoX). As in AdapterHub's GPT-J block, the attention site's residual stream is r and the
    feed-forward site's r plus the attention site's output (`residual_adds`), so the block's own sum carries both
    sites' results."""
    return ArchitectureSpec(
        layers=layers,
        attention=SiteSpec(
            SiteKind.PRE_NORM,
            attention,
            residual_input=norm,
            adapterhub_path="attention_adapters" if in_adapterhub else None,
        ),
        output=SiteSpec(
            SiteKind.PRE_NORM,
            mlp,
            residual_input=mlp_norm or norm,
            residual_adds=attention,
            adapterhub_path="output_adapters" if in_adapterhub else None,
        ),
        causal=True,
        **options,  # type: ignore[arg-type]
    )


def _t5_stack(layers: str, decoder: bool) -> LayerStack:
    """T5's sub-layers (`layer.<k>` = T5LayerSelfAttention, in the decoder T5LayerCrossAttention, then T5LayerFF,
    each a pre-norm residual block: r + dropout(sub-layer(layer_norm(r))))."""

    def site(index: int, module: str) -> SiteSpec:
        return SiteSpec(
            SiteKind.PRE_NORM,
            f"layer.{index}.{module}",
            residual_input=f"layer.{index}.layer_norm",
            adapterhub_path=f"layer.{index}",
        )

    return LayerStack(
        layers,
        attention=site(0, "SelfAttention"),
        output=site(2 if decoder else 1, "DenseReluDense"),
        cross=site(1, "EncDecAttention") if decoder else None,
    )


def _bart_stack(layers: str, decoder: bool) -> LayerStack:
    """BART's post-norm layers: LN(r + self_attn(r)), in the decoder LN(r + encoder_attn(r, encoder states)), then
    LN(r + fc2(act(fc1(r)))); the feed-forward has no module of its own, so the site wraps fc2 and takes r from fc1's
    input."""
    return LayerStack(
        layers,
        attention=SiteSpec(
            SiteKind.PRE_RESIDUAL, "self_attn", layer_norm="self_attn_layer_norm", adapterhub_path="attention_adapters"
        ),
        output=SiteSpec(
            SiteKind.PRE_RESIDUAL,
            "fc2",
            layer_norm="final_layer_norm",
            residual_input="fc1",
            adapterhub_path="output_adapters",
        ),
        cross=SiteSpec(
            SiteKind.PRE_RESIDUAL,
            "encoder_attn",
            layer_norm="encoder_attn_layer_norm",
            adapterhub_path="cross_attention_adapters",
        )
        if decoder
        else None,
    )


def _mbart_stack(layers: str, decoder: bool) -> LayerStack:
    """mBART's pre-norm layers (unlike BART's post-norm): r + self_attn(self_attn_layer_norm(r)), in the decoder
    r + encoder_attn(encoder_attn_layer_norm(r), encoder states), then r + fc2(act(fc1(final_layer_norm(r)))); each
    sub-layer's norm in front of it takes r as its input. The stack's own layer_norm after its last layer is outside
    the layers and changes no site. AdapterHub hangs its adapter layers on the layer under BART's names, with no
    LayerNorm."""

    def site(path: str, norm: str, adapterhub_path: str) -> SiteSpec:
        return SiteSpec(SiteKind.PRE_NORM, path, residual_input=norm, adapterhub_path=adapterhub_path)

    return LayerStack(
        layers,
        attention=site("self_attn", "self_attn_layer_norm", "attention_adapters"),
        output=site("fc2", "final_layer_norm", "output_adapters"),
        cross=site("encoder_attn", "encoder_attn_layer_norm", "cross_attention_adapters") if decoder else None,
    )


def _encoder_decoder(stack: Callable[[str, bool], LayerStack], encoder: str, decoder: str) -> ArchitectureSpec:
    """An encoder-decoder whose two stacks are `stack`'s, at the `encoder` and `decoder` layer paths."""
    first = stack(encoder, False)
    return ArchitectureSpec(first.layers, first.attention, first.output, decoder=stack(decoder, True))


_T5_LIKE = _encoder_decoder(_t5_stack, "encoder.block", "decoder.block")
_BART_LIKE = _encoder_decoder(_bart_stack, "encoder.layers", "decoder.layers")
_MBART_LIKE = _encoder_decoder(_mbart_stack, "encoder.layers", "decoder.layers")


def _config_rows(*rows: tuple[ArchitectureSpec, str, dict[str, object]]) -> ArchitectureSpec:
    """One model type's rows, each (spec, what its blocks are, the config values that build them): the first, holding
    the others as its `variants`."""
    specs = [dataclasses.replace(spec, blocks=blocks, requires=tuple(values.items())) for spec, blocks, values in rows]
    return dataclasses.replace(specs[0], variants=tuple(specs[1:]))


def _granite(feed_forward: str) -> ArchitectureSpec:
    """Llama's block that adds r + residual_multiplier * output, with `feed_forward` after post_attention_layernorm."""
    return _pre_norm_decoder(
        "layers",
        ("self_attn", "input_layernorm"),
        (feed_forward, "post_attention_layernorm"),
        in_adapterhub=False,
        output_scale="residual_multiplier",
    )


# GraniteMoE-shared's feed-forward is block_sparse_moe(x) + shared_mlp(x), summed in the block, which runs the experts
# first: the site wraps shared_mlp and takes the experts' output from a forward hook (`output_adds`).
_GRANITE_MOE = _granite("block_sparse_moe")
_GRANITE_MOE_SHARED = dataclasses.replace(
    _GRANITE_MOE, output=dataclasses.replace(_GRANITE_MOE.output, path="shared_mlp", output_adds="block_sparse_moe")
)
# BERT-generation's layers are BERT's (post-norm, BERT's module names): BertGenerationEncoder's, or with is_decoder=True
# BertGenerationDecoder's causal ones. A decoder's cross-attention (add_cross_attention, for EncoderDecoderModel) has no
# site: it runs as it is. adapters 1.3.0 has the encoder; its decoder in our own format only.
_BERT_GENERATION = _config_rows(
    (_BERT_LIKE, "encoder (BertGenerationEncoder)", {"is_decoder": False}),
    (
        dataclasses.replace(_BERT_LIKE, batch_arguments=(), causal=True, adapterhub_model=False),
        "causal decoder (BertGenerationDecoder)",
        {"is_decoder": True},
    ),
)


_GPT2_LIKE_NOT_IN_ADAPTERHUB = _pre_norm_decoder("h", ("attn", "ln_1"), ("mlp", "ln_2"), in_adapterhub=False)
_OLMO2_LIKE = _pre_norm_decoder(
    "layers",
    ("self_attn", "self_attn", "post_attention_layernorm"),
    ("mlp", "mlp", "post_feedforward_layernorm"),
    in_adapterhub=False,
)
_ONE_NORM_PARALLEL = _parallel_decoder("layers", "self_attn", "input_layernorm", "mlp", in_adapterhub=False)
_FALCON_SEQUENTIAL = _pre_norm_decoder(
    "h", ("self_attention", "input_layernorm"), ("mlp", "post_attention_layernorm"), in_adapterhub=False
)
_FALCON_ONE_NORM = _parallel_decoder("h", "self_attention", "input_layernorm", "mlp", in_adapterhub=False)


ARCHITECTURES: dict[str, ArchitectureSpec] = {
    "bert": _BERT_LIKE,
    "roberta": _BERT_LIKE,
    "xlm-roberta": _BERT_LIKE,
    "camembert": dataclasses.replace(_BERT_LIKE, adapterhub_model=False),
    "electra": _BERT_LIKE,
    "data2vec-text": dataclasses.replace(_BERT_LIKE, adapterhub_model=False),
    "ernie": dataclasses.replace(_BERT_LIKE, adapterhub_model=False),
    "deberta": _BERT_LIKE,
    "bert-generation": _BERT_GENERATION,
    "deberta-v2": dataclasses.replace(_BERT_LIKE, prefix_blockers=("encoder.conv",)),
    # ALBERT runs one group of layers (every released checkpoint has num_hidden_groups=1; inner_group_num layers in it)
    # num_hidden_layers times over, so a site there is applied at every repetition with the same weights, and its
    # layer index counts distinct layers, as AdapterHub's do. Both sub-layers end in the layer's own LayerNorm(r + x):
    # the attention site wraps its output projection (r: the attention's input), the feed-forward site ffn_output (r:
    # ffn's input). Own format only: AdapterHub's ALBERT attention adapter takes its input and residual swapped.
    "albert": ArchitectureSpec(
        layers="encoder.albert_layer_groups.0.albert_layers",
        attention=SiteSpec(
            SiteKind.PRE_RESIDUAL, "attention.dense", layer_norm="attention.LayerNorm", residual_input="attention"
        ),
        output=SiteSpec(SiteKind.PRE_RESIDUAL, "ffn_output", layer_norm="full_layer_layer_norm", residual_input="ffn"),
        adapterhub_model=False,
        requires=(("num_hidden_groups", 1),),
        blocks="shared (one group of layers, run num_hidden_layers times)",
        repeats="encoder",
        distinct_layers="inner_group_num",
    ),
    "mpnet": ArchitectureSpec(
        layers="encoder.layer",
        # MPNet applies dropout between the attention output and its LayerNorm in the parent module, so in
        # training mode that dropout falls on the adapted output; in eval mode the site is exact.
        attention=SiteSpec(SiteKind.PRE_RESIDUAL, "attention.attn", layer_norm="attention.LayerNorm"),
        output=SiteSpec(SiteKind.POST_LN_OUTPUT, "output"),
        batch_arguments=("attention_mask", "position_bias"),
    ),
    "distilbert": ArchitectureSpec(
        layers="transformer.layer",
        attention=SiteSpec(SiteKind.PRE_RESIDUAL, "attention", layer_norm="sa_layer_norm"),
        output=SiteSpec(SiteKind.PRE_RESIDUAL, "ffn", layer_norm="output_layer_norm"),
    ),
    # Decoders (pre-norm blocks); grouped-query attention and tuple outputs change nothing at these sites.
    "gpt2": _pre_norm_decoder("h", ("attn", "ln_1"), ("mlp", "ln_2")),
    "llama": _LLAMA_LIKE,
    "mistral": _LLAMA_LIKE,
    "qwen2": _LLAMA_LIKE,
    "qwen3": _LLAMA_LIKE,
    "gemma": _LLAMA_LIKE_NOT_IN_ADAPTERHUB,
    # Post-norms on each sub-layer's output (the block adds r after them): AdapterHub's Pfeiffer normalises x + r with
    # the last layer's post-norm in every layer (a defect of its hooks, docs/adapterhub-decoders.md); ours with the
    # layer's own, so Pfeiffer differs from AdapterHub's below the last layer and Houlsby and fusion inputs agree.
    "gemma2": _GEMMA2_LIKE,
    "gemma3_text": _GEMMA2_LIKE,
    "phi3": _LLAMA_LIKE_NOT_IN_ADAPTERHUB,
    # Llama's block under other names' configs (a LayerNorm with bias, OLMo's weightless one, SmolLM3's layers without
    # rotary positions, GLM's partial rotary and fused gate_up_proj change nothing at the sites). StarCoder2 drops out
    # the sub-layer output inside the sub-layer, as GPT-2 does, so the adapter sees it after that dropout.
    "starcoder2": _LLAMA_LIKE_NOT_IN_ADAPTERHUB,
    "olmo": _LLAMA_LIKE_NOT_IN_ADAPTERHUB,
    "smollm3": _LLAMA_LIKE_NOT_IN_ADAPTERHUB,
    "helium": _LLAMA_LIKE_NOT_IN_ADAPTERHUB,
    "glm": _LLAMA_LIKE_NOT_IN_ADAPTERHUB,
    # Granite adds each sub-layer's output to r scaled by residual_multiplier (`output_scale`); GraniteMoE's
    # feed-forward is its block_sparse_moe.
    "granite": _granite("mlp"),
    "granitemoe": _GRANITE_MOE,
    # GraniteMoE-shared: the experts plus a shared MLP (shared_intermediate_size > 0), whose sum the feed-forward site
    # adapts (`output_adds`); without the shared MLP (0, its config's default) GraniteMoE's block.
    "granitemoeshared": _config_rows(
        (
            _GRANITE_MOE_SHARED,
            "experts + shared MLP (shared_intermediate_size > 0)",
            {"shared_intermediate_size": True},
        ),
        (_GRANITE_MOE, "experts only (shared_intermediate_size 0)", {"shared_intermediate_size": False}),
    ),
    "ministral": _LLAMA_LIKE_NOT_IN_ADAPTERHUB,
    "ernie4_5": _LLAMA_LIKE_NOT_IN_ADAPTERHUB,
    "seed_oss": _LLAMA_LIKE_NOT_IN_ADAPTERHUB,
    # GPT-2's block under GPT-Neo's and GPT-BigCode's configs (StarCoder, SantaCoder: multi-query attention).
    "gpt_neo": _GPT2_LIKE_NOT_IN_ADAPTERHUB,
    "gpt_bigcode": _GPT2_LIKE_NOT_IN_ADAPTERHUB,
    # Mixture-of-experts feed-forwards: the site wraps the whole `mlp` (router and experts, Qwen2-MoE's shared expert,
    # or a dense MLP in its mlp_only_layers), whose output (output[0] where a version returns the router logits too)
    # the block adds to r; the router sees the normalised stream, as without adapters.
    "mixtral": _LLAMA_LIKE_NOT_IN_ADAPTERHUB,
    "qwen2_moe": _LLAMA_LIKE_NOT_IN_ADAPTERHUB,
    "qwen3_moe": _LLAMA_LIKE_NOT_IN_ADAPTERHUB,
    "gpt_oss": _LLAMA_LIKE_NOT_IN_ADAPTERHUB,  # its mlp returns (output, router scores)
    "glm4_moe": _LLAMA_LIKE_NOT_IN_ADAPTERHUB,  # dense MLPs in its first first_k_dense_replace layers
    # DeepSeek-V2/V3 (and Kimi K2's and Moonlight's configs): Llama's block with multi-head latent attention, whose
    # cache holds the compressed latent (forward_inputs/cache.py), and a DeepSeek mixture of experts.
    "deepseek_v2": _LLAMA_LIKE_NOT_IN_ADAPTERHUB,
    "deepseek_v3": _LLAMA_LIKE_NOT_IN_ADAPTERHUB,
    # Gemma2's post-norms under GLM-4's names.
    "glm4": _pre_norm_decoder(
        "layers",
        ("self_attn", "input_layernorm", "post_self_attn_layernorm"),
        ("mlp", "post_attention_layernorm", "post_mlp_layernorm"),
        in_adapterhub=False,
    ),
    # Gemma2's post-norms without its pre-norms: r + LN(sub-layer(r)) (OLMo2, OLMo3, EXAONE 4). No norm takes r in
    # front of the sub-layer, so the site takes it from the sub-layer's own input.
    "olmo2": _OLMO2_LIKE,
    "olmo3": _OLMO2_LIKE,
    "exaone4": _OLMO2_LIKE,
    # OPT: the feed-forward is no module of its own; the block runs fc1, fc2 and its dropout on the batch flattened
    # to [B*T, d], so the site wraps fc2 (as BART's) and views the rows back by the attention's input (`rows_from`).
    # do_layer_norm_before=False (OPT-350m) normalises after each sub-layer, as BART does.
    "opt": _config_rows(
        (
            ArchitectureSpec(
                layers="decoder.layers",
                attention=SiteSpec(SiteKind.PRE_NORM, "self_attn", residual_input="self_attn_layer_norm"),
                output=SiteSpec(
                    SiteKind.PRE_NORM, "fc2", residual_input="final_layer_norm", rows_from="self_attn_layer_norm"
                ),
                causal=True,
            ),
            "pre-norm (OPT-125m, 1.3b and larger)",
            {"do_layer_norm_before": True},
        ),
        (
            ArchitectureSpec(
                layers="decoder.layers",
                attention=SiteSpec(SiteKind.PRE_RESIDUAL, "self_attn", layer_norm="self_attn_layer_norm"),
                output=SiteSpec(
                    SiteKind.PRE_RESIDUAL,
                    "fc2",
                    layer_norm="final_layer_norm",
                    residual_input="fc1",
                    rows_from="self_attn",
                ),
                causal=True,
            ),
            "post-norm (OPT-350m)",
            {"do_layer_norm_before": False},
        ),
    ),
    # Model types whose config chooses between sequential and parallel-residual blocks under the same modules: a row
    # per block (`_config_rows`), chosen by the config when a model is wrapped. Their dropout of a sub-layer output in
    # the block comes after the site, so in training with a nonzero hidden or attention dropout it falls on the adapted
    # output (as MPNet's); the released configs have none.
    "falcon": _config_rows(
        (_FALCON_SEQUENTIAL, "sequential (Falcon-RW)", {"parallel_attn": False, "new_decoder_architecture": False}),
        (
            _FALCON_ONE_NORM,
            "parallel, one norm (Falcon-7B)",
            {"parallel_attn": True, "new_decoder_architecture": False},
        ),
        (
            _parallel_decoder("h", "self_attention", "ln_attn", "mlp", "ln_mlp", in_adapterhub=False),
            "parallel, a norm per sub-layer (Falcon-40B/180B)",
            {"new_decoder_architecture": True, "parallel_attn": True, "num_ln_in_parallel_attn": (2, None)},
        ),
        (
            _FALCON_ONE_NORM,
            "parallel, one norm (Falcon2-11B)",
            {"new_decoder_architecture": True, "parallel_attn": True, "num_ln_in_parallel_attn": 1},
        ),
    ),
    "stablelm": _config_rows(
        (_LLAMA_LIKE_NOT_IN_ADAPTERHUB, "sequential (StableLM-3B, StableLM-2-1.6B)", {"use_parallel_residual": False}),
        (_ONE_NORM_PARALLEL, "parallel, one norm (StableLM-2-12B)", {"use_parallel_residual": True}),
    ),
    # Parallel-residual blocks with one norm in front of both sub-layers. GPT-J in AdapterHub's files; Phi-1/2,
    # Cohere, Cohere2 (Command R7B) and CodeGen in our own format (adapters 1.3.0 has none of these models but reaches
    # Phi through a hand-written interface). Phi drops out each sub-layer's output in the block, after the site:
    # exact in eval mode, and in training the dropout falls on the adapted outputs (as MPNet's).
    "gptj": _parallel_decoder("h", "attn", "ln_1", "mlp"),
    "phi": _ONE_NORM_PARALLEL,
    "cohere": _ONE_NORM_PARALLEL,
    "cohere2": _ONE_NORM_PARALLEL,
    "codegen": _parallel_decoder("h", "attn", "ln_1", "mlp", in_adapterhub=False),
    # GPT-NeoX (Pythia, GPT-NeoX-20B): a norm of r in front of each sub-layer, its dropouts after the sites (exact in
    # eval mode and at hidden_dropout 0, the released configs'). use_parallel_residual=False builds a sequential block
    # under the same modules, whose feed-forward norm reads r + attention.
    "gpt_neox": _config_rows(
        (
            _parallel_decoder(
                "layers", "attention", "input_layernorm", "mlp", "post_attention_layernorm", in_adapterhub=False
            ),
            "parallel, a norm per sub-layer (Pythia, GPT-NeoX-20B)",
            {"use_parallel_residual": True},
        ),
        (
            _pre_norm_decoder(
                "layers", ("attention", "input_layernorm"), ("mlp", "post_attention_layernorm"), in_adapterhub=False
            ),
            "sequential",
            {"use_parallel_residual": False},
        ),
    ),
    # Encoder-decoders: sites in the encoder's layers and the decoder's self-attention, cross-attention and
    # feed-forward (the presets put nothing after cross-attention, as AdapterHub's do: positions=(..., 'cross')).
    "t5": _T5_LIKE,
    "bart": _BART_LIKE,
    # mT5: T5's blocks (its gated-GELU feed-forward is inside DenseReluDense); mBART: pre-norm, unlike BART.
    "mt5": _T5_LIKE,
    "mbart": _MBART_LIKE,
    # Own format only (adapters 1.3.0 refuses both, "not pre-supported"): Marian's layers are BART's post-norm ones,
    # Pegasus's mBART's pre-norm ones, under the same module names.
    "marian": dataclasses.replace(_BART_LIKE, adapterhub_model=False),
    "pegasus": dataclasses.replace(_MBART_LIKE, adapterhub_model=False),
    # PLBART: BART's layers, in adapters 1.3.0 under BART's names. M2M-100 (also NLLB-200's dense models): mBART's
    # pre-norm layers; adapters 1.3.0 has no M2M-100 model, so own format only.
    "plbart": _BART_LIKE,
    "m2m_100": dataclasses.replace(_MBART_LIKE, adapterhub_model=False),
    "modernbert": ArchitectureSpec(
        layers="layers", attention=SiteSpec(SiteKind.PRE_NORM, "attn"), output=SiteSpec(SiteKind.PRE_NORM, "mlp")
    ),
}


def architecture_for(model: nn.Module) -> ArchitectureSpec:
    """The row of `model`'s architecture: its model type's, or the variant its config chooses."""
    return architecture_for_config(getattr(model, "config", None))


def architecture_for_config(config: object) -> ArchitectureSpec:
    """The row whose blocks a model built from `config` has (architecture_for, from the config alone)."""
    model_type = getattr(config, "model_type", None)
    if model_type not in ARCHITECTURES:
        raise UnsupportedArchitectureError(
            f"no adapter sites are known for model_type {model_type!r}. Supported: {', '.join(sorted(ARCHITECTURES))}. "
            "To add one, extend adapterfusion/injection/architectures.py::ARCHITECTURES with the module paths of "
            "its layers and of the attention-output and feed-forward-output sub-modules."
        )
    spec = ARCHITECTURES[model_type]
    rows = (spec, *spec.variants)
    for row in rows:
        if all(_matches(getattr(config, attribute, None), value) for attribute, value in row.requires):
            _check_output_scales(row, config, model_type)
            return row
    attributes = dict.fromkeys(attribute for row in rows for attribute, _ in row.requires)
    given = ", ".join(f"{attribute}={getattr(config, attribute, None)!r}" for attribute in attributes)
    known = "; ".join(f"{settings_text(row)} ({row.blocks})" for row in rows)
    raise UnsupportedArchitectureError(
        f"model_type {model_type!r} with {given} builds blocks none of its rows' adapter sites express; its rows "
        f"take {known} (docs/ARCHITECTURE.md, 'Model types whose config chooses the block')"
    )


def _check_output_scales(row: ArchitectureSpec, config: object, model_type: str) -> None:
    """A site whose block scales its output (`output_scale`) divides its result by that multiplier: it must be a
    finite, nonzero number, said before any site replaces a module."""
    for stack in row.stacks():
        for position in stack.positions:
            attribute = stack.site(position).output_scale
            value = getattr(config, attribute, None) if attribute else 1.0
            if not (is_finite_number(value) and value != 0):
                raise UnsupportedArchitectureError(
                    f"model_type {model_type!r} with {attribute}={value!r}: its blocks scale each sub-layer's output "
                    "by it, and an adapter's output is divided by it, so adapters need a finite, nonzero number there"
                )


def _matches(actual: object, required: object) -> bool:
    """Whether a config value is one a row requires: a tuple of values takes any of them, and a flag is read as the
    model's code reads it (None and a missing attribute as False)."""
    if isinstance(required, tuple):
        return any(_matches(actual, value) for value in required)
    if isinstance(required, bool):
        flag = False if actual is None else actual
        return isinstance(flag, (bool, int)) and bool(flag) is required
    return actual == required


def layer_count(config: object) -> int | None:
    """How many distinct layers with adapter sites a model built from `config` has (ALBERT: those of its one
    group, which it runs num_hidden_layers times), read from the config alone; None where it does not say."""
    try:
        row = architecture_for_config(config)
    except UnsupportedArchitectureError:
        row = None
    attribute = row.distinct_layers if row is not None and row.distinct_layers else "num_hidden_layers"
    count = getattr(config, attribute, None)
    return count if isinstance(count, int) and not isinstance(count, bool) else None


def settings_text(row: ArchitectureSpec) -> str:
    """The config settings that build `row`'s blocks, as a user writes them: 'parallel_attn=True, ...'."""

    def shown(value: object) -> str:
        return " or ".join(map(repr, value)) if isinstance(value, tuple) else repr(value)

    return ", ".join(f"{attribute}={shown(value)}" for attribute, value in row.requires)


def architecture_rows() -> list[tuple[str, ArchitectureSpec]]:
    """Every (model_type, row), a model type's config variants after its first row: what `adapterfusion info`
    lists."""
    return [(name, row) for name, spec in sorted(ARCHITECTURES.items()) for row in (spec, *spec.variants)]


def get_submodule(root: nn.Module, path: str) -> nn.Module:
    try:
        return root.get_submodule(path)
    except AttributeError as error:
        raise UnsupportedArchitectureError(
            f"{type(root).__name__} has no sub-module {path!r} ({error}). Either it is a variant of its model "
            "type without that part (an encoder alone, such as T5EncoderModel, has no decoder; load the whole model "
            "with AutoModel, AutoModelForCausalLM or AutoModelForSeq2SeqLM), or this transformers version lays the "
            "model out differently from adapterfusion/injection/architectures.py::ARCHITECTURES"
        ) from None
