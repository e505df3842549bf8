"""A generation task trains under the decoder's own language-model head: a checkpoint without its weights (saved
from the bare model or a classifier, embeddings untied) is refused when it loads, where transformers drew the head
at random and said so only in its load report."""

from __future__ import annotations

import pytest
import transformers

import adapterfusion as af
from adapterfusion.encoder_loading import load_language_model
from adapterfusion.encoders import resolve_encoder
from tiny_decoders import tiny_decoder_config


def _load(folder):
    return load_language_model(resolve_encoder(str(folder), reach_hub=False, tokenizer=False))


def test_a_decoder_saved_without_its_untied_head_is_refused(tmp_path):
    transformers.LlamaModel(tiny_decoder_config("llama", tie_word_embeddings=False)).save_pretrained(tmp_path)
    with pytest.raises(af.ConfigError, match=r"no weights for its language-model head \(lm_head.weight missing"):
        _load(tmp_path)


@pytest.mark.parametrize("saved", ["bare model, tied head", "causal LM, untied head"])
def test_a_decoder_whose_head_is_tied_or_saved_loads(saved, tmp_path):
    tied = saved.endswith("tied head") and "untied" not in saved
    model_class = transformers.LlamaModel if saved.startswith("bare") else transformers.LlamaForCausalLM
    model_class(tiny_decoder_config("llama", tie_word_embeddings=tied)).save_pretrained(tmp_path)
    assert isinstance(_load(tmp_path), transformers.LlamaForCausalLM)
