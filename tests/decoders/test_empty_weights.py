"""A decoder built under accelerate's init_empty_weights, wrapped, given room with to_empty and then its weights as
save_pretrained writes them (a tied lm_head left out) computes the model's logits: to_empty ties the lm_head to the
embeddings again, as from_pretrained does. Before, the lm_head kept to_empty's uninitialised memory."""

from __future__ import annotations

import pytest
import torch
import transformers
from accelerate import init_empty_weights

import adapterfusion as af
from tiny_decoders import tiny_decoder, tiny_decoder_config


def _empty_wrapped(model_type: str) -> af.AdaptedModel:
    with init_empty_weights():
        empty = transformers.AutoModelForCausalLM.from_config(tiny_decoder_config(model_type, tie_word_embeddings=True))
    wrapped = af.wrap(empty)
    wrapped.to_empty(device="cpu")
    return wrapped


@pytest.mark.parametrize("model_type", ["gpt2", "llama"])
def test_to_empty_ties_the_lm_head_to_the_embeddings_again(model_type: str) -> None:
    model = _empty_wrapped(model_type).model
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight


def test_to_empty_then_saved_weights_gives_the_models_logits() -> None:
    """GPT-2 holds no buffers, so its saved weights are all it needs (a Llama's rotary buffers, which to_empty
    empties as torch's does, would also need recomputing)."""
    reference = af.wrap(tiny_decoder("gpt2", tie_word_embeddings=True))
    saved = {k: v for k, v in reference.model.state_dict().items() if k != "lm_head.weight"}  # as a tied model saves
    wrapped = _empty_wrapped("gpt2")
    assert wrapped.model.load_state_dict(saved, strict=False).missing_keys == ["lm_head.weight"]
    ids = torch.tensor([[1, 5, 7, 2, 9]])
    with torch.no_grad():
        assert torch.equal(wrapped.eval()(input_ids=ids).logits, reference(input_ids=ids).logits)
