"""What the metrics are handed, as checked numpy arrays: a model's outputs (class or tag ids, logits, or a regression
head's scores) and the gold labels, given as numpy arrays, lists, torch tensors (bfloat16 too) or lists of them.

Each is asked, in one order, so that a bad one gets the message that names its real problem: its shape (one id or
one row of logits per example, or per token), its dtype (numbers: not bool, text or Python objects), whether it is
finite (NaN outputs are refused: argmax would read NaN as the first class), whether ids are whole numbers, and
whether they lie within the task's labels. Tag rows of their own lengths (one list per sentence) are padded alike,
the labels with IGNORE_INDEX, so per-sentence lists need no padding by hand.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from adapterfusion.heads.token_classification import IGNORE_INDEX
from adapterfusion.tasks.errors import TaskError, refuse_nan_outputs
from adapterfusion.tasks.spec import TaskSpec

UNLABELLED_IDS = (-1, IGNORE_INDEX)  # GLUE's hidden test labels, and tokens (or examples) the loss skips
# A regression task's marks of no score: the ignore index always; -1 only where every score is -1 (GLUE's hidden test
# scores), since -1 is a real score on a scale such as [-1, 1].
IGNORE_SCORE, HIDDEN_SCORE = float(IGNORE_INDEX), -1.0


def _plain(values: Any) -> Any:
    """Torch tensors (and lists holding them) as numpy arrays; numpy has no bfloat16, so half floats become float32."""
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu()
        return (values.float() if values.is_floating_point() else values).numpy()
    if isinstance(values, (list, tuple)) and any(isinstance(v, (torch.Tensor, list, tuple)) for v in values):
        return [_plain(v) for v in values]
    return values


def _shape(values: Any, where: str) -> tuple[int, ...]:
    """The shape of nested rows; a TaskError naming the first row whose shape differs from the first one's."""
    if isinstance(values, np.ndarray) and values.dtype != object:
        return values.shape
    if isinstance(values, (str, bytes)) or not isinstance(values, (Sequence, np.ndarray)):
        return ()
    inner = [_shape(v, f"{where}[{i}]") for i, v in enumerate(values)]
    for i, shape in enumerate(inner):
        if shape != inner[0]:
            raise TaskError(
                f"row {where}[{i}] has shape {list(shape)} where row {where}[0] has {list(inner[0])}: rows of "
                "different lengths; pad them to one length (labels with -100) or pass one array"
            )
    return (len(inner), *(inner[0] if inner else ()))


def as_array(values: Any, what: str) -> np.ndarray:
    """`values` (`what`, e.g. "the predictions") as a numpy array of numbers; None, ragged rows, Python objects,
    text and bool refused, naming the problem."""
    if values is None:
        raise TaskError(
            f"{what}: None, not an array; pass the model's outputs and the gold labels as arrays (or lists)"
        )
    values = _plain(values)
    try:
        array = np.asarray(values)
    except ValueError:
        try:
            _shape(values, "")
        except TaskError as err:
            raise TaskError(f"{what}: {err}") from None
        raise TaskError(f"{what}: a {type(values).__name__} that is not an array of numbers") from None
    if array.dtype == np.bool_:
        raise TaskError(
            f"{what}: values of dtype bool are neither ids nor scores; pass numbers: ids as integers (e.g. "
            ".astype(int)), logits or scores"
        )
    if array.dtype.kind not in "iuf":
        found = next((v for v in array.reshape(-1) if not isinstance(v, (int, float, np.number))), None)
        shown = f" ({found!r}, of type {type(found).__name__})" if array.dtype == object else ""
        raise TaskError(
            f"{what}: values of dtype {array.dtype}{shown} are not numbers; pass ids (a label name's index in the "
            "task's label_names), logits or scores"
        )
    return array


def _rows(values: Any, what: str) -> list[np.ndarray]:
    return [as_array(row, f"{what}, sentence {i}") for i, row in enumerate(values)]


