"""A wrapped transformers task model with no head of ours active hands on all of its own outputs under their names:
a QA model's start_logits / end_logits, GPT2DoubleHeadsModel's mc_logits, equal to what the wrapped model itself
returns with the same pieces running, plain and routed (float64)."""

from __future__ import annotations

import copy
import re

import pytest
import torch
import transformers

import adapterfusion as af
from tiny_decoders import randomise_pieces, tiny_decoder_config, tiny_decoder_inputs


def _wrapped(model: transformers.PreTrainedModel) -> af.AdaptedModel:
    torch.manual_seed(0)
    adapted = af.wrap(model.to(torch.float64).eval())
    adapted.add_adapter("a", af.AdapterConfig.pfeiffer(4))
    randomise_pieces(adapted, seed=3)
    return adapted


def test_question_answering_model_keeps_its_span_logits() -> None:
    model = _wrapped(transformers.BartForQuestionAnswering(tiny_decoder_config("bart")))
    ids = tiny_decoder_inputs("bart")["input_ids"]
    with model.activated(adapter="a"):
        own = model.model(input_ids=ids)  # the transformers model itself, our sites running inside it
        output = model(input_ids=ids)
    plain = model(input_ids=ids)
    assert output.logits is None
    for key in ("start_logits", "end_logits"):
        assert torch.equal(output[key], own[key]) and torch.equal(getattr(output, key), own[key])
        assert not torch.allclose(plain[key], own[key])  # the adapter acts on them
    routed = model(input_ids=ids, adapter_names=[None, "a"])
    assert torch.allclose(routed.start_logits[0], plain.start_logits[0], atol=1e-12)
    assert torch.allclose(routed.start_logits[1], own.start_logits[1], atol=1e-12)


def test_double_heads_model_keeps_its_choice_logits() -> None:
    model = _wrapped(transformers.GPT2DoubleHeadsModel(tiny_decoder_config("gpt2")))
    ids = tiny_decoder_inputs("gpt2")["input_ids"]
    with model.activated(adapter="a"):
        own = model.model(input_ids=ids)
        output = model(input_ids=ids)
    assert torch.equal(output.logits, own.logits) and torch.equal(output.mc_logits, own.mc_logits)


def test_double_heads_model_reads_its_choices_layout_and_labels() -> None:
    """[batch, num_choices, seq] ids with mc_token_ids, mc_labels and LM labels of that shape, as GPT-2's docs give
    them (they were refused as inputs only a MultipleChoiceHead reads)."""
    model = _wrapped(transformers.GPT2DoubleHeadsModel(tiny_decoder_config("gpt2")))
    ids = torch.randint(5, 60, (2, 3, 6), generator=torch.Generator().manual_seed(0))
    choice_tokens, choice_labels = torch.tensor([[5, 5, 4], [5, 3, 5]]), torch.tensor([2, 0])
    with model.activated(adapter="a"):
        own = model.model(input_ids=ids, mc_token_ids=choice_tokens, mc_labels=choice_labels, labels=ids)
        output = model(input_ids=ids, mc_token_ids=choice_tokens, mc_labels=choice_labels, labels=ids)
    assert torch.equal(output.mc_logits, own.mc_logits) and torch.equal(output.mc_loss, own.mc_loss)
    assert torch.equal(output.loss, own.loss) and torch.equal(output.logits, own.logits)
    routed = model(input_ids=ids, mc_token_ids=choice_tokens, adapter_names=[None, "a"])
    assert torch.allclose(routed.mc_logits[1], own.mc_logits[1], atol=1e-12)


T5_SPANS = {"start_positions": torch.tensor([1, 1]), "end_positions": torch.tensor([2, 3])}


