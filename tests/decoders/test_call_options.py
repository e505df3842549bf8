"""What a decoder's or an encoder-decoder's call still accepts now that forward_inputs checks encoder_outputs, the
decoder inputs an encoder-decoder needs, logits_to_keep and use_cache: each form transformers documents gives what
the full call gives. The refusals are in the bad-input catalogue (tests/reliability/cases_forward.py)."""

from __future__ import annotations

import copy

import pytest
import torch

import adapterfusion as af
from tiny_decoders import tiny_decoder, tiny_decoder_inputs
from tiny_models import randomise


def _adapted(model_type: str) -> af.AdaptedModel:
    """A tiny `model_type` with a randomised adapter 'a' active, so every call form runs through the adapter."""
    model = af.wrap(tiny_decoder(model_type))
    model.add_adapter("a")
    randomise(torch.nn.ModuleList(site.adapters["a"] for site in model.sites_with_adapter("a")), std=0.3)
    model.activate(adapter="a")
    return model


@pytest.mark.parametrize("model_type", ["t5", "bart"])
def test_encoder_outputs_stand_in_for_the_inputs(model_type):
    """The encoder's output, or a tuple of its last hidden state, in place of input_ids (the inputs were required)."""
    model = _adapted(model_type)
    inputs = tiny_decoder_inputs(model_type)
    mask, decoder_ids = inputs["attention_mask"], inputs["decoder_input_ids"]
    with torch.no_grad():
        expected = model(**inputs).logits
        encoded = model.model.get_encoder()(input_ids=inputs["input_ids"], attention_mask=mask)
        alone = model(encoder_outputs=encoded, attention_mask=mask, decoder_input_ids=decoder_ids).logits
        as_tuple = model(**inputs, encoder_outputs=(encoded.last_hidden_state,)).logits
    torch.testing.assert_close(alone, expected)
    torch.testing.assert_close(as_tuple, expected)


@pytest.mark.parametrize("model_type", ["t5", "bart"])
def test_generate_from_encoder_outputs(model_type):
    model = _adapted(model_type)
    inputs = {key: value for key, value in tiny_decoder_inputs(model_type).items() if key != "decoder_input_ids"}
    with torch.no_grad():
        expected = model.generate(**inputs, max_new_tokens=3, do_sample=False)
        encoded = model.model.get_encoder()(**inputs)
    got = model.generate(encoder_outputs=encoded, attention_mask=inputs["attention_mask"], max_new_tokens=3)
    assert torch.equal(got, expected)


def test_bart_makes_its_decoder_inputs_from_input_ids_and_t5_from_labels():
    """The encoder-decoders' own ways to run without decoder inputs pass the new check, with their own results."""
    bart = tiny_decoder("bart")
    reference, model = copy.deepcopy(bart), af.wrap(bart)
    inputs = {key: value for key, value in tiny_decoder_inputs("bart").items() if key != "decoder_input_ids"}
    with torch.no_grad():
        torch.testing.assert_close(model(**inputs).logits, reference(**inputs).logits)
    t5 = tiny_decoder("t5")
    reference, model = copy.deepcopy(t5), af.wrap(t5)
    inputs = tiny_decoder_inputs("t5")
    labels = inputs.pop("decoder_input_ids")
    with torch.no_grad():
        torch.testing.assert_close(model(**inputs, labels=labels).loss, reference(**inputs, labels=labels).loss)


@pytest.mark.parametrize("model_type", ["gpt2", "llama"])
def test_logits_to_keep_selects_positions_of_the_full_logits(model_type):
    model = _adapted(model_type)
    inputs = tiny_decoder_inputs(model_type, padding_side="left")
    with torch.no_grad():
        full = model(**inputs).logits
        torch.testing.assert_close(model(**inputs, logits_to_keep=2).logits, full[:, -2:])
        torch.testing.assert_close(model(**inputs, logits_to_keep=0).logits, full)
        positions = torch.tensor([0, 3, -1])
        torch.testing.assert_close(model(**inputs, logits_to_keep=positions).logits, full[:, positions])
    assert model.generate(**inputs, max_new_tokens=2, pad_token_id=0, logits_to_keep=1).shape == (2, 9)


def test_use_cache_as_a_bool():
    model = _adapted("llama")
    inputs = tiny_decoder_inputs("llama", padding_side="left")
    assert model(**inputs, use_cache=True).past_key_values is not None
    assert model(**inputs, use_cache=False).past_key_values is None
    cached = model.generate(**inputs, max_new_tokens=2, pad_token_id=0, use_cache=True)
    assert torch.equal(model.generate(**inputs, max_new_tokens=2, pad_token_id=0, use_cache=False), cached)


@pytest.mark.parametrize("model_type", ["t5", "bart"])
def test_position_ids_are_refused_where_the_model_counts_positions_itself(model_type):
    """T5 and BART take position_ids only in their **kwargs (for flash attention's packed sequences) and ignore them
    otherwise: reversed positions gave the same logits without a word. A decoder that reads them still takes them."""
    model = _adapted(model_type)
    inputs = tiny_decoder_inputs(model_type)
    positions = torch.arange(inputs["input_ids"].shape[1]).flip(0).expand_as(inputs["input_ids"])
    with pytest.raises(af.ConfigError, match="counts token positions itself, so position_ids would be silently"):
        model(**inputs, position_ids=positions)
    llama = _adapted("llama")
    inputs = tiny_decoder_inputs("llama")
    positions = torch.arange(inputs["input_ids"].shape[1]).flip(0).expand_as(inputs["input_ids"])
    with torch.no_grad():
        assert not torch.equal(llama(**inputs, position_ids=positions).logits, llama(**inputs).logits)
