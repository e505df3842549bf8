"""The checks every part of an experiment file's reading shares (the file's top-level keys, its setup entries, a
runner's record of it): each raises ExperimentSpecError naming the key path of the bad value and what it may be.

A module of its own so that spec.py, variants.py, record.py and the modules of single keys use one wording.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from adapterfusion._validation import is_finite_number, short_repr
from adapterfusion.errors import ConfigError
from adapterfusion.experiments.errors import ExperimentSpecError
from adapterfusion.io.paths import user_path
from adapterfusion.tasks.registry import list_tasks
from adapterfusion.tasks.spec import suggest
from adapterfusion.training.config import TrainingConfig
from adapterfusion.training.setups import list_setups

# Per-run settings the experiment owns: the seed comes from `seeds`, the fusion's sources from `fusion`, and the
# fused adapters' seed is the fusion run's own seed (so each seed is an independent replicate of both stages).
OWNED = {"seed": "seeds", "sources": "fusion", "adapter_seed": "seeds", "zoo": "zoo"}
# The TrainingConfig fields an experiment file may set (`training`, a setup entry, `task_training`).
TRAINING_FIELDS = tuple(f.name for f in dataclasses.fields(TrainingConfig) if f.name != "seed")


def fail(path: str, message: str) -> ExperimentSpecError:
    """The error for the value at key path `path` ('' for the whole file)."""
    return ExperimentSpecError(f"{path}: {message}" if path else message)


def reject_unknown(data: Mapping[str, Any], allowed: Sequence[str], path: str) -> None:
    for key in data:
        if key not in allowed:
            where = f"{path}.{key}" if path else str(key)
            hint = f" ({key!r} is set by {OWNED[key]!r})" if key in OWNED else suggest(str(key), list(allowed))
            raise fail(where, f"unknown key.{hint} Allowed keys: {', '.join(allowed)}")


def task_name(value: Any, path: str) -> str:
    known = list_tasks()
    if value not in known:
        raise fail(path, f"unknown task {value!r}.{suggest(str(value), known)} Known tasks: {', '.join(known)}")
    return value


def experiment_task(value: Any, tasks: Sequence[str], path: str) -> None:
    """`value` must be one of the experiment's `tasks` (a setup entry's tasks, a fusion target, a task_training key)."""
    if value not in tasks:
        raise fail(
            path,
            f"{value!r} is not one of the experiment's tasks ({', '.join(tasks)}).{suggest(str(value), list(tasks))}",
        )


def setup_name(value: Any, path: str) -> Any:
    """`value` must name a registered setup (training/setups.py)."""
    setups = list_setups()
    if value not in setups:
        raise fail(path, f"unknown setup {value!r}.{suggest(str(value), setups)} Known setups: {', '.join(setups)}")
    return value


def string_list(value: Any, path: str) -> list[Any]:
    if isinstance(value, str) or not isinstance(value, Sequence) or not value:
        raise fail(path, f"must be a non-empty list, got {value!r}")
    return list(value)


def no_duplicates(values: Sequence[Any], path: str, folders: bool = False) -> None:
    """Refuse a value given twice; with `folders` (the values name folders) also two that differ only in case."""
    for i, value in enumerate(values):
        if value in values[:i]:
            raise fail(f"{path}[{i}]", f"duplicate {value!r} (also at {path}[{values.index(value)}])")
        twin = case_twin(value, values[:i]) if folders else None
        if twin is not None:
            raise fail(f"{path}[{i}]", case_clash(value, values[twin], f"{path}[{twin}]"))


def case_twin(value: Any, earlier: Sequence[Any]) -> int | None:
    """The index of a name in `earlier` that differs from `value` only in case: tasks and setup variants name
    folders (runs/<variant>/<task>, <data_dir>/<task>), which are one folder on a case-insensitive file system
    (macOS, Windows), so their runs would overwrite each other there."""
    if not isinstance(value, str):
        return None
    folded = value.casefold()
    return next((j for j, other in enumerate(earlier) if isinstance(other, str) and other.casefold() == folded), None)


def first_repeat(values: Sequence[str]) -> tuple[int, int] | None:
    """(k, j) of the first value that repeats an earlier one, values[j], exactly or only in case (case_twin's
    rule), in one pass: a sweep's variants may number thousands, and comparing each with all before it took minutes."""
    exact: dict[str, int] = {}
    folded: dict[str, int] = {}
    for k, value in enumerate(values):
        j = exact.get(value, folded.get(value.casefold()))
        if j is not None:
            return k, j
        exact[value] = k
        folded.setdefault(value.casefold(), k)
    return None


def case_clash(value: str, other: str, where: str) -> str:
    return (
        f"{value!r} differs from {other!r} ({where}) only in case, and they name one folder on a case-insensitive "
        "file system (macOS, Windows), where their runs would overwrite each other; rename one of them"
    )


def resolve_path(value: Any, path: str, base_dir: Path) -> str | None:
    """`value` (relative to the experiment file's folder) as an absolute path; refused with a line break, tab or other
    control character in it, which no path a user means holds: YAML's block scalars (`|`, `>`) keep a final newline,
    and the runner made a folder 'results\\n' beside the one meant."""
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise fail(path, f"must be a path (a string), got {value!r}")
    if any(ord(char) < 32 or ord(char) == 127 for char in value):
        raise fail(
            path,
            f"{value!r} holds a line break, tab or other control character; write the path as a plain value on the "
            "key's line (a YAML block scalar, | or >, keeps its final line break)",
        )
    return str(absolute_path(user_path(value), base_dir))


def absolute_path(path: Path, base_dir: Path) -> Path:
    """`path` relative to the experiment file's folder, made absolute without following symbolic links: a clone
    whose ../shared is a link records the same relative paths (and spec hash) as one where it is a folder."""
    return path if path.is_absolute() else Path(os.path.normpath(base_dir / path))


def number_as_text(value: Any) -> str:
    """'' unless `value` is a number written as text, then why and how to write it: YAML (1.1, as PyYAML reads it)
    takes 1e-4 or 3e5, without a '.' and a signed exponent, as the text '1e-4', and a refusal that says 'must be a
    number' of what looks like one leaves the user guessing."""
    if not isinstance(value, str):
        return ""
    try:
        float(value)
    except ValueError:
        return ""
    if not re.fullmatch(r"\s*[-+]?[\d_.]+[eE][-+]?\d+\s*", value):
        return f"; {value!r} is text, not a number: write it without quotes"
    return (
        f"; {value!r} is text, not a number: YAML reads a number such as 1e-4 as text unless it has a '.' and a "
        "signed exponent, so write 1.0e-4 (3.0e+5 for 3e5), without quotes"
    )


def positive_number(value: Any, path: str) -> float | int:
    if not is_finite_number(value) or value <= 0:
        raise fail(
            path,
            f"must be a positive number (the paper uses 2, 16 or 64), got {short_repr(value)}{number_as_text(value)}",
        )
    return value


def checked_training(overrides: Mapping[str, Any], setup: str, path: str) -> dict[str, Any]:
    """Check each TrainingConfig override on its own (so the error names its key), then all together."""
    for key, value in overrides.items():
        try:
            TrainingConfig.for_setup(setup, **{key: value})
        except (ConfigError, TypeError) as err:
            raise fail(f"{path}.{key}" if path else key, f"{err}{number_as_text(value)}") from None
    try:
        TrainingConfig.for_setup(setup, **overrides)
    except (ConfigError, TypeError) as err:
        raise fail(path or "training", str(err)) from None
    return dict(overrides)
