"""Tiny randomly initialised decoders and encoder-decoders built from config objects, for issue #23's architectures.

Every model has 2 layers, hidden 32, intermediate 64, vocab 100 and 4 attention heads; where the architecture has
grouped-query attention it gets 2 key/value heads. Built from a config with a fixed seed, so no test downloads
anything and the same seed gives the same weights. Eager attention throughout: it is the one implementation every
architecture (Gemma2's soft-capping included) and every transformers version computes the same way.

A plain module with no adapterfusion import: tests import it by name (`from tiny_decoders import tiny_decoder`),
and scripts/make_adapterhub_decoder_fixtures.py imports it under transformers 4.57.6 in AdapterHub's venv, so the
config table below must stay valid for both transformers 4.57 and 5.x."""

from __future__ import annotations

from typing import Any

import torch
import transformers

HIDDEN, LAYERS, HEADS, KV_HEADS, INTERMEDIATE, VOCAB = 32, 2, 4, 2, 64, 100
PAD, BOS, EOS = 0, 1, 2

_LLAMA_STYLE: dict[str, Any] = dict(
    vocab_size=VOCAB,
    hidden_size=HIDDEN,
    intermediate_size=INTERMEDIATE,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    num_key_value_heads=KV_HEADS,
    max_position_embeddings=64,
    pad_token_id=PAD,
    bos_token_id=BOS,
    eos_token_id=EOS,
)
# Gemma2/3 alternate sliding-window and global layers; a window longer than any test sequence keeps the two layer
# kinds equal in what they see, so a mismatch points at adapters, not at a version's sliding-window mask.
_GEMMA_STYLE: dict[str, Any] = dict(_LLAMA_STYLE, head_dim=HIDDEN // HEADS, sliding_window=32)

# model_type -> (Config class name, kwargs, "causal" or "seq2seq").
TINY_DECODER_CONFIGS: dict[str, tuple[str, dict[str, Any], str]] = {
    "gpt2": (
        "GPT2Config",
        dict(
            vocab_size=VOCAB,
            n_embd=HIDDEN,
            n_layer=LAYERS,
            n_head=HEADS,
            n_inner=INTERMEDIATE,
            n_positions=64,
            pad_token_id=PAD,
            bos_token_id=BOS,
            eos_token_id=EOS,
        ),
        "causal",
    ),
    "llama": ("LlamaConfig", dict(_LLAMA_STYLE), "causal"),
    "mistral": ("MistralConfig", dict(_LLAMA_STYLE, sliding_window=32), "causal"),
    "qwen2": ("Qwen2Config", dict(_LLAMA_STYLE), "causal"),
    "qwen3": ("Qwen3Config", dict(_LLAMA_STYLE, head_dim=HIDDEN // HEADS), "causal"),
    "gemma": ("GemmaConfig", dict(_LLAMA_STYLE, head_dim=HIDDEN // HEADS), "causal"),
    "gemma2": ("Gemma2Config", dict(_GEMMA_STYLE), "causal"),
    "gemma3_text": ("Gemma3TextConfig", dict(_GEMMA_STYLE), "causal"),
    "phi3": ("Phi3Config", dict(_LLAMA_STYLE), "causal"),
    "t5": (
        "T5Config",
        dict(
            vocab_size=VOCAB,
            d_model=HIDDEN,
            d_kv=HIDDEN // HEADS,
            d_ff=INTERMEDIATE,
            num_layers=LAYERS,
            num_decoder_layers=LAYERS,
            num_heads=HEADS,
            relative_attention_num_buckets=8,
            pad_token_id=PAD,
            eos_token_id=EOS,
            decoder_start_token_id=PAD,
        ),
        "seq2seq",
    ),
    "bart": (
        "BartConfig",
        dict(
            vocab_size=VOCAB,
            d_model=HIDDEN,
            encoder_layers=LAYERS,
            decoder_layers=LAYERS,
            encoder_attention_heads=HEADS,
            decoder_attention_heads=HEADS,
            encoder_ffn_dim=INTERMEDIATE,
            decoder_ffn_dim=INTERMEDIATE,
            max_position_embeddings=64,
            pad_token_id=PAD,
            bos_token_id=BOS,
            eos_token_id=EOS,
            decoder_start_token_id=EOS,
            forced_eos_token_id=None,
        ),
        "seq2seq",
    ),
}
DECODER_TYPES = tuple(t for t, (_, _, kind) in TINY_DECODER_CONFIGS.items() if kind == "causal")
SEQ2SEQ_TYPES = tuple(t for t, (_, _, kind) in TINY_DECODER_CONFIGS.items() if kind == "seq2seq")

# More encoder-decoders, in the same layout, kept out of TINY_DECODER_CONFIGS so that the tests parametrised over that
# table do not run them: tests/decoders/test_more_seq2seq_architectures.py tests these rows. mT5 keeps its default
# gated-GELU feed-forward (T5's tiny config has ReLU); mBART, Pegasus and M2M-100 (NLLB's) are BART's config with
# pre-norm layers, Marian and PLBART BART's post-norm layers under their own configs.
EXTRA_SEQ2SEQ_CONFIGS: dict[str, tuple[str, dict[str, Any], str]] = {
    "mt5": ("MT5Config", dict(TINY_DECODER_CONFIGS["t5"][1]), "seq2seq"),
    "mbart": ("MBartConfig", dict(TINY_DECODER_CONFIGS["bart"][1]), "seq2seq"),
    "marian": ("MarianConfig", dict(TINY_DECODER_CONFIGS["bart"][1]), "seq2seq"),
    "pegasus": ("PegasusConfig", dict(TINY_DECODER_CONFIGS["bart"][1]), "seq2seq"),
    "plbart": ("PLBartConfig", dict(TINY_DECODER_CONFIGS["bart"][1]), "seq2seq"),
    "m2m_100": ("M2M100Config", dict(TINY_DECODER_CONFIGS["bart"][1]), "seq2seq"),
}


# More decoders, kept out of TINY_DECODER_CONFIGS likewise: tests/decoders/test_more_decoder_architectures.py tests
# these rows. Class names only, so that a transformers without one of them still imports this module. 4 experts, 2 per
# token, run by the eager loop over experts (transformers 5's default grouped_mm has no float64); Qwen2-MoE's layer 0
# keeps a dense MLP (mlp_only_layers) and SmolLM3's layer 1 has no rotary positions.
_MOE: dict[str, Any] = dict(num_experts_per_tok=2, experts_implementation="eager")
# Multi-head latent attention (DeepSeek-V2/V3): keys and values from a compressed latent, which the cache holds; a
# key/value head per query head, one expert group.
_MLA: dict[str, Any] = dict(
    num_key_value_heads=HEADS,
    kv_lora_rank=16,
    q_lora_rank=16,
    qk_rope_head_dim=4,
    qk_nope_head_dim=4,
    v_head_dim=8,
    n_group=1,
    topk_group=1,
)
_GRANITE: dict[str, Any] = dict(
    residual_multiplier=0.22, embedding_multiplier=12.0, attention_multiplier=0.0625, logits_scaling=8.0
)
EXTRA_DECODER_CONFIGS: dict[str, tuple[str, dict[str, Any], str]] = {
    "starcoder2": ("Starcoder2Config", dict(_LLAMA_STYLE), "causal"),
    "olmo": ("OlmoConfig", dict(_LLAMA_STYLE), "causal"),
    "olmo2": ("Olmo2Config", dict(_LLAMA_STYLE), "causal"),
    "smollm3": ("SmolLM3Config", dict(_LLAMA_STYLE, no_rope_layers=[1, 0]), "causal"),
    "helium": ("HeliumConfig", dict(_LLAMA_STYLE, head_dim=HIDDEN // HEADS), "causal"),
    "glm": ("GlmConfig", dict(_LLAMA_STYLE, head_dim=HIDDEN // HEADS), "causal"),
    "glm4": ("Glm4Config", dict(_LLAMA_STYLE, head_dim=HIDDEN // HEADS), "causal"),
    "mixtral": ("MixtralConfig", dict(_LLAMA_STYLE, **_MOE, num_local_experts=4), "causal"),
    "qwen2_moe": (
        "Qwen2MoeConfig",
        dict(
            _LLAMA_STYLE,
            **_MOE,
            num_experts=4,
            moe_intermediate_size=16,
            shared_expert_intermediate_size=32,
            mlp_only_layers=[0],
        ),
        "causal",
    ),
    "qwen3_moe": (
        "Qwen3MoeConfig",
        dict(_LLAMA_STYLE, **_MOE, num_experts=4, moe_intermediate_size=16, head_dim=HIDDEN // HEADS),
        "causal",
    ),
    # Llama's block under other names (Ministral's sliding windows, ERNIE 4.5, Seed-OSS); GPT-2's (GPT-Neo with a local
    # attention layer, GPT-BigCode's multi-query attention); GPT-OSS's and GLM-4.5's mixtures of experts (attention
    # sinks, a dense first layer); OLMo2's post-norms under OLMo3 and EXAONE 4.
    "ministral": ("MinistralConfig", dict(_LLAMA_STYLE, head_dim=HIDDEN // HEADS, sliding_window=32), "causal"),
    "ernie4_5": ("Ernie4_5Config", dict(_LLAMA_STYLE, head_dim=HIDDEN // HEADS), "causal"),
    "seed_oss": ("SeedOssConfig", dict(_LLAMA_STYLE, head_dim=HIDDEN // HEADS), "causal"),
    "gpt_neo": (
        "GPTNeoConfig",
        dict(
            vocab_size=VOCAB,
            hidden_size=HIDDEN,
            num_layers=LAYERS,
            num_heads=HEADS,
            intermediate_size=INTERMEDIATE,
            max_position_embeddings=64,
            attention_types=[[["global", "local"], 1]],
            window_size=32,
            pad_token_id=PAD,
            bos_token_id=BOS,
            eos_token_id=EOS,
        ),
        "causal",
    ),
    "gpt_bigcode": ("GPTBigCodeConfig", dict(TINY_DECODER_CONFIGS["gpt2"][1], multi_query=True), "causal"),
    "gpt_oss": (
        "GptOssConfig",
        dict(
            _LLAMA_STYLE,
            **_MOE,
            num_local_experts=4,
            head_dim=HIDDEN // HEADS,
            sliding_window=32,
            layer_types=["sliding_attention", "full_attention"],
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        ),
        "causal",
    ),
    "glm4_moe": (
        "Glm4MoeConfig",
        dict(
            _LLAMA_STYLE,
            **_MOE,
            n_routed_experts=4,
            moe_intermediate_size=16,
            first_k_dense_replace=1,
            head_dim=HIDDEN // HEADS,
            n_group=1,
            topk_group=1,
        ),
        "causal",
    ),
    "deepseek_v2": (
        "DeepseekV2Config",
        dict(_LLAMA_STYLE, **_MLA, **_MOE, n_routed_experts=4, moe_intermediate_size=16, first_k_dense_replace=1),
        "causal",
    ),
    "deepseek_v3": (
        "DeepseekV3Config",
        dict(_LLAMA_STYLE, **_MLA, **_MOE, n_routed_experts=4, moe_intermediate_size=16, first_k_dense_replace=1),
        "causal",
    ),
    "olmo3": ("Olmo3Config", dict(_LLAMA_STYLE, sliding_window=32), "causal"),
    "exaone4": ("Exaone4Config", dict(_LLAMA_STYLE, head_dim=HIDDEN // HEADS, sliding_window=32), "causal"),
    # Granite's blocks add r + residual_multiplier * output (with its embedding, attention and logits scales);
    # GraniteMoE's feed-forward is a mixture of experts.
    "granite": ("GraniteConfig", dict(_LLAMA_STYLE, **_GRANITE), "causal"),
    "granitemoe": ("GraniteMoeConfig", dict(_LLAMA_STYLE, **_GRANITE, **_MOE, num_local_experts=4), "causal"),
    # GraniteMoE-shared: the experts plus a shared MLP, summed in the block (CONFIG_VARIANTS: without the shared MLP).
    "granitemoeshared": (
        "GraniteMoeSharedConfig",
        dict(_LLAMA_STYLE, **_GRANITE, **_MOE, num_local_experts=4, shared_intermediate_size=32),
        "causal",
    ),
    # BERT-generation's post-norm BERT layers as a causal decoder (BertGenerationDecoder); its encoder is tiny_models'.
    "bert-generation": (
        "BertGenerationConfig",
        dict(
            vocab_size=VOCAB,
            hidden_size=HIDDEN,
            num_hidden_layers=LAYERS,
            num_attention_heads=HEADS,
            intermediate_size=INTERMEDIATE,
            max_position_embeddings=64,
            is_decoder=True,
            pad_token_id=PAD,
            bos_token_id=BOS,
            eos_token_id=EOS,
        ),
        "causal",
    ),
    # OPT's pre-norm blocks (OPT-125m), whose feed-forward runs on the batch flattened to [B*T, d].
    "opt": (
        "OPTConfig",
        dict(
            vocab_size=VOCAB,
            hidden_size=HIDDEN,
            num_hidden_layers=LAYERS,
            num_attention_heads=HEADS,
            ffn_dim=INTERMEDIATE,
            word_embed_proj_dim=HIDDEN,
            max_position_embeddings=64,
            pad_token_id=PAD,
            bos_token_id=BOS,
            eos_token_id=EOS,
        ),
        "causal",
    ),
    # Falcon-RW's sequential blocks (ALiBi positions, biases, a key/value head per query head; Falcon names its sizes
    # ffn_hidden_size and num_kv_heads); StableLM-3B's, with the per-head query/key LayerNorms of StableLM-2.
    "falcon": (
        "FalconConfig",
        dict(
            {k: v for k, v in _LLAMA_STYLE.items() if k not in ("intermediate_size", "num_key_value_heads")},
            ffn_hidden_size=INTERMEDIATE,
            parallel_attn=False,
            new_decoder_architecture=False,
            multi_query=False,
            alibi=True,
            bias=True,
        ),
        "causal",
    ),
    "stablelm": ("StableLmConfig", dict(_LLAMA_STYLE, qk_layernorm=True), "causal"),
    # Parallel-residual blocks, r + attention(N(r)) + mlp(N(r)): GPT-J (partial rotary), Phi-1/2 (partial rotary, a
    # LayerNorm with bias), Cohere (a LayerNorm without bias, grouped-query attention, logits scaled); GPT-NeoX with
    # a second norm of r in front of its feed-forward.
    "gptj": ("GPTJConfig", dict(TINY_DECODER_CONFIGS["gpt2"][1], rotary_dim=4), "causal"),  # GPT-2's names
    "phi": (
        "PhiConfig",
        dict({k: v for k, v in _LLAMA_STYLE.items() if k != "num_key_value_heads"}, partial_rotary_factor=0.5),
        "causal",
    ),
    "cohere": ("CohereConfig", dict(_LLAMA_STYLE, logit_scale=0.5), "causal"),
    "cohere2": ("Cohere2Config", dict(_LLAMA_STYLE, logit_scale=0.5, sliding_window=32), "causal"),
    "codegen": ("CodeGenConfig", dict(TINY_DECODER_CONFIGS["gpt2"][1], rotary_dim=4), "causal"),  # GPT-2's names
    "gpt_neox": (
        "GPTNeoXConfig",
        dict({k: v for k, v in _LLAMA_STYLE.items() if k != "num_key_value_heads"}, rotary_pct=0.5),
        "causal",
    ),
}


# The other blocks of model types whose config chooses them (architectures.py's `variants`), by name -> (model_type,
# the settings that build them): Falcon-7B's parallel block with one norm, Falcon-40B's with a norm per sub-layer
# (grouped-query attention, rotary positions), Falcon2-11B's with one; StableLM-2-12B's parallel block; GPT-NeoX's
# sequential one; OPT-350m's post-norm blocks; GraniteMoE-shared without its shared MLP (GraniteMoE's block).
CONFIG_VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "falcon_parallel": ("falcon", dict(parallel_attn=True)),
    "falcon_new_decoder": (
        "falcon",
        dict(parallel_attn=True, new_decoder_architecture=True, num_kv_heads=KV_HEADS, alibi=False),
    ),
    "falcon_new_decoder_one_norm": (
        "falcon",
        dict(parallel_attn=True, new_decoder_architecture=True, num_ln_in_parallel_attn=1, alibi=False),
    ),
    "stablelm_parallel": ("stablelm", dict(use_parallel_residual=True)),
    "gpt_neox_sequential": ("gpt_neox", dict(use_parallel_residual=False)),
    "opt_post_norm": ("opt", dict(do_layer_norm_before=False)),
    "granitemoeshared_experts_only": ("granitemoeshared", dict(shared_intermediate_size=0)),
}


def _row(model_type: str) -> tuple[str, dict[str, Any], str]:
    """The (Config class name, kwargs, kind) of `model_type` (or of a CONFIG_VARIANTS name), from whichever table has
    it."""
    if model_type in CONFIG_VARIANTS:
        base, settings = CONFIG_VARIANTS[model_type]
        class_name, kwargs, kind = _row(base)
        return class_name, {**kwargs, **settings}, kind
    for table in (TINY_DECODER_CONFIGS, EXTRA_SEQ2SEQ_CONFIGS, EXTRA_DECODER_CONFIGS):
        if model_type in table:
            return table[model_type]
    raise KeyError(f"no tiny config for model_type {model_type!r}")


def tiny_decoder_config(model_type: str, **overrides: Any) -> transformers.PretrainedConfig:
    """The tiny config of `model_type` (a key of TINY_DECODER_CONFIGS, EXTRA_SEQ2SEQ_CONFIGS, EXTRA_DECODER_CONFIGS or
    CONFIG_VARIANTS), eager attention, `overrides` applied."""
    class_name, kwargs, _ = _row(model_type)
    config = getattr(transformers, class_name)(**{**kwargs, **overrides})
    config._attn_implementation = "eager"
    return config


def tiny_decoder(
    model_type: str, seed: int = 0, dtype: torch.dtype = torch.float32, **overrides: Any
) -> transformers.PreTrainedModel:
    """A tiny random AutoModelForCausalLM (or AutoModelForSeq2SeqLM for T5/BART/mT5/mBART) in eval mode.

    Weights are drawn in float32 from `seed`, then cast to `dtype`, so a float64 model holds exactly the float32
    model's weights."""
    config = tiny_decoder_config(model_type, **overrides)
    auto = transformers.AutoModelForSeq2SeqLM if _row(model_type)[2] == "seq2seq" else transformers.AutoModelForCausalLM
    torch.manual_seed(seed)
    model = auto.from_config(config, attn_implementation="eager")
    return model.to(dtype).eval()


def tiny_decoder_inputs(
    model_type: str, batch: int = 2, seq: int = 7, seed: int = 1, padding_side: str = "right"
) -> dict[str, torch.Tensor]:
    """Token ids avoid 0..4 (special ids); row 1 is padded by 2, on the right (`padding_side="left"`: on the left, as
    a decoder's generate needs its prompts). Seq2seq models also get decoder_input_ids (starting with the decoder
    start id, one shorter than the source)."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, VOCAB, (batch, seq), generator=generator)
    attention_mask = torch.ones(batch, seq, dtype=torch.long)
    if batch > 1:
        padded = slice(None, 2) if padding_side == "left" else slice(-2, None)
        attention_mask[1, padded] = 0
        input_ids[1, padded] = PAD
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
    _, kwargs, kind = _row(model_type)
    if kind == "seq2seq":
        start = kwargs["decoder_start_token_id"]
        decoder_input_ids = torch.randint(5, VOCAB, (batch, seq - 1), generator=generator)
        decoder_input_ids[:, 0] = start
        inputs["decoder_input_ids"] = decoder_input_ids
    return inputs


def randomise_pieces(model: torch.nn.Module, seed: int, std: float = 0.3) -> None:
    """Redraw every adapter and fusion weight of a wrapped model from N(0, std²) (seeded): adapters start as the
    identity (up = 0), and random weights make every placement and fusion mistake visible."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if ".adapters." in name or ".fusions." in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator, dtype=parameter.dtype) * std)
