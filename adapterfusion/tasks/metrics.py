"""Task metrics in plain numpy: accuracy, binary F1, Matthews correlation, and Pearson/Spearman for regression
tasks (STS-B) and score-valued analyses.

Undefined values: Matthews correlation is 0 when predictions or labels hold one class (sklearn's and GLUE's
convention: no better than chance); binary F1 is 0 when the positive class is neither predicted nor present; a
correlation with a constant input, or with a predicted score that is not finite, is NaN (it has no value), which
reports show as "undefined" rather than as a number. Everything else that cannot be scored (ragged rows, text or
bool ids, NaN logits, ids or labels outside the task's labels, -100/-1 labels of unlabelled examples, gold scores
that are NaN or -100, or all -1: the marks of unlabelled examples, where a single -1 is a real score) is a TaskError
naming it: metric_inputs.py checks what the metrics are handed.

`compute_metrics` accepts predicted ids or logits ([n, num_labels], arg-maxed), so it plugs into a training loop
or the HF Trainer's EvalPrediction unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np

from adapterfusion.heads.token_classification import IGNORE_INDEX
from adapterfusion.tasks.errors import TaskError
from adapterfusion.tasks.metric_inputs import (
    HIDDEN_SCORE,
    IGNORE_SCORE,
    as_array,
    gold_ids,
    predicted_ids,
    real_values,
    token_rows,
)
from adapterfusion.tasks.registry import resolve_task
from adapterfusion.tasks.spec import TaskSpec
from adapterfusion.tasks.squad import qa_needs_features
from adapterfusion.tasks.tagging import tagging_metrics, top_tag_share


def _as_ids(predictions, labels, spec: TaskSpec | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Predicted ids (logits are arg-maxed over the last axis) and labels, both 1-D, checked (metric_inputs.py) and
    of equal length; given the task, within its labels too."""
    preds, gold = predicted_ids(spec, predictions), gold_ids(spec, labels)
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


def _pair(x, y, name: str) -> tuple[np.ndarray, np.ndarray]:
    x, y = real_values(x, f"{name}'s first input").ravel(), real_values(y, f"{name}'s second input").ravel()
    if x.shape != y.shape or x.size < 2:
        raise TaskError(f"{name} needs two equal-length inputs of 2+ values, got {x.size} and {y.size}.")
    return x, y


def _unit_scale(values: np.ndarray) -> np.ndarray:
    """`values` divided by their largest magnitude: the correlation is the same, and squares of 1e200 no longer
    overflow to inf (which turned a correlation into 0.0)."""
    top = np.abs(values).max()
    return values / top if top else values


