"""Read a task's texts and choices out of a column batch (dict of lists), as `Dataset.map(batched=True)` gives.

Checking and encoding both go through these helpers, so the layout a spec describes is interpreted in one place.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from adapterfusion.tasks.spec import TaskSpec

Batch = Mapping[str, Sequence[Any]]


def top_level(path: str) -> str:
    """The dataset column a (possibly dotted) field path lives in: "choices.text" -> "choices"."""
    return path.split(".", 1)[0]


def required_columns(spec: TaskSpec) -> list[str]:
    """Columns a split must have for `spec`, in a stable order without repeats."""
    paths = [*spec.text_fields, *spec.choice_fields, spec.label_field]
    return list(dict.fromkeys(top_level(p) for p in paths))


def field_values(batch: Batch, path: str) -> list[Any]:
    """One value per row for a dotted path; None where a nested key is absent."""
    head, *rest = path.split(".")
    values = list(batch[head])
    for key in rest:
        values = [v.get(key) if isinstance(v, Mapping) else None for v in values]
    return values


def text_columns(batch: Batch, spec: TaskSpec) -> list[list[Any]]:
    """The spec's text fields, one list per field (single/pair inputs, or the pieces of an MC context)."""
    return [field_values(batch, f) for f in spec.text_fields]


def contexts(batch: Batch, spec: TaskSpec) -> list[str]:
    """Multiple-choice contexts: the context fields of each row joined with a space."""
    return [" ".join(parts) for parts in zip(*text_columns(batch, spec), strict=True)]


def choice_lists(batch: Batch, spec: TaskSpec) -> list[Any]:
    """Each row's choices as a list (or whatever a malformed row holds, for the checker to report)."""
    if len(spec.choice_fields) == 1:
        return field_values(batch, spec.choice_fields[0])
    return [list(row) for row in zip(*(field_values(batch, f) for f in spec.choice_fields), strict=True)]
