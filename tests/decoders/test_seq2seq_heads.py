"""Our prediction heads on encoder-decoders (T5, BART): the head reads the decoder run on the input shifted right by
one, at each row's last non-padding position, as transformers' T5/BartForSequenceClassification read the end token.
Checked in float64 against the wrapped model's own forward given those decoder inputs by hand, and each padded row
against the same row alone; training reaches the fusion and the head only."""

from __future__ import annotations

import pytest
import torch

import adapterfusion as af
from tiny_decoders import SEQ2SEQ_TYPES, TINY_DECODER_CONFIGS, tiny_decoder
from tolerances import assert_close


def _model(model_type: str) -> af.AdaptedModel:
    model = af.wrap(tiny_decoder(model_type, dtype=torch.float64))
    for name in ("a", "b"):
        model.add_adapter(name, af.AdapterConfig.pfeiffer(4, init="bert"))
    model.add_fusion("f", ["a", "b"])
    model.add_head("h", af.ClassificationHead(num_labels=3, pooling="last"))
    model.activate(fusion="f", head="h")
    return model.eval()


def _by_hand(
    model: af.AdaptedModel, ids: torch.Tensor, mask: torch.Tensor, decoder: tuple[torch.Tensor, ...] | None = None
) -> torch.Tensor:
    """The head on the decoder's last layer at each row's last real token, through the wrapped LM's own forward
    (which runs the same active fusion). The decoder is fed `decoder` (ids, mask) and pooled at its mask's last 1;
    by default [start] + ids[:-1] under the input's mask shifted alike, pooled at the input's last real token."""
    if decoder is None:
        start = TINY_DECODER_CONFIGS[model.fingerprint.model_type][1]["decoder_start_token_id"]
        decoder_ids = torch.cat([torch.full_like(ids[:, :1], start), ids[:, :-1]], dim=1)
        decoder_mask = torch.cat([torch.ones_like(mask[:, :1]), mask[:, :-1]], dim=1)
        last = mask.sum(dim=1) - 1  # right padding: each row's last real token
    else:
        decoder_ids, decoder_mask = decoder
        last = decoder_mask.sum(dim=1) - 1
    output = model.model(
        input_ids=ids,
        attention_mask=mask,
        decoder_input_ids=decoder_ids,
        decoder_attention_mask=decoder_mask,
        output_hidden_states=True,
    )
    states = output.decoder_hidden_states[-1]
    return model.get_head("h").from_pooled(states[torch.arange(len(ids)), last])


def _padded(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(row) for row in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, : len(row)], mask[i, : len(row)] = torch.tensor(row), 1
    return ids, mask


@pytest.mark.parametrize("model_type", SEQ2SEQ_TYPES)
def test_a_head_reads_the_decoder_on_the_input_shifted_right(model_type: str) -> None:
    model = _model(model_type)
    ids, mask = _padded([[11, 12, 13, 14, 15, 2], [21, 22, 23, 2]])  # 2: the end token, as tokenizers append it
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits
        assert_close(logits, _by_hand(model, ids, mask), dtype=torch.float64)
        for i in range(len(ids)):  # a padded row gives what it gives alone
            alone = ids[i : i + 1, : int(mask[i].sum())]
            assert_close(logits[i], model(input_ids=alone).logits[0], dtype=torch.float64, label=f"row {i}")
        model.activate(head="h")
        assert not torch.equal(model(input_ids=ids, attention_mask=mask).logits, logits)  # the fusion acts