def pearson(x, y) -> float:
    """Pearson correlation; nan when either input is constant or holds a value that is not finite (no numpy
    warning: the value is undefined, and reports show it as such)."""
    x, y = _pair(x, y, "pearson")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        return float("nan")
    x, y = _unit_scale(x), _unit_scale(y)
    xc, yc = _unit_scale(x - x.mean()), _unit_scale(y - y.mean())
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
    x, y = _pair(x, y, "spearman")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
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
    classification head's: refused, naming both. A gold score that is not finite is no score: refused; a predicted
    one makes the correlations NaN (undefined), as a constant one does."""
    preds = real_values(predictions, "the predictions")
    if preds.ndim == 2 and preds.shape[1] == 1:
        preds = preds[:, 0]
    if preds.ndim != 1:
        raise TaskError(
            f"task {spec.name!r} is a regression task (one score per example), but the predictions have shape "
            f"{list(preds.shape)}, a classification head's logits; give it af.RegressionHead()."
        )
    gold = real_values(labels, "the labels")
    gold = gold[:, 0] if gold.ndim == 2 and gold.shape[1] == 1 else gold
    if gold.ndim != 1:
        raise TaskError(f"labels of shape {list(gold.shape)}; a regression task's labels are one score per example.")
    if preds.shape != gold.shape:
        raise TaskError(f"{preds.shape[0]} predictions but {gold.shape[0]} labels; they must match one to one.")
    if gold.size == 0:
        raise TaskError("no predictions to score; the evaluation split is empty.")
    missing = np.flatnonzero(~np.isfinite(gold))
    if missing.size:
        raise TaskError(
            f"task {spec.name!r}: gold score {gold[missing[0]]} of example {missing[0]} is not a number "
            f"({missing.size} such); score only examples with a gold score."
        )
    marked = np.flatnonzero(gold == IGNORE_SCORE)
    if marked.size or (gold.size and np.all(gold == HIDDEN_SCORE)):  # the rule of loading (tasks/checks.py)
        first = marked[0] if marked.size else 0
        what = "the ignore index" if marked.size else "as every gold score here: GLUE's hidden test scores"
        raise TaskError(
            f"task {spec.name!r}: gold score {gold[first]:g} of example {first} ({marked.size or gold.size} such) "
            f"marks an example without a gold score ({what}), which a regression task never reads as a score; "
            "score only examples with a gold score."
        )
    return preds, gold


def top_prediction_share(predictions) -> float:
    """Share of the predictions that go to the most often predicted id (class, or choice position for multiple
    choice; a regression head's score): 1.0 means a constant predictor, whatever its accuracy happens to be."""
    preds = as_array(predictions, "the predictions")
    preds = (preds.argmax(axis=-1) if preds.ndim == 2 and preds.shape[1] > 1 else preds).reshape(-1)
    if preds.size == 0:
        raise TaskError("no predictions to summarise; the evaluation split is empty.")
    return float(np.unique(preds, return_counts=True)[1].max() / preds.size)


def _tag_ids(spec: TaskSpec, predictions, labels) -> tuple[np.ndarray, np.ndarray]:
    """A tagging task's predicted and gold tag ids [sentences, tokens], padded alike (sentences given as lists may
    be of their own lengths) and checked as class ids are, at the tokens that carry a label."""
    predictions, labels = token_rows(predictions, labels)
    gold = gold_ids(spec, labels, per_token=True)
    if np.asarray(predictions).shape[:2] != gold.shape:
        raise TaskError(
            f"tagging predictions of shape {list(np.shape(predictions))} and labels of shape {list(gold.shape)}: "
            "expected [sentences, tokens(, tags)] and [sentences, tokens], padded alike."
        )
    scored = gold != IGNORE_INDEX
    if gold.size and not scored.any():
        raise TaskError(
            f"task {spec.name!r}: all {gold.size} tagging labels are {IGNORE_INDEX} (not scored), so no word has a tag "
            "to score; give each word's first token its tag id (encode_task does), -100 only elsewhere."
        )
    return predicted_ids(spec, predictions, per_token=True, scored=scored), gold


def compute_metrics(task: str | TaskSpec, predictions, labels) -> dict[str, float]:
    """The task's metrics (e.g. {"accuracy": .., "f1": ..} for MRPC), from predicted ids or logits; a regression
    task's from predicted scores."""
    spec = resolve_task(task)
    if spec.is_token_classification:  # one tag per word, at each word's first token (tasks/tagging.py)
        return tagging_metrics(spec, *_tag_ids(spec, predictions, labels))
    if spec.is_extractive_qa:  # answers are decoded with the features' offsets and contexts
        raise qa_needs_features(spec)
    if spec.is_generation:  # no head of its own: the language model's answer tokens are what is scored
        raise TaskError(
            f"task {spec.name!r} generates its answers: it has no labels to compare predicted ids with; score it with "
            "adapterfusion.answer_scoring.score_generation(model, batches, task, tokenizer) (answer loss, perplexity, "
            "token accuracy, exact match)."
        )
    if spec.regression:
        scores, gold_scores = _as_scores(spec, predictions, labels)
        return {name: _METRICS[name](spec, scores, gold_scores) for name in spec.metrics}
    preds, gold = _as_ids(predictions, labels, spec)
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


def undefined_metric_notes(spec: TaskSpec, metrics: Mapping[str, float], predictions, labels) -> dict[str, str]:
    """Why each of `metrics` that is NaN has no value (constant gold scores, or predicted scores that are constant or
    not finite: a correlation is undefined), so that a report gives the reason next to the NaN."""
    notes = {}
    for name, value in metrics.items():
        if isinstance(value, float) and math.isnan(value):
            notes[name] = constant_metric_reason(spec, name, labels) or _predicted_scores_reason(predictions)
    return notes


def _predicted_scores_reason(predictions) -> str:
    scores = real_values(predictions, "the predictions").reshape(-1)
    wrong = int((~np.isfinite(scores)).sum())
    if wrong:
        return (
            f"{wrong} of the {scores.size} predicted scores are not finite (NaN or inf): the model's weights or "
            "inputs hold NaN or inf, or bf16 overflowed (evaluate in float32)"
        )
    if scores.size and np.all(scores == scores[0]):
        return (
            f"the model predicts {scores[0]:g} for all {scores.size} examples, and a correlation with a constant is NaN"
        )
    return "the metric has no value on these predictions"


TOP_PREDICTION_SHARE = "top_prediction_share"
CONSTANT_PREDICTOR_SHARE = 1.0  # every dev prediction the same id: the run learnt nothing input-dependent


def dev_metrics(task: str | TaskSpec, predictions, labels) -> dict[str, float]:
    """What training and evaluation record on a dev set: the task's metrics plus `top_prediction_share`, so a run
    that collapsed to a constant predictor is visible next to its accuracy."""
    spec = resolve_task(task)
    if spec.is_token_classification:  # checked once, for both
        tags, gold = _tag_ids(spec, predictions, labels)
        share = top_tag_share(tags, gold)
        return {**tagging_metrics(spec, tags, gold), TOP_PREDICTION_SHARE: share}
    share = top_prediction_share(predictions)
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
