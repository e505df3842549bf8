"""What the metrics are handed (tasks/metric_inputs.py): each bad prediction gets the message of its real problem,
asked in one order (shape, dtype, finiteness, whole ids, range), and per-sentence tag lists score as padded arrays."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

from adapterfusion.tasks import TaskError, TaskSpec, compute_metrics, pearson, spearman
from adapterfusion.tasks.metrics import dev_metrics

PAIR = TaskSpec(name="pair", kind="single", text_fields=("text",), label_names=("no", "yes"))
NER = TaskSpec(
    name="ner",
    kind="token_classification",
    text_fields=("tokens",),
    label_names=("O", "B-PER", "I-PER"),
    label_field="ner_tags",
    metrics=("f1", "accuracy"),
)


@pytest.mark.parametrize(
    ("predictions", "message"),
    [
        (np.zeros((2, 1, 2)), "shape [2, 1, 2]"),  # shape first: a per-token head's outputs
        (np.zeros((2, 3)), "logits of 3 outputs per example"),
        (np.zeros((2, 1)), "one output per example, a regression head's score"),
        (np.array([True, False]), "dtype bool"),
        (np.array(["no", "yes"]), "not numbers"),
        (np.array([math.nan, 0.5]), "outputs hold NaN"),  # NaN before "a regression head's real values"
        (np.array([math.inf, 1.0]), "infinite values"),
        (np.array([0.5, 1.0]), "a regression head's"),
        (np.array([0, 2]), "predicted id 2"),
        (np.array([-100, 1]), "predicted id -100"),
    ],
)
def test_each_bad_prediction_gets_the_message_of_its_problem(predictions, message):
    with pytest.raises(TaskError) as raised:
        compute_metrics(PAIR, predictions, np.array([0, 1]))
    assert message in str(raised.value)


def test_whole_float_ids_tensors_and_column_labels_are_scored():
    assert compute_metrics(PAIR, np.array([0.0, 1.0]), np.array([[0], [1]])) == {"accuracy": 1.0}
    logits = [torch.tensor([0.9, 0.1]), torch.tensor([0.1, 0.9])]  # a list of tensors, one per example
    assert compute_metrics(PAIR, logits, torch.tensor([0, 1])) == {"accuracy": 1.0}


def test_tag_sentences_of_own_lengths_score_as_the_padded_arrays():
    predicted, gold = [[0, 1], [1, 2, 0]], [[0, 1], [1, 2, 2]]
    padded_predicted = np.array([[0, 1, 0], [1, 2, 0]])
    padded_gold = np.array([[0, 1, -100], [1, 2, 2]])
    assert compute_metrics(NER, predicted, gold) == compute_metrics(NER, padded_predicted, padded_gold)
    assert dev_metrics(NER, predicted, gold) == dev_metrics(NER, padded_predicted, padded_gold)
    with pytest.raises(TaskError, match=r"sentence 1: predictions of shape \[2\] for labels of shape \[3\]"):
        compute_metrics(NER, [[0, 1], [1, 2]], gold)


def test_predicted_tags_are_checked_only_where_a_label_is_scored():
    predicted = np.array([[7, 1, -100]])  # ids under -100 labels (padding, later sub-tokens) are never read
    assert compute_metrics(NER, predicted, np.array([[-100, 1, -100]]))["accuracy"] == 1.0
    with pytest.raises(TaskError, match="predicted id 7"):
        compute_metrics(NER, predicted, np.array([[0, 1, -100]]))


def test_correlations_of_huge_or_non_finite_scores_without_numpy_warnings():
    x, y = np.array([1e200, -1e200, 1e200, 3e199]), np.array([2.0, 1.0, 3.0, 0.5])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert pearson(x, y) == pytest.approx(np.corrcoef(x / 1e200, y)[0, 1])
        assert math.isnan(pearson([math.inf, 1.0, 2.0], [1.0, 2.0, 3.0]))
        assert math.isnan(spearman([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]))  # constant: undefined, documented as NaN


def test_a_nan_metric_comes_with_its_reason():
    from adapterfusion.tasks.metrics import undefined_metric_notes

    stsb = TaskSpec(name="s", kind="single", text_fields=("t",), label_names=(), regression=True)
    constant_gold = compute_metrics(stsb, [1.0, 2.0, 3.0], [2.0, 2.0, 2.0])
    assert (
        "gold scores are 2" in undefined_metric_notes(stsb, constant_gold, [1.0, 2.0, 3.0], [2.0, 2.0, 2.0])["spearman"]
    )
    constant_model = compute_metrics(stsb, [[1.5], [1.5], [1.5]], [1.0, 2.0, 3.0])
    notes = undefined_metric_notes(stsb, constant_model, [[1.5], [1.5], [1.5]], [1.0, 2.0, 3.0])
    assert "predicts 1.5 for all 3 examples" in notes["pearson"]
    assert undefined_metric_notes(stsb, compute_metrics(stsb, [1.0, 3.0], [1.0, 2.0]), [1.0, 3.0], [1.0, 2.0]) == {}


def test_tagging_labels_that_are_all_ignored_are_named_so():
    with pytest.raises(TaskError, match="all 2 tagging labels are -100"):
        compute_metrics(NER, [[0, 1]], [[-100, -100]])
