"""The tiny decoder / encoder-decoder factory (tests/tiny_decoders.py) builds every architecture of issue #23, runs a
forward pass without the KV cache, is deterministic per seed, and casts to float64 without changing the weights."""

import pytest
import torch

from tiny_decoders import (
    DECODER_TYPES,
    HIDDEN,
    LAYERS,
    SEQ2SEQ_TYPES,
    TINY_DECODER_CONFIGS,
    VOCAB,
    tiny_decoder,
    tiny_decoder_inputs,
)

ISSUE_23 = {"gpt2", "llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "phi3", "t5", "bart"}


def test_every_issue_23_architecture_has_a_row():
    assert set(TINY_DECODER_CONFIGS) == ISSUE_23
    assert set(DECODER_TYPES) | set(SEQ2SEQ_TYPES) == ISSUE_23


@pytest.mark.parametrize("model_type", sorted(TINY_DECODER_CONFIGS))
def test_builds_and_runs(model_type):
    model = tiny_decoder(model_type, dtype=torch.float64)
    assert model.config.model_type == model_type
    assert not model.training and model.dtype == torch.float64
    assert model.config.get_text_config().hidden_size == HIDDEN
    assert model.config.get_text_config().num_hidden_layers == LAYERS
    inputs = tiny_decoder_inputs(model_type)
    with torch.no_grad():
        logits = model(**inputs, use_cache=False).logits
    length = inputs["decoder_input_ids" if model_type in SEQ2SEQ_TYPES else "input_ids"].shape[1]
    assert logits.shape == (2, length, VOCAB) and logits.dtype == torch.float64
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize("model_type", ["llama", "t5"])
def test_same_seed_same_weights_and_float64_is_an_exact_cast(model_type):
    a, b = tiny_decoder(model_type, seed=3), tiny_decoder(model_type, seed=3, dtype=torch.float64)
    c = tiny_decoder(model_type, seed=4)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert sa.keys() == sb.keys() == sc.keys()
    assert all(torch.equal(sa[k].double(), sb[k]) for k in sa)
    assert any(not torch.equal(sa[k], sc[k]) for k in sa)


def test_grouped_query_attention_where_the_architecture_has_it():
    for model_type in ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "phi3"):
        config = tiny_decoder(model_type).config
        assert config.num_key_value_heads < config.num_attention_heads, model_type
