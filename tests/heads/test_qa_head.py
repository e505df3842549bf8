"""QuestionAnsweringHead: its config, outputs and loss against a hand computation, the check of its labels, the
exact span decoding against a brute-force search, and its use with adapters, fusion and save/load."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

import adapterfusion as af
from adapterfusion.heads.question_answering import NOT_CONTEXT, best_span, qa_loss
from tiny_models import HIDDEN, randomise, tiny_encoder, tiny_inputs


def _model() -> af.AdaptedModel:
    model = af.wrap(tiny_encoder())
    model.add_head("qa", af.QuestionAnsweringHead(dropout=0.0))
    model.activate(head="qa")
    return model


def test_config_defaults_and_refusals():
    config = af.QuestionAnsweringHead()
    assert (config.num_labels, config.layers, config.output_size, config.per_token) == (2, 1, 2, True)
    assert af.ClassificationHead().per_token is False
    with pytest.raises(af.ConfigError, match="exactly 2 outputs per token"):
        af.QuestionAnsweringHead(num_labels=3)
    with pytest.raises(af.ConfigError, match="no labels"):
        af.QuestionAnsweringHead(labels=("start", "end"))
    again = af.heads.head_config_from_dict(config.to_dict())
    assert again == config and type(again) is af.QuestionAnsweringHead


def test_logits_are_a_linear_map_of_every_token_and_the_loss_is_the_mean_of_two_cross_entropies():
    model = _model()
    inputs = tiny_inputs(batch=2, seq=7)
    labels = af.qa_labels(torch.tensor([1, 3]), torch.tensor([2, 4]))  # row 1 is padded at tokens 5 and 6
    output = model(**inputs, labels=labels)
    assert output.logits.shape == (2, 7, 2)
    hidden = model.model(**inputs).last_hidden_state
    linear = model.get_head("qa").layers[-1]
    torch.testing.assert_close(output.logits, hidden @ linear.weight.T + linear.bias)
    # by hand: -log softmax at the gold position, start and end, averaged over rows, then halved
    log_start, log_end = output.logits[..., 0].log_softmax(-1), output.logits[..., 1].log_softmax(-1)
    expected = -(log_start[0, 1] + log_start[1, 3]) / 2 / 2 - (log_end[0, 2] + log_end[1, 4]) / 2 / 2
    torch.testing.assert_close(output.loss, expected)
    torch.testing.assert_close(qa_loss(output.logits, labels), expected)


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        (torch.tensor([1, 2]), r"must be \[batch, 2\]"),
        (torch.tensor([[1, 2], [0, 7]]), r"token indices in 0\.\.6"),
        (torch.tensor([[1, 2], [-1, 0]]), r"token indices in 0\.\.6"),
        (torch.tensor([[3, 2], [0, 0]]), "row 0 ends its answer"),
        (torch.tensor([[1.5, 2.0], [0.0, 0.0]]), "whole token indices"),
    ],
)
def test_bad_labels_are_refused_with_what_to_pass(labels, message):
    with pytest.raises(af.ConfigError, match=message):
        _model()(**tiny_inputs(batch=2, seq=7), labels=labels)


def _brute_force(start, end, offsets, longest):
    best = None
    for i, j in itertools.product(range(len(start)), repeat=2):
        if j < i or j - i + 1 > longest or offsets[i][0] == NOT_CONTEXT or offsets[j][0] == NOT_CONTEXT:
            continue
        score = start[i] + end[j]
        if best is None or score > best[0]:
            best = (score, i, j)
    return best


def test_best_span_is_the_best_valid_span_of_a_brute_force_search():
    rng = np.random.default_rng(0)
    for trial in range(200):
        length = int(rng.integers(4, 24))
        start, end = rng.normal(size=length), rng.normal(size=length)
        context = rng.random(length) < 0.7
        context[0] = False  # [CLS] is never context
        offsets = np.array([[3 * i, 3 * i + 2] if c else [NOT_CONTEXT, NOT_CONTEXT] for i, c in enumerate(context)])
        longest = int(rng.integers(1, 6))
        span, expected = best_span(start, end, offsets, longest), _brute_force(start, end, offsets, longest)
        if expected is None:
            assert span is None
            continue
        assert (span.start, span.end) == expected[1:], trial
        assert math.isclose(span.score, expected[0])
        assert (span.char_start, span.char_end) == (3 * span.start, 3 * span.end + 2)


def test_best_span_hand_cases():
    offsets = np.array([[NOT_CONTEXT] * 2, [0, 3], [4, 7], [8, 11], [NOT_CONTEXT] * 2])
    # the highest start logit sits on a non-context token, the highest end before the best start: both skipped
    start = np.array([9.0, 1.0, 2.0, 0.0, 9.0])
    end = np.array([9.0, 5.0, 0.0, 1.0, 9.0])
    span = best_span(start, end, offsets)
    assert (span.start, span.end, span.char_start, span.char_end) == (1, 1, 0, 3)  # 1 + 5 beats 2 + 1
    assert best_span(start, end, offsets, max_answer_tokens=1).start == 1
    end[3] = 5.0  # now 2 + 5 from token 2 to 3 wins, but only when two-token answers are allowed
    assert (best_span(start, end, offsets).start, best_span(start, end, offsets).end) == (2, 3)
    assert best_span(start, end, offsets, max_answer_tokens=1).end == 1  # single tokens: 1 + 5 (token 1)
    assert best_span(start, end, np.full((5, 2), NOT_CONTEXT)) is None
    with pytest.raises(af.ConfigError, match="max_answer_tokens=0 must be an integer >= 1"):
        best_span(start, end, offsets, max_answer_tokens=0)


def test_with_an_adapter_only_the_adapter_and_head_train():
    model = _model()
    model.add_adapter("a")
    model.train_adapter("a", head="qa")
    output = model(**tiny_inputs(), labels=torch.tensor([[1, 2], [0, 0]]))
    output.loss.backward()
    grads = {name for name, p in model.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
    assert grads and all(".adapters.a." in name or name.startswith("heads.qa.") for name in grads)
    assert any(name.startswith("heads.qa.") for name in grads) and any(".adapters.a." in name for name in grads)


def test_with_fusion_the_fused_model_answers_and_trains_its_fusion():
    model = _model()
    for name in ("a", "b"):
        model.add_adapter(name)
        with torch.no_grad():
            for parameter in model.adapter_parameters(name):
                parameter.normal_(0.0, 0.1)
    model.add_fusion("f", ["a", "b"])
    model.train_fusion("f", head="qa")
    output = model(**tiny_inputs(), labels=torch.tensor([[1, 2], [0, 0]]))
    assert output.logits.shape == (2, 7, 2)
    output.loss.backward()
    assert all(p.grad is not None for p in model.fusion_parameters("f") if p.requires_grad)


def test_save_and_load_give_the_same_logits_in_our_format(tmp_path):
    model = _model()
    randomise(model.get_head("qa"))
    model.eval()
    inputs = tiny_inputs()
    before = model(**inputs).logits
    model.save_head("qa", tmp_path / "head")
    other = af.wrap(tiny_encoder())
    name = other.load_head(tmp_path / "head")
    other.activate(head=name)
    other.eval()
    assert type(other.get_head(name).config) is af.QuestionAnsweringHead
    torch.testing.assert_close(other(**inputs).logits, before, rtol=0, atol=0)
    assert other.get_head(name).layers[-1].weight.shape == (2, HIDDEN)


def test_a_whole_setup_with_both_span_heads_saves_and_loads(tmp_path):
    model = _model()
    model.add_adapter("a")
    model.add_head("ner", af.TokenClassificationHead(num_labels=3, labels=("O", "B-X", "I-X")))
    randomise(model.get_head("qa"))
    model.activate(adapter="a", head="qa")
    model.eval()
    inputs = tiny_inputs()
    before = model(**inputs).logits
    model.save_pretrained(tmp_path / "setup")
    again = af.AdaptedModel.from_pretrained(tiny_encoder(), tmp_path / "setup").eval()
    assert (again.active_adapter, again.active_head) == ("a", "qa")
    assert again.get_head("ner").config == model.get_head("ner").config
    torch.testing.assert_close(again(**inputs).logits, before, rtol=0, atol=0)


def test_qa_labels_pair_whole_positions_one_to_one():
    assert af.qa_labels([1, 2], np.array([2.0, 3.0])).tolist() == [[1, 2], [2, 3]]
    for starts, ends, message in (
        (torch.tensor([1, 2]), torch.tensor([2]), "2 start_positions but 1 end_positions"),
        (torch.tensor([1.5]), torch.tensor([2]), "start_positions must be whole token indices"),
        (torch.tensor([1]), torch.tensor([math.nan]), "end_positions must be whole token indices"),
        (["a"], [1], "are not token indices"),
    ):
        with pytest.raises(af.ConfigError, match=message):
            af.qa_labels(starts, ends)
