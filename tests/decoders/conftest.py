"""Fixtures of tests/decoders: a tiny random decoder saved as a model folder with the shipped tokenizer."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers

import adapterfusion as af


@pytest.fixture(scope="session")
def tiny_decoder_dir(tmp_path_factory) -> Path:
    """A tiny random Llama (hidden 32, 2 layers, grouped-query attention) saved with the shipped tokenizer, which has
    a pad token; decoders' own tokenizers often do not (encoder_loading.load_tokenizer then pads with the eos token)."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(
        af.default_encoder_path(),
        model_input_names=["input_ids", "attention_mask"],  # as decoders' tokenizers give
    )
    config = transformers.LlamaConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("decoders") / "tiny-llama"
    transformers.LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
