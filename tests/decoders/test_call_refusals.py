"""Inputs of a decoder's or an encoder-decoder's call that failed inside torch or transformers and are now refused
before the model runs (forward_inputs/), each beside the valid form of the same input, which still gives what the bare
model gives: GPT-2's token types, looked up in its token embeddings; encoder_outputs of another dtype or not finite;
labels with logits_to_keep of some positions only.
The catalogue holds one case of each (tests/reliability/cases_forward.py)."""

from __future__ import annotations

import copy
import re

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


@pytest.mark.parametrize("model_type", ["gpt2", "llama"])
def test_generate_ids_beside_embeds_of_other_tokens_are_refused(model_type: str) -> None:
    """A decoder's generate takes input_ids beside inputs_embeds (it runs the embeddings and returns the ids ahead of
    the new tokens): ids of another length or batch were a RuntimeError from the attention or a concatenation, ids
    outside the vocabulary reached the logits processors unchecked. The embedded tokens' own ids generate what the
    bare model generates; an encoder-decoder takes one of the two."""
    bare = tiny_decoder(model_type)
    model = af.wrap(copy.deepcopy(bare))
    ids = tiny_decoder_inputs(model_type)["input_ids"][:, :5]
    with torch.no_grad():
        embeds = bare.get_input_embeddings()(ids)
    options = dict(max_new_tokens=2, pad_token_id=0, do_sample=False)
    for other in (ids[:, :3], ids[:1]):
        shape = tuple(other.shape)
        with pytest.raises(af.ConfigError, match=rf"input_ids of shape {re.escape(str(shape))} beside inputs_embeds"):
            model.generate(input_ids=other, inputs_embeds=embeds, **options)
    with pytest.raises(af.ConfigError, match=r"input_ids holds \[1\d\d"):
        model.generate(input_ids=ids + 100, inputs_embeds=embeds, repetition_penalty=1.2, **options)
    generated = model.generate(input_ids=ids, inputs_embeds=embeds, **options)
    assert torch.equal(generated, bare.generate(input_ids=ids, inputs_embeds=embeds, **options))
    seq2seq = af.wrap(tiny_decoder("t5"))
    with torch.no_grad():
        embeds = seq2seq.model.get_input_embeddings()(ids)
    with pytest.raises(af.ConfigError, match="input_ids or inputs_embeds, not both"):
        seq2seq.generate(input_ids=ids, inputs_embeds=embeds, **options)


@pytest.mark.parametrize(
    ("model_type", "given", "whose"),
    [
        ("llama", "embeds", "the prompts already have 5"),
        ("gpt2", "ids", "the prompts already have 5"),
        ("t5", "ids", "the decoder's prompts (decoder_input_ids, else its start token) already have 1"),
    ],
)
def test_generate_max_length_within_the_prompt_is_refused(model_type: str, given: str, whose: str) -> None:
    """max_length counts the prompt: one no longer than it leaves nothing to generate. transformers refused it
    too, but of inputs_embeds said "Input length of input_ids is 0, but `max_length` is set to -1" (it counts the
    embeddings off max_length first). One token more generates one token, as the bare model does."""
    bare = tiny_decoder(model_type)
    model = af.wrap(copy.deepcopy(bare))
    ids = tiny_decoder_inputs(model_type)["input_ids"][:, :5]
    with torch.no_grad():
        inputs = {"inputs_embeds": bare.get_input_embeddings()(ids)} if given == "embeds" else {"input_ids": ids}
    width = 1 if model_type == "t5" else 5
    with pytest.raises(af.ConfigError, match=rf"max_length={width} tokens per sequence, prompt included, but "):
        model.generate(**inputs, max_length=width, pad_token_id=0)
    with pytest.raises(af.ConfigError, match=re.escape(whose)):
        model.generate(**inputs, max_length=width, pad_token_id=0)
    options = dict(max_length=width + 1, pad_token_id=0, do_sample=False)
    assert torch.equal(model.generate(**inputs, **options), bare.generate(**inputs, **options))