def token_rows(predictions: Any, labels: Any) -> tuple[np.ndarray, np.ndarray]:
    """Tag predictions (ids [sentences, tokens] or logits [..., tags]) and labels [sentences, tokens] as two arrays
    padded alike. Sentences given as lists may each have their own length (the labels are padded with
    IGNORE_INDEX, which is never scored), but each sentence's predictions and labels must be of one length."""
    rows = isinstance(predictions, (list, tuple)) or isinstance(labels, (list, tuple))
    if not rows or predictions is None or labels is None:
        return as_array(predictions, "tagging predictions"), as_array(labels, "tagging labels")
    preds, gold = _rows(_plain(predictions), "tagging predictions"), _rows(_plain(labels), "tagging labels")
    if len(preds) != len(gold):
        raise TaskError(f"{len(preds)} predicted sentences but {len(gold)} labelled ones; they must match.")
    for i, (p, g) in enumerate(zip(preds, gold, strict=True)):
        if p.ndim == 0 or g.ndim == 0:
            raise TaskError(
                f"sentence {i} is the single value {(p if p.ndim == 0 else g).item()!r}, not a list of tags: tagging "
                "is scored from one list (or row) of tag ids per sentence, [sentences, tokens]."
            )
        if g.ndim != 1 or p.ndim not in (1, 2) or len(p) != len(g):
            raise TaskError(
                f"sentence {i}: predictions of shape {list(p.shape)} for labels of shape {list(g.shape)}; give each "
                "sentence one predicted tag id (or one row of logits) per label."
            )
    widths = {p.shape[1:] for p in preds}
    if len(widths) > 1:
        raise TaskError(f"tagging predictions mix ids and logits of different widths {sorted(widths)}; pass one kind.")
    length = max((len(g) for g in gold), default=0)
    width = widths.pop() if widths else ()
    padded_preds = np.zeros((len(preds), length, *width), dtype=np.result_type(*preds) if preds else np.int64)
    padded_gold = np.full((len(gold), length), IGNORE_INDEX, dtype=np.result_type(*gold) if gold else np.int64)
    for i, (p, g) in enumerate(zip(preds, gold, strict=True)):
        padded_preds[i, : len(p)], padded_gold[i, : len(g)] = p, g
    return padded_preds, padded_gold


def _whole(values: np.ndarray) -> bool:
    return not np.issubdtype(values.dtype, np.floating) or bool((values % 1 == 0).all())


