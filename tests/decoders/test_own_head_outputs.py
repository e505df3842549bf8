"""A wrapped transformers task model with no head of ours active hands on all of its own outputs under their names:
a QA model's start_logits / end_logits, GPT2DoubleHeadsModel's mc_logits, equal to what the wrapped model itself
returns with the same pieces running, plain and routed (float64)."""

from __future__ import annotations

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