@pytest.mark.parametrize(
    ("class_name", "extra"),
    [
        ("T5ForSequenceClassification", {}),
        ("T5ForSequenceClassification", {"labels": torch.tensor([0, 1])}),
        ("T5ForQuestionAnswering", {}),
        ("T5ForQuestionAnswering", T5_SPANS),
    ],
    ids=["seq-cls", "seq-cls-labels", "qa", "qa-positions"],
)
def test_t5_task_models_make_their_decoder_inputs_from_input_ids(class_name: str, extra: dict) -> None:
    """T5's classification and QA models shift input_ids right into the decoder's inputs themselves (they were
    refused as called with no decoder inputs): with a zero-initialised adapter active the wrapped model gives the
    bare model's outputs, with a random one what the model itself gives with it running."""
    torch.manual_seed(0)
    bare = getattr(transformers, class_name)(tiny_decoder_config("t5")).to(torch.float64).eval()
    ids = torch.tensor([[5, 6, 7, 8, 2], [9, 10, 11, 2, 0]])
    inputs = {"input_ids": ids, "attention_mask": (ids != 0).long(), **extra}
    with torch.no_grad():
        expected = copy.deepcopy(bare)(**inputs)
    model = af.wrap(bare)
    model.add_adapter("a", af.AdapterConfig.pfeiffer(4, init="zero_up"))
    keys = [key for key in ("logits", "start_logits", "end_logits", "loss") if expected.get(key) is not None]
    with torch.no_grad(), model.activated(adapter="a"):
        output = model(**inputs)
        assert all(torch.equal(output[key], expected[key]) for key in keys)
        randomise_pieces(model, seed=3)
        own, output = model.model(**inputs), model(**inputs)
    assert all(torch.equal(output[key], own[key]) and not torch.equal(own[key], expected[key]) for key in keys)


@pytest.mark.parametrize("model_type", ["llama", "gpt2"])
def test_a_decoder_classifier_without_a_pad_token_is_refused_a_batch_before_its_forward(model_type: str) -> None:
    """It pools each row's last token that is not its pad token: with no pad_token_id transformers refused a batch
    with a raw ValueError; one row, or a pad_token_id, runs as the bare model does."""
    class_name = f"{'GPT2' if model_type == 'gpt2' else 'Llama'}ForSequenceClassification"
    torch.manual_seed(0)
    bare = getattr(transformers, class_name)(tiny_decoder_config(model_type, pad_token_id=None)).eval()
    model = af.wrap(copy.deepcopy(bare))
    ids = torch.tensor([[5, 6, 7], [8, 9, 10]])
    with pytest.raises(af.ConfigError, match=rf"{class_name} pools .* no pad_token_id.* a batch of 2 rows; set"):
        model(input_ids=ids, attention_mask=torch.ones_like(ids))
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids[:1]).logits, bare(input_ids=ids[:1]).logits)
        model.model.config.pad_token_id = bare.config.pad_token_id = 0
        assert torch.equal(model(input_ids=ids).logits, bare(input_ids=ids).logits)


@pytest.mark.parametrize("model_type", ["bart", "t5"])
def test_an_encoder_decoder_classifier_is_refused_rows_it_cannot_pool(model_type: str) -> None:
    """It pools each row's last end token (eos 2 here), found in input_ids, and needs as many in every row: rows
    without one or with unequal counts were a raw ValueError from inside its forward, inputs_embeds an error too."""
    class_name = f"{model_type.upper() if model_type == 't5' else 'Bart'}ForSequenceClassification"
    torch.manual_seed(0)
    bare = getattr(transformers, class_name)(tiny_decoder_config(model_type)).eval()
    model = af.wrap(copy.deepcopy(bare))
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    bad = {
        "rows [0, 1] hold none": torch.tensor([[5, 6, 7, 8], [8, 9, 10, 0]]),
        "the rows hold [2, 1] of them": torch.tensor([[5, 2, 7, 2], [8, 9, 2, 0]]),
    }
    for words, ids in bad.items():
        with pytest.raises(af.ConfigError, match=rf"{class_name} pools .*eos_token_id=2\), and {re.escape(words)}"):
            model(input_ids=ids, attention_mask=mask)
    embeds = bare.get_input_embeddings()(torch.tensor([[5, 6, 2]]))
    with pytest.raises(af.ConfigError, match=r"which it finds in input_ids; pass input_ids"):
        model(inputs_embeds=embeds, decoder_input_ids=torch.tensor([[0, 5]]))
    ids = torch.tensor([[5, 6, 7, 2], [8, 9, 2, 0]])
    with torch.no_grad():
        expected = bare(input_ids=ids, attention_mask=mask).logits
        assert torch.equal(model(input_ids=ids, attention_mask=mask).logits, expected)