@pytest.mark.parametrize("model_type", SEQ2SEQ_TYPES)
def test_a_left_padded_row_gives_what_it_gives_alone(model_type: str) -> None:
    """Left padding would put the decoder's start token far from the row's first token (BART's learned positions,
    T5's relative buckets): each row's tokens are moved to the front before the shift, so padding on either side, or
    a mix of both, gives each row's own logits."""
    model = _model(model_type)
    rows = [[11, 12, 13, 14, 15, 2], [21, 22, 23, 2], [31, 32, 2]]
    ids = torch.zeros(3, 8, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, (row, start) in enumerate(zip(rows, (2, 4, 1), strict=True)):  # rows 0, 1 left-padded, row 2 both sides
        ids[i, start : start + len(row)], mask[i, start : start + len(row)] = torch.tensor(row), 1
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits
        for i, row in enumerate(rows):
            alone = model(input_ids=torch.tensor([row])).logits[0]
            assert_close(logits[i], alone, dtype=torch.float64, label=f"row {i}")


@pytest.mark.parametrize("model_type", SEQ2SEQ_TYPES)
def test_decoder_inputs_of_their_own_length_are_pooled_by_their_own_mask(model_type: str) -> None:
    """decoder_input_ids given by the caller (here 3 tokens for inputs of 6) are used as given: the head pools each
    row's last token under decoder_attention_mask (not the input's mask, which has another length)."""
    model = _model(model_type)
    ids, mask = _padded([[11, 12, 13, 14, 15, 2], [21, 22, 23, 2]])
    start = TINY_DECODER_CONFIGS[model_type][1]["decoder_start_token_id"]
    decoder_ids = torch.tensor([[start, 31, 32], [start, 41, 0]])
    decoder_mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    with torch.no_grad():
        logits = model(
            input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids, decoder_attention_mask=decoder_mask
        ).logits
        assert_close(logits, _by_hand(model, ids, mask, (decoder_ids, decoder_mask)), dtype=torch.float64)
        with pytest.raises(af.ConfigError, match="decoder_attention_mask"):  # row 1's padding would be pooled
            model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids)


@pytest.mark.parametrize("model_type", SEQ2SEQ_TYPES)
def test_a_fusion_and_a_head_train_on_an_encoder_decoder(model_type: str) -> None:
    model = _model(model_type).train()
    model.train_fusion("f")
    ids, mask = _padded([[11, 12, 13, 2], [21, 22, 2]])
    output = model(input_ids=ids, attention_mask=mask, labels=torch.tensor([0, 2]))
    output.loss.backward()
    trained = {name for name, p in model.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
    assert any(name.startswith("heads.h.") for name in trained)
    assert any(".fusions.f." in name for name in trained)
    assert all(".fusions.f." in name or name.startswith("heads.h.") for name in trained)


def test_what_an_encoder_decoder_head_cannot_do_is_refused_by_name() -> None:
    model = af.wrap(tiny_decoder("t5"))
    with pytest.raises(af.ConfigError, match="pooling='last'"):
        model.add_head("h", af.ClassificationHead(num_labels=2, pooling="cls"))  # the start token has read nothing
    with pytest.raises(af.ConfigError, match="encoder-decoders"):
        model.add_head("qa", af.QuestionAnsweringHead())
    model.add_head("h", af.ClassificationHead(num_labels=2))  # the model's own: the last non-padding token
    assert model.heads["h"].config.pooling == "last"
    model.activate(head="h")
    with pytest.raises(af.ConfigError, match="decoder_input_ids"):
        model(inputs_embeds=torch.zeros(1, 4, 32))
    with pytest.raises(af.ConfigError, match="use_cache"):
        model(input_ids=torch.tensor([[5, 6, 2]]), use_cache=True)


@pytest.mark.parametrize("model_type", SEQ2SEQ_TYPES)
def test_a_decoder_mask_without_decoder_inputs_is_refused(model_type: str) -> None:
    """The head builds its decoder's inputs from input_ids shifted right, under the input's mask shifted alike: a
    decoder_attention_mask given without decoder_input_ids was replaced by that mask without a word."""
    model = _model(model_type)
    ids, mask = _padded([[11, 12, 13, 14, 15, 2], [21, 22, 23, 2]])
    with pytest.raises(af.ConfigError, match="decoder_attention_mask without decoder_input_ids"):
        model(input_ids=ids, attention_mask=mask, decoder_attention_mask=torch.ones_like(mask))
