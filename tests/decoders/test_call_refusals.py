"""Inputs of a decoder's or an encoder-decoder's call that failed inside torch or transformers and are now refused
before the model runs (forward_inputs/), each beside the valid form of the same input, which still gives what the bare
model gives: GPT-2's token types, looked up in its token embeddings; encoder_outputs of another dtype or not finite;
labels with logits_to_keep of some positions only.
The catalogue holds one case of each (tests/reliability/cases_forward.py)."""

from __future__ import annotations

import copy

import pytest
import torch

import adapterfusion as af
from tiny_decoders import tiny_decoder, tiny_decoder_inputs


@pytest.mark.parametrize("call", ["forward", "generate"])
def test_gpt2_token_types_outside_its_vocabulary_are_refused(call: str) -> None:
    """GPT-2 has no type table: it embeds token_type_ids with its token embeddings, so a type of 100 or more (of a
    vocabulary of 100) was torch's IndexError from the embedding; the types inside it give the bare model's logits."""
    bare = tiny_decoder("gpt2")
    model = af.wrap(copy.deepcopy(bare))
    inputs = tiny_decoder_inputs("gpt2")
    ids = inputs["input_ids"]
    with pytest.raises(af.ConfigError, match=r"token_type_ids holds \[100\], outside 0\.\.99 \(gpt2 embeds token"):
        if call == "forward":
            model(**inputs, token_type_ids=torch.full_like(ids, 100))
        else:
            model.generate(**inputs, token_type_ids=torch.full_like(ids, 100), max_new_tokens=2, pad_token_id=0)
    types = torch.ones_like(ids)
    with torch.no_grad():
        torch.testing.assert_close(
            model(**inputs, token_type_ids=types).logits, bare(**inputs, token_type_ids=types).logits
        )


@pytest.mark.parametrize("model_type", ["t5", "bart"])
def test_encoder_outputs_of_another_dtype_or_not_finite_are_refused(model_type: str) -> None:
    """float64 encoder states into a float32 model were torch's dtype RuntimeError in the cross-attention (forward
    and generate); NaN ones gave NaN logits without a word, where NaN inputs_embeds are refused."""
    model = af.wrap(tiny_decoder(model_type))
    inputs = tiny_decoder_inputs(model_type)
    mask, decoder_ids = inputs["attention_mask"], inputs["decoder_input_ids"]
    with torch.no_grad():
        encoded = model.model.get_encoder()(input_ids=inputs["input_ids"], attention_mask=mask)
        expected = model(**inputs).logits
        given = model(encoder_outputs=encoded, attention_mask=mask, decoder_input_ids=decoder_ids).logits
    torch.testing.assert_close(given, expected)
    states = encoded.last_hidden_state
    with pytest.raises(af.ConfigError, match="has dtype torch.float64 but the model's weights are torch.float32"):
        model(encoder_outputs=(states.double(),), attention_mask=mask, decoder_input_ids=decoder_ids)
    with pytest.raises(af.ConfigError, match="encoder_outputs' last hidden state holds NaN or infinite values"):
        model(encoder_outputs=(states * float("nan"),), attention_mask=mask, decoder_input_ids=decoder_ids)
    encoded.last_hidden_state = states.double()
    with pytest.raises(af.ConfigError, match="has dtype torch.float64"):
        model.generate(encoder_outputs=encoded, attention_mask=mask, max_new_tokens=2)


@pytest.mark.parametrize("keep", [1, torch.tensor([0, 3])], ids=["int", "tensor"])
@pytest.mark.parametrize("model_type", ["gpt2", "llama"])
def test_labels_with_logits_to_keep_of_some_positions_are_refused(model_type: str, keep: object) -> None:
    """A causal LM's loss reads one logit row per label: logits of some positions were torch's "Expected input
    batch_size (2) to match target batch_size (14)" from cross_entropy. Keeping every position gives the full loss."""
    model = af.wrap(tiny_decoder(model_type))
    inputs = tiny_decoder_inputs(model_type)
    labels = inputs["input_ids"]
    with pytest.raises(af.ConfigError, match="with labels: the loss needs the logits of every position"):
        model(**inputs, labels=labels, logits_to_keep=keep)
    with torch.no_grad():
        full = model(**inputs, labels=labels).loss
        for every in (0, labels.shape[1], torch.arange(labels.shape[1])):
            torch.testing.assert_close(model(**inputs, labels=labels, logits_to_keep=every).loss, full)
