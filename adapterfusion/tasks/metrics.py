"""Task metrics in plain numpy: accuracy, binary F1, Matthews correlation, and Pearson/Spearman for regression
tasks (STS-B) and score-valued analyses.

Undefined values: Matthews correlation is 0 when predictions or labels hold one class (sklearn's and GLUE's
convention: no better than chance); a correlation with a constant input is NaN (it has no value), which reports
show as "undefined" rather than as a number.

`compute_metrics` accepts predicted ids or logits ([n, num_labels], arg-maxed), so it plugs into a training loop
or the HF Trainer's EvalPrediction unchanged.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from adapterfusion.tasks.errors import TaskError, refuse_nan_outputs
from adapterfusion.tasks.registry import resolve_task
from adapterfusion.tasks.spec import TaskSpec
from adapterfusion.tasks.squad import qa_needs_features
from adapterfusion.tasks.tagging import tagging_metrics, top_tag_share


def _as_ids(predictions, labels) -> tuple[np.ndarray, np.ndarray]:
    """Predicted ids (logits are arg-maxed over the last axis) and labels, both 1-D and of equal length."""
    refuse_nan_outputs(predictions, "scoring")
    preds = np.asarray(predictions)
    if preds.ndim == 2:
        preds = preds.argmax(axis=-1)
    gold = np.asarray(labels).reshape(-1)
    preds = preds.reshape(-1)
    if preds.shape != gold.shape:
        raise TaskError(f"{preds.shape[0]} predictions but {gold.shape[0]} labels; they must match one to one.")
    if gold.size == 0:
        raise TaskError("no predictions to score; the evaluation split is empty.")
    return preds, gold


def accuracy(predictions, labels) -> float:
    """Fraction of predictions equal to the label."""
    preds, gold = _as_ids(predictions, labels)
    return float(np.mean(preds == gold))


def f1(predictions, labels, positive: int = 1) -> float:
    """Binary F1 of class `positive` (GLUE's MRPC/QQP F1); 0.0 when it is never predicted nor present."""
    preds, gold = _as_ids(predictions, labels)
    tp = np.sum((preds == positive) & (gold == positive))
    predicted, actual = np.sum(preds == positive), np.sum(gold == positive)
    return float(2 * tp / (predicted + actual)) if predicted + actual else 0.0


def matthews_correlation(predictions, labels) -> float:
    """Matthews correlation of multi-class predictions (Gorodkin's R_K; for two classes the phi coefficient that
    GLUE reports for CoLA); 0.0 when either side holds a single class, where the formula divides by zero."""
    preds, gold = _as_ids(predictions, labels)
    classes = np.union1d(preds, gold)
    confusion = np.zeros((classes.size, classes.size), dtype=np.float64)
    np.add.at(confusion, (np.searchsorted(classes, gold), np.searchsorted(classes, preds)), 1.0)
    n, correct = confusion.sum(), np.trace(confusion)
    true_per_class, predicted_per_class = confusion.sum(axis=1), confusion.sum(axis=0)
    cov = correct * n - predicted_per_class @ true_per_class
    denom = np.sqrt((n * n - predicted_per_class @ predicted_per_class) * (n * n - true_per_class @ true_per_class))
    return float(cov / denom) if denom else 0.0


def pearson(x, y) -> float:
    """Pearson correlation; nan when either input is constant."""
    x, y = np.asarray(x, dtype=np.float64).ravel(), np.asarray(y, dtype=np.float64).ravel()
    if x.shape != y.shape or x.size < 2:
        raise TaskError(f"pearson needs two equal-length inputs of 2+ values, got {x.size} and {y.size}.")
    xc, yc = x - x.mean(), y - y.mean()
    denom = np.sqrt(np.sum(xc * xc) * np.sum(yc * yc))
    return float(np.sum(xc * yc) / denom) if denom else float("nan")


def _ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks with ties given their average rank (as Spearman's rho requires)."""
    order = np.argsort(values, kind="mergesort")
    sorted_vals = values[order]
    ranks = np.empty(len(values), dtype=np.float64)
    starts = np.flatnonzero(np.r_[True, sorted_vals[1:] != sorted_vals[:-1]])
    ends = np.r_[starts[1:], len(values)]
    for start, end in zip(starts, ends, strict=True):
        ranks[order[start:end]] = (start + end + 1) / 2.0
    return ranks


def spearman(x, y) -> float:
    """Spearman rank correlation (Pearson of average ranks); nan where a value is not finite (ranks would place NaN
    last and call the result finite, where Pearson's says nan)."""
    x, y = np.asarray(x, dtype=np.float64).ravel(), np.asarray(y, dtype=np.float64).ravel()
    if x.shape == y.shape and x.size >= 2 and not (np.isfinite(x).all() and np.isfinite(y).all()):
        return float("nan")
    return pearson(_ranks(x), _ranks(y))


_METRICS: dict[str, Callable[[TaskSpec, np.ndarray, np.ndarray], float]] = {
    "accuracy": lambda spec, p, g: accuracy(p, g),
    "f1": lambda spec, p, g: f1(p, g, positive=spec.positive_label),
    "matthews_correlation": lambda spec, p, g: matthews_correlation(p, g),
    "spearman": lambda spec, p, g: spearman(p, g),
    "pearson": lambda spec, p, g: pearson(p, g),
}


def _as_scores(spec: TaskSpec, predictions, labels) -> tuple[np.ndarray, np.ndarray]:
    """A regression task's predicted and gold scores, 1-D; [n, 1] outputs are squeezed. [n, k > 1] outputs are a
    classification head's: refused, naming both."""
    preds = np.asarray(predictions, dtype=np.float64)
    if preds.ndim == 2 and preds.shape[1] == 1:
        preds = preds[:, 0]
    if preds.ndim != 1:
        raise TaskError(
            f"task {spec.name!r} is a regression task (one score per example), but the predictions have shape "
            f"{list(preds.shape)}, a classification head's logits; give it af.RegressionHead()."
        )
    gold = np.asarray(labels, dtype=np.float64).reshape(-1)
    if preds.shape != gold.shape:
        raise TaskError(f"{preds.shape[0]} predictions but {gold.shape[0]} labels; they must match one to one.")
    if gold.size == 0:
        raise TaskError("no predictions to score; the evaluation split is empty.")
    return preds, gold


def _check_class_outputs(spec: TaskSpec, predictions) -> None:
    """A classification task scored from real-valued 1-D outputs got a regression head's: refused, naming both."""
    preds = np.asarray(predictions)
    if (
        preds.ndim == 1
        and preds.size
        and np.issubdtype(preds.dtype, np.floating)
        and not np.all(preds == np.round(preds))
    ):
        raise TaskError(
            f"task {spec.name!r} is a classification task ({spec.num_labels} labels), but the predictions are one "
            "real value per example, a regression head's; give it a classification head with "
            f"num_labels={spec.num_labels}."
        )


def _check_predicted_ids(spec: TaskSpec, predictions, preds: np.ndarray) -> None:
    """Logits of another width than the task's labels (a head built for another label set or number of choices),
    or ids outside them: a TaskError, where argmax would score whatever ids came out as plain misses."""
    outputs = np.asarray(predictions)
    width = outputs.shape[1] if outputs.ndim == 2 else None
    wrong = preds[(preds < 0) | (preds >= spec.num_labels)]
    if (width is not None and width != spec.num_labels) or wrong.size:
        what = f"logits of {width} outputs per example" if width is not None else f"predicted id {int(wrong[0])}"
        raise TaskError(
            f"task {spec.name!r} has {spec.num_labels} labels {list(spec.label_names)}, but the predictions are "
            f"{what}; score the outputs of a head built for this task ({spec.num_labels} labels, or choices per "
            "example for multiple choice)."
        )


def top_prediction_share(predictions) -> float:
    """Share of the predictions that go to the most often predicted id (class, or choice position for multiple
    choice; a regression head's score): 1.0 means a constant predictor, whatever its accuracy happens to be."""
    preds = np.asarray(predictions)
    preds = (preds.argmax(axis=-1) if preds.ndim == 2 and preds.shape[1] > 1 else preds).reshape(-1)
    if preds.size == 0:
        raise TaskError("no predictions to summarise; the evaluation split is empty.")
    return float(np.unique(preds, return_counts=True)[1].max() / preds.size)


def compute_metrics(task: str | TaskSpec, predictions, labels) -> dict[str, float]:
    """The task's metrics (e.g. {"accuracy": .., "f1": ..} for MRPC), from predicted ids or logits; a regression
    task's from predicted scores."""
    spec = resolve_task(task)
    if spec.is_token_classification:  # one tag per word, at each word's first token (tasks/tagging.py)
        return tagging_metrics(spec, predictions, labels)
    if spec.is_extractive_qa:  # answers are decoded with the features' offsets and contexts
        raise qa_needs_features(spec)
    if spec.regression:
        scores, gold_scores = _as_scores(spec, predictions, labels)
        return {name: _METRICS[name](spec, scores, gold_scores) for name in spec.metrics}
    _check_class_outputs(spec, predictions)
    preds, gold = _as_ids(predictions, labels)
    _check_predicted_ids(spec, predictions, preds)
    bad = gold[(gold < 0) | (gold >= spec.num_labels)]
    if bad.size:
        raise TaskError(
            f"task {spec.name!r}: label {int(bad[0])} is outside 0..{spec.num_labels - 1}; pass label ids, "
            "not raw labels."
        )
    return {name: _METRICS[name](spec, preds, gold) for name in spec.metrics}


# the kinds with one label per example (span and generation tasks score other things)
LABEL_KINDS = ("single", "pair", "multiple_choice")


def constant_metric_reason(spec: TaskSpec, metric: str, labels) -> str | None:
    """Why `metric` on a dev split of these gold `labels` has one value, or none, whatever the model predicts (a
    correlation with fewer than 2 or constant scores; binary F1 without the positive class; Matthews correlation of
    one class), else None: such a metric cannot tell checkpoints apart, so a run selecting on it is refused."""
    if spec.kind not in LABEL_KINDS:
        return None
    gold = np.asarray(labels, dtype=np.float64).reshape(-1)
    if spec.regression and metric in ("spearman", "pearson"):
        if gold.size < 2:
            return f"it has {gold.size} example(s), and a correlation needs 2 or more"
        if np.all(gold == gold[0]):
            return f"all {gold.size} of its gold scores are {gold[0]:g}, and a correlation with a constant is NaN"
        return None
    if metric == "f1" and not np.any(gold == spec.positive_label):
        name = spec.label_names[spec.positive_label]
        return f"it has no example of the positive label {name!r}, so binary F1 is 0 whatever the model predicts"
    if metric == "matthews_correlation" and gold.size and np.all(gold == gold[0]):
        name = spec.label_names[int(gold[0])]
        return f"all its examples have the label {name!r}, so Matthews correlation is 0 whatever the model predicts"
    return None


TOP_PREDICTION_SHARE = "top_prediction_share"
CONSTANT_PREDICTOR_SHARE = 1.0  # every dev prediction the same id: the run learnt nothing input-dependent


def dev_metrics(task: str | TaskSpec, predictions, labels) -> dict[str, float]:
    """What training and evaluation record on a dev set: the task's metrics plus `top_prediction_share`, so a run
    that collapsed to a constant predictor is visible next to its accuracy."""
    spec = resolve_task(task)
    share = top_tag_share(predictions, labels) if spec.is_token_classification else top_prediction_share(predictions)
    return {**compute_metrics(spec, predictions, labels), TOP_PREDICTION_SHARE: share}


def collapse_warning(metrics: dict[str, float], num_examples: int | None = None) -> str | None:
    """A warning when the metrics say every dev prediction was the same class, else None."""
    share = metrics.get(TOP_PREDICTION_SHARE)
    if share is None or share < CONSTANT_PREDICTOR_SHARE:
        return None
    where = f" on all {num_examples} dev examples" if num_examples else ""
    return (
        f"constant predictor: the model predicts the same class{where}, so its accuracy is the share of that "
        "class and says nothing about the task; train longer, check the learning rate and the head's pooling "
        "(docs/fidelity.md)"
    )