def predicted_ids(
    spec: TaskSpec | None, predictions: Any, per_token: bool = False, scored: np.ndarray | None = None
) -> np.ndarray:
    """Class (or, `per_token`, tag) ids from ids or logits (arg-maxed), asked in order: shape, dtype, finiteness,
    whole ids, and, given the task, the logits' width and the ids' range (at the `scored` positions only)."""
    what = "tagging predictions" if per_token else "predictions"
    outputs = as_array(predictions, f"the {what}")
    ids_ndim = 2 if per_token else 1
    unit = "tokens" if per_token else "examples"
    if outputs.ndim not in (ids_ndim, ids_ndim + 1):
        kind = "per-token outputs, a tagging or QA head's" if outputs.ndim > ids_ndim else "one value"
        raise TaskError(
            f"{what} of shape {list(outputs.shape)} ({kind}): expected ids [{unit}] or logits [{unit}, labels]"
            + ("" if per_token else "; score the outputs of a head built for the task")
        )
    width = outputs.shape[-1] if outputs.ndim == ids_ndim + 1 else None
    if width == 1:  # argmax of one column is 0 everywhere: every example scored as class 0
        raise TaskError(
            f"{what} of shape {list(outputs.shape)}: one output per {unit[:-1]}, a regression head's score, not "
            "class logits (argmax would read class 0 everywhere); pass ids or logits of 2+ classes."
        )
    if spec is not None and width is not None and width != spec.num_labels:
        raise TaskError(
            f"task {spec.name!r} has {spec.num_labels} labels {list(spec.label_names)}, but the predictions are "
            f"logits of {width} outputs per {unit[:-1]}; score the outputs of a head built for this task "
            f"({spec.num_labels} labels" + (")." if per_token else ", or choices per example for multiple choice).")
        )
    refuse_nan_outputs(outputs, "tagging" if per_token else "scoring")
    if width is None and not np.isfinite(outputs).all():
        raise TaskError(f"{what} hold infinite values, not ids; pass ids or logits.")
    ids = outputs.argmax(axis=-1) if width is not None else outputs
    if not _whole(ids):
        if spec is not None and not per_token:
            raise TaskError(
                f"task {spec.name!r} is a classification task ({spec.num_labels} labels), but the predictions are "
                "one real value per example, a regression head's; give it a classification head with "
                f"num_labels={spec.num_labels}."
            )
        ids_of = f"[sentences, {unit}]" if per_token else f"[{unit}]"
        raise TaskError(
            f"{what} of dtype {outputs.dtype} hold values that are not {'tag' if per_token else 'class'} ids; pass "
            f"ids {ids_of} or logits {ids_of[:-1]}, labels]."
        )
    ids = ids.astype(np.int64)
    if spec is not None:
        chosen = ids if scored is None else ids[scored]
        wrong = chosen[(chosen < 0) | (chosen >= spec.num_labels)]
        if wrong.size:
            raise TaskError(
                f"task {spec.name!r} has {spec.num_labels} labels {list(spec.label_names)}, but the predictions are "
                f"predicted id {int(wrong[0])}; score the outputs of a head built for this task (ids "
                f"0..{spec.num_labels - 1})."
            )
    return ids


def gold_ids(spec: TaskSpec | None, labels: Any, per_token: bool = False) -> np.ndarray:
    """Gold class ids [examples] ([examples, 1] too), or tag ids [sentences, tokens] with IGNORE_INDEX where nothing
    is scored: whole, finite numbers, and, given the task, within its labels."""
    gold = as_array(labels, "the tagging labels" if per_token else "the labels")
    if not per_token and gold.ndim == 2 and gold.shape[1] == 1:
        gold = gold[:, 0]
    if gold.ndim != (2 if per_token else 1):
        expected = "[sentences, tokens]" if per_token else "[examples]: one class id each"
        raise TaskError(f"labels of shape {list(gold.shape)}; expected {expected}.")
    if not (np.isfinite(gold).all() and _whole(gold)):
        first = float(gold[~np.isfinite(gold) | (gold % 1 != 0)].reshape(-1)[0])
        raise TaskError(
            f"label {first!r} is not a class id (a whole number); a classification label is the index of its class "
            "(a regression task's scores need a task with regression=True)."
        )
    gold = gold.astype(np.int64)
    if spec is None:
        return gold
    checked = gold[gold != IGNORE_INDEX] if per_token else gold
    bad = checked[(checked < 0) | (checked >= spec.num_labels)]
    if bad.size and per_token:
        raise TaskError(
            f"task {spec.name!r}: tag ids {sorted(set(bad.tolist()))[:5]} are outside 0..{spec.num_labels - 1}."
        )
    if bad.size:
        value = int(bad[0])
        why = (
            f"{value} marks an example without a gold label (-1: GLUE's hidden test labels, -100: ignored); score "
            "only labelled examples"
            if value in UNLABELLED_IDS
            else "pass label ids, not raw labels"
        )
        raise TaskError(f"task {spec.name!r}: label {value} is outside 0..{spec.num_labels - 1}; {why}.")
    return gold


def real_values(values: Any, what: str) -> np.ndarray:
    """A regression head's scores, or gold scores, as float64 (numbers only: text, bool and None refused)."""
    return as_array(values, what).astype(np.float64)
