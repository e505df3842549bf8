"""Check a raw split against its TaskSpec and convert its labels to ids.

Every problem is reported with the task, the file (or Hub split), the 0-based row and the fix, because a bad
row found here costs seconds while the same row found by a tokenizer mid-training costs a run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from adapterfusion.tasks import fields
from adapterfusion.tasks.errors import TaskError
from adapterfusion.tasks.spec import UNLABELLED_VALUES, TaskSpec, suggest
from adapterfusion.tasks.squad import check_qa_split
from adapterfusion.tasks.tagging import check_tagging_split

LABEL_COLUMN = "label"
_CHUNK = 10_000


@dataclass(frozen=True)
class CheckedSplit:
    """A checked split with integer labels in column "label"; `dataset` is None when the split had no labels."""

    dataset: Any
    dropped_unlabelled: int


def _where(spec: TaskSpec, origin: str) -> str:
    return f"task {spec.name!r}, {origin}"


def _check_columns(spec: TaskSpec, dataset, origin: str) -> None:
    present = list(dataset.column_names)
    missing = [c for c in fields.required_columns(spec) if c not in present]
    if missing:
        hints = "".join(suggest(m, present) for m in missing)
        raise TaskError(
            f"{_where(spec, origin)}: missing field(s) {missing}; the file has {present}.{hints} "
            "Fix the field names in the task description or the file."
        )


def _check_batch(spec: TaskSpec, batch, offset: int, origin: str) -> None:
    """Texts must be strings; MC rows need exactly num_choices string choices and, if used, the blank."""
    for name, column in zip(spec.text_fields, fields.text_columns(batch, spec), strict=True):
        for i, value in enumerate(column):
            if not isinstance(value, str):
                raise TaskError(
                    f"{_where(spec, origin)}, row {offset + i}: field {name!r} is {value!r}, not text; fill it in "
                    "or drop the row."
                )
    if not spec.is_multiple_choice:
        return
    for i, choices in enumerate(fields.choice_lists(batch, spec)):
        if not isinstance(choices, list) or len(choices) != spec.num_choices:
            count = len(choices) if isinstance(choices, list) else f"no list ({choices!r})"
            raise TaskError(
                f"{_where(spec, origin)}, row {offset + i}: expected {spec.num_choices} choices in "
                f"{list(spec.choice_fields)}, found {count}; fix the row or the task's num_choices/choice_fields."
            )
        if not all(isinstance(c, str) for c in choices):
            raise TaskError(f"{_where(spec, origin)}, row {offset + i}: choices {choices!r} must all be text.")
    if spec.blank is None:
        return
    for i, context in enumerate(fields.contexts(batch, spec)):
        if spec.blank not in context:
            raise TaskError(
                f"{_where(spec, origin)}, row {offset + i}: context has no blank {spec.blank!r} for the choices "
                "to fill; fix the row or the task's blank."
            )


def _label_key(raw: Any) -> str:
    """A label as the task's lookup spells it. Arrow reads a JSON column holding one non-integer number as floats
    throughout (1 becomes 1.0), so an integral float is the integer it was written as, and the row that is really
    wrong (1.5) is the one reported."""
    if isinstance(raw, float) and raw.is_integer():
        return str(int(raw))
    return str(raw)


def _check_answers(spec: TaskSpec, batch, offset: int, origin: str) -> list[int]:
    """A generation task's rows without an answer (None or empty); raises on an answer that is not text. Integers
    count as text (a CSV column of numbers is read as integers); the encoding writes them out."""
    unanswered = []
    for i, raw in enumerate(fields.field_values(batch, spec.label_field)):
        if raw is None or (isinstance(raw, str) and not raw.strip()):
            unanswered.append(offset + i)
        elif isinstance(raw, bool) or not isinstance(raw, (str, int)):
            raise TaskError(
                f"{_where(spec, origin)}, row {offset + i}: answer {raw!r} in field {spec.label_field!r} is not "
                "text; write it as a string."
            )
    return unanswered


def _check_labels(spec: TaskSpec, batch, offset: int, origin: str) -> list[int]:
    """Row indices without a gold label; raises on a label outside the task's label set."""
    if spec.is_generation:
        return _check_answers(spec, batch, offset, origin)
    lookup = spec.label_lookup()
    unlabelled = []
    for i, raw in enumerate(fields.field_values(batch, spec.label_field)):
        key = _label_key(raw)
        if raw is None or key in UNLABELLED_VALUES:
            unlabelled.append(offset + i)
        elif key not in lookup:
            allowed = list(lookup)
            raise TaskError(
                f"{_where(spec, origin)}, row {offset + i}: label {raw!r} in field {spec.label_field!r} is not one "
                f"of {allowed}.{suggest(key, allowed)} Fix the row or the task's label_values."
            )
    return unlabelled


def check_split(spec: TaskSpec, dataset, origin: str, role: str):
    """Validate every row and return a CheckedSplit whose "label" column holds label ids (a ClassLabel); a
    generation task's split keeps its prompt and answer fields as they are.

    A test split with no gold labels at all (hidden GLUE test labels, or no label column) comes back with
    dataset=None, so callers can leave it out instead of failing.
    """
    if len(dataset) == 0:
        raise TaskError(f"{_where(spec, origin)}: the split is empty; it must hold at least one example.")
    if role == "test" and fields.top_level(spec.label_field) not in dataset.column_names:
        return CheckedSplit(dataset=None, dropped_unlabelled=len(dataset))
    _check_columns(spec, dataset, origin)
    if spec.is_extractive_qa or spec.is_token_classification:  # their rows hold answers or tag lists
        checker = check_qa_split if spec.is_extractive_qa else check_tagging_split
        return CheckedSplit(*checker(spec, dataset, origin, role))
    columns = fields.required_columns(spec)
    unlabelled: list[int] = []
    offset = 0
    for batch in dataset.select_columns(columns).iter(batch_size=_CHUNK):
        unlabelled += _check_labels(spec, batch, offset, origin)
        _check_batch(spec, batch, offset, origin)
        offset += len(batch[columns[0]])
    if len(unlabelled) == len(dataset) and role == "test":
        return CheckedSplit(dataset=None, dropped_unlabelled=len(unlabelled))
    if unlabelled and not spec.drop_unlabelled:
        raise TaskError(
            f"{_where(spec, origin)}, row {unlabelled[0]}: no gold label ({len(unlabelled)} such rows in the "
            f"{role} split); remove them or set drop_unlabelled=True in the task description."
        )
    if unlabelled:
        keep = sorted(set(range(len(dataset))) - set(unlabelled))
        dataset = dataset.select(keep)
    if spec.is_generation:
        return CheckedSplit(dataset=dataset, dropped_unlabelled=len(unlabelled))
    return CheckedSplit(dataset=_with_label_ids(spec, dataset), dropped_unlabelled=len(unlabelled))


def _label_ids(batch, label_field: str, lookup: dict[str, int]) -> dict[str, list[int]]:
    return {LABEL_COLUMN: [lookup[_label_key(v)] for v in fields.field_values(batch, label_field)]}


def _with_label_ids(spec: TaskSpec, dataset):
    """Replace (or add) column "label" with ids, typed as a ClassLabel so label names travel with the data."""
    import datasets

    features = dataset.features.copy()
    features[LABEL_COLUMN] = datasets.ClassLabel(names=list(spec.label_names))
    return dataset.map(
        _label_ids,
        batched=True,
        fn_kwargs={"label_field": spec.label_field, "lookup": spec.label_lookup()},
        features=features,
        desc=f"{spec.name}: label ids",
    )
