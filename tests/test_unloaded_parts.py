"""encoder_loading.unloaded_parts: which pretrained parts a checkpoint lacked, from transformers' own loading report, so
a base saved without its LM head or its decoder is refused however it was stored (safetensors or a pickle)."""

from __future__ import annotations

import pytest
import torch
import transformers

import adapterfusion as af
from adapterfusion.encoder_loading import unloaded_parts
from tiny_decoders import tiny_decoder


def _reload(model: transformers.PreTrainedModel, folder, model_class, **save):
    model.save_pretrained(folder, **save)
    return model_class.from_pretrained(folder, output_loading_info=True)


def test_an_untied_lm_head_missing_from_the_checkpoint_is_named(tmp_path):
    whole = tiny_decoder("llama", tie_word_embeddings=False)
    reloaded, info = _reload(whole.model, tmp_path, transformers.LlamaForCausalLM)
    assert unloaded_parts(reloaded, info["missing_keys"]) == {"lm_head": ["lm_head.weight"]}


def test_a_head_tied_to_the_input_embeddings_never_counts_as_missing(tmp_path):
    whole = tiny_decoder("gpt2")
    reloaded, info = _reload(whole.transformer, tmp_path, transformers.GPT2LMHeadModel)
    assert reloaded.lm_head.weight is reloaded.transformer.wte.weight
    assert unloaded_parts(reloaded, info["missing_keys"]) == {}


def test_a_task_head_drawn_anew_is_not_a_pretrained_part(tmp_path):
    whole = tiny_decoder("llama", tie_word_embeddings=False)
    reloaded, info = _reload(whole, tmp_path, transformers.LlamaForSequenceClassification)
    assert "score.weight" in info["missing_keys"]
    assert unloaded_parts(reloaded, info["missing_keys"]) == {}


def test_a_decoder_is_named_with_only_the_weights_it_lacked_and_not_its_tied_embeddings():
    model = tiny_decoder("t5")
    own = [name for name, _ in model.named_parameters() if name.startswith("decoder.block.0.")]
    missing = {*own, "decoder.embed_tokens.weight"}  # tied to `shared`, which the checkpoint holds
    assert unloaded_parts(model, missing, [model.get_decoder()]) == {"decoder": sorted(own)}
    assert unloaded_parts(model, set(), [model.get_decoder()]) == {}


@pytest.mark.parametrize("safe_serialization", [True, False], ids=["safetensors", "pickle"])
def test_a_setup_reloaded_onto_a_bare_decoder_is_refused_however_it_was_saved(tmp_path, safe_serialization):
    whole = tiny_decoder("llama", tie_word_embeddings=False)
    whole.model.save_pretrained(tmp_path / "base", safe_serialization=safe_serialization)
    model = af.wrap(whole)
    model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4))
    model.save_pretrained(tmp_path / "setup")
    with pytest.raises(af.IncompatibleModelError, match=r"without its lm_head \(lm_head\.\*: 1 weight\(s\) missing\)"):
        af.AdaptedModel.from_pretrained(tmp_path / "base", tmp_path / "setup")


def test_a_setup_reloaded_onto_its_whole_model_folder_loads(tmp_path):
    whole = tiny_decoder("llama", tie_word_embeddings=False)
    whole.save_pretrained(tmp_path / "base", safe_serialization=False)
    model = af.wrap(whole)
    model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4))
    model.save_pretrained(tmp_path / "setup")
    loaded = af.AdaptedModel.from_pretrained(tmp_path / "base", tmp_path / "setup")
    ids = torch.tensor([[1, 2, 3]])
    torch.testing.assert_close(loaded(input_ids=ids).logits, model(input_ids=ids).logits)
