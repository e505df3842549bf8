"""Metrics against hand-computed values and numpy's own correlation."""

from __future__ import annotations

import numpy as np
import pytest

from adapterfusion.tasks import TaskError, accuracy, compute_metrics, f1, pearson, spearman


def test_accuracy_from_ids_and_from_logits():
    assert accuracy([0, 1, 1, 2], [0, 1, 0, 2]) == 0.75
    logits = np.array([[2.0, 1.0], [0.1, 0.9], [0.3, 0.2]])
    assert accuracy(logits, [0, 1, 1]) == pytest.approx(2 / 3)


def test_binary_f1_by_hand():
    preds, gold = [1, 1, 0, 0, 1], [1, 0, 0, 1, 1]  # tp=2, fp=1, fn=1
    assert f1(preds, gold) == pytest.approx(2 / 3)
    assert f1(preds, gold, positive=0) == pytest.approx(0.5)  # tp=1, fp=1, fn=1
    assert f1([0, 0], [0, 0]) == 0.0


def test_correlations():
    x, y = [1, 2, 3, 4, 5], [5, 6, 7, 8, 7]
    assert pearson(x, y) == pytest.approx(np.corrcoef(x, y)[0, 1])
    assert spearman(x, y) == pytest.approx(8 / np.sqrt(95))  # ranks of y with the tie averaged: 1,2,3.5,5,3.5
    assert np.isnan(pearson([1, 1, 1], [1, 2, 3]))


def test_compute_metrics_uses_the_task_metrics():
    assert compute_metrics("rte", [0, 1], [0, 0]) == {"accuracy": 0.5}
    scores = compute_metrics("mrpc", [1, 1, 0, 0, 1], [1, 0, 0, 1, 1])
    assert scores == pytest.approx({"accuracy": 0.6, "f1": 2 / 3})
    assert compute_metrics("commonsense_qa", np.eye(5), np.arange(5)) == {"accuracy": 1.0}


def test_compute_metrics_errors():
    with pytest.raises(TaskError, match="3 predictions but 2 labels"):
        compute_metrics("rte", [0, 1, 1], [0, 1])
    with pytest.raises(TaskError, match="label 3 is outside 0..1"):
        compute_metrics("rte", [0, 1], [0, 3])
    with pytest.raises(TaskError, match="evaluation split is empty"):
        accuracy([], [])


def test_top_prediction_share_and_the_constant_predictor_warning():
    from adapterfusion.tasks.metrics import collapse_warning, dev_metrics, top_prediction_share

    assert top_prediction_share([1, 1, 0, 1]) == 0.75
    assert top_prediction_share(np.array([[0.1, 0.9], [0.2, 0.8]])) == 1.0  # logits are arg-maxed
    constant = dev_metrics("rte", np.array([[0.1, 0.9]] * 4), np.array([0, 1, 1, 0]))
    assert constant == {"accuracy": 0.5, "top_prediction_share": 1.0}
    warning = collapse_warning(constant, 4)
    assert "constant predictor" in warning and "all 4 dev examples" in warning
    assert collapse_warning(dev_metrics("rte", np.array([0, 1, 1, 1]), np.array([0, 1, 1, 0]))) is None


@pytest.mark.parametrize(
    ("spec", "metric", "labels", "reason"),
    [
        (dict(label_names=(), regression=True), "spearman", [2.0], "1 example(s)"),
        (dict(label_names=(), regression=True), "pearson", [2.0, 2.0, 2.0], "gold scores are 2"),
        (dict(metrics=("f1",)), "f1", [0, 0, 0], "no example of the positive label 'pos'"),
        (dict(metrics=("matthews_correlation",)), "matthews_correlation", [1, 1], "the label 'pos'"),
        (dict(label_names=(), regression=True), "spearman", [1.0, 2.0], None),
        (dict(metrics=("f1",)), "f1", [0, 1], None),
        (dict(), "accuracy", [0, 0], None),  # accuracy tells checkpoints apart on one class too
    ],
)
def test_constant_metric_reason_names_a_dev_split_that_cannot_select(spec, metric, labels, reason):
    """A selecting metric with one value (or NaN) whatever the model predicts: said before training, not as a NaN
    best score (or TaskError after an epoch) at its end."""
    from adapterfusion.tasks import TaskSpec
    from adapterfusion.tasks.metrics import constant_metric_reason

    task = TaskSpec(
        **{"name": "own", "kind": "single", "text_fields": ("text",), "label_names": ("neg", "pos"), **spec}
    )
    found = constant_metric_reason(task, metric, labels)
    assert found is None if reason is None else reason in found
