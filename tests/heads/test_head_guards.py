"""The guards of the heads and span helpers against odd values that stay legal: they refuse what would train or
score wrongly (tests/reliability/cases_heads.py has each refusal) and keep what is only unusually written."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import adapterfusion as af
from adapterfusion.heads.question_answering import NOT_CONTEXT, best_span, whole_values
from adapterfusion.tasks.collator import TaskCollator
from adapterfusion.tasks.tagging_metrics import entity_scores

OFFSETS = np.array([[NOT_CONTEXT, NOT_CONTEXT], [0, 3], [4, 7], [8, 12], [NOT_CONTEXT, NOT_CONTEXT]])


class _Tokenizer:
    pad_token_id = 0
    padding_side = "right"


def test_best_span_width_beyond_the_feature_is_the_whole_feature():
    start, end = np.array([0.0, 1, 3, 0, 9]), np.array([0.0, 0, 1, 4, 9])
    expected = best_span(start, end, OFFSETS, max_answer_tokens=3)
    assert best_span(start, end, OFFSETS, max_answer_tokens=10**9) == expected  # no [seq, 10**9] scores
    assert (expected.start, expected.end) == (2, 3)


def test_best_span_reads_only_the_tokens_both_logits_cover():
    span = best_span(np.array([0.0, 1, 2, 9]), np.array([0.0, 1]), OFFSETS)
    assert (span.start, span.end) == (1, 1)  # was an IndexError: the end logits of tokens 2 and 3 are missing


@pytest.mark.parametrize(
    ("values", "whole"),
    [
        (torch.tensor([1, 2]), True),
        (torch.tensor([1.0, -100.0]), True),
        (torch.tensor([1.5]), False),
        (torch.tensor([math.inf]), False),
        (torch.tensor([math.nan]), False),
    ],
)
def test_whole_values(values, whole):
    assert whole_values(values) is whole


def test_heads_that_stay_legal():
    assert af.RegressionHead().num_labels == 1
    assert af.TokenClassificationHead(num_labels=2).pooling is None
    assert af.MultipleChoiceHead(num_labels=1).output_size == 1  # the choice count is informational


def test_collator_keeps_whole_float_and_tensor_labels():
    collate = TaskCollator(_Tokenizer())
    batch = collate([{"input_ids": [5, 6], "labels": [1.0, -100.0]}, {"input_ids": torch.tensor([7]), "labels": [2]}])
    assert batch["labels"].tolist() == [[1, -100], [2, -100]]
    assert batch["labels"].dtype == torch.long
    assert collate([{"input_ids": [5], "label": np.int64(3)}])["labels"].tolist() == [3]


def test_entity_scores_of_generators_equal_those_of_lists():
    predicted, gold = [["B-PER", "I-PER", "O"], ["B-LOC"]], [["B-PER", "I-PER", "O"], ["O"]]
    lazy = entity_scores((iter(s) for s in predicted), (iter(s) for s in gold))
    assert lazy == entity_scores(predicted, gold)
