"""The task registry: look tasks up by name, and let users add their own from code or a JSON/YAML file.

Built-in tasks are registered on import; a user task registered under an existing name needs overwrite=True
so that a typo cannot silently replace "rte".
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from adapterfusion.io.documents import read_document
from adapterfusion.io.paths import check_readable_file
from adapterfusion.tasks.builtin import BUILTIN_TASKS
from adapterfusion.tasks.errors import TaskError
from adapterfusion.tasks.spec import TaskSpec, suggest

__all__ = ["TaskSpec", "get_task", "list_tasks", "register_task", "task_from_dict", "load_task_file", "resolve_task"]

_REGISTRY: dict[str, TaskSpec] = {}


def register_task(spec: TaskSpec, overwrite: bool = False) -> TaskSpec:
    """Add `spec` under `spec.name`; refuses to replace an existing task unless overwrite=True."""
    if not isinstance(spec, TaskSpec):
        raise TaskError(f"register_task expects a TaskSpec, got {type(spec).__name__}; use task_from_dict first.")
    if not isinstance(overwrite, bool):  # overwrite="no" is true: it replaced a registered task
        raise TaskError(f"overwrite={overwrite!r} must be True or False (replace a task registered under that name).")
    if spec.name in _REGISTRY and not overwrite:
        raise TaskError(
            f"task {spec.name!r} is already registered; pass overwrite=True to replace it, or choose another name."
        )
    _REGISTRY[spec.name] = spec
    return spec


def get_task(name: str) -> TaskSpec:
    """The registered spec called `name`; a typo gets the list of known tasks and the closest match."""
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        known = list_tasks()
        hint = _not_a_name(name, known) or suggest(str(name), known)
        raise TaskError(f"unknown task {name!r}.{hint} Known tasks: {', '.join(known)}.") from None


def _not_a_name(name: Any, known: list[str]) -> str:
    """A hint for what was passed where a task's name belongs: a description (file), not a name, or a name in
    other case ('RTE'; names are case-sensitive, and the spelling hint compares them as they are)."""
    same = [task for task in known if isinstance(name, str) and task.casefold() == name.casefold()]
    if same:
        return f" Task names are case-sensitive: did you mean {same[0]!r}?"
    if isinstance(name, Mapping):
        return " A task description (a mapping) is read with task_from_dict(...), which returns the TaskSpec to pass."
    if isinstance(name, (str, os.PathLike)) and Path(name).suffix.lower() in (".json", ".yaml", ".yml"):
        return (
            " A task description file is read with load_task_file(path), which registers the task under its name "
            "and returns the TaskSpec to pass."
        )
    return ""


def list_tasks() -> list[str]:
    """Names of all registered tasks, sorted."""
    return sorted(_REGISTRY)


def resolve_task(task: str | TaskSpec) -> TaskSpec:
    """Accept either a registered name or a spec, so every API takes both."""
    return task if isinstance(task, TaskSpec) else get_task(task)


def task_from_dict(data: Mapping[str, Any], base_dir: str | Path | None = None) -> TaskSpec:
    """Build a spec from a dict; relative `data_files` paths are resolved against `base_dir`."""
    if base_dir is not None and not isinstance(base_dir, (str, os.PathLike)):  # was a TypeError from pathlib
        raise TaskError(
            f"base_dir={base_dir!r} must be a folder path (a str or Path): relative data_files are resolved against it."
        )
    spec = TaskSpec.from_dict(data)
    if base_dir is None or not spec.data_files:
        return spec
    base = Path(base_dir)
    # '~/data/train.csv' means the home folder, as in a shell (it was read as a folder named '~' beside the file)
    homed = [(role, Path(path).expanduser()) for role, path in spec.data_files]
    files = {role: str(path if path.is_absolute() else base / path) for role, path in homed}
    return TaskSpec.from_dict({**spec.to_dict(), "data_files": files})


def load_task_file(path: str | Path, register: bool = True, overwrite: bool = False) -> TaskSpec:
    """Read a task description (.json, or .yaml/.yml when pyyaml is installed) and optionally register it.

    Relative data file paths inside it are taken relative to the description file, so a task folder can move.
    """
    path = Path(path)
    if not os.path.lexists(path):
        raise TaskError(f"task description file {str(path)!r} does not exist.")
    check_readable_file(
        path, "give the path of a task description (.json or .yaml)", "task description file", TaskError
    )
    if path.suffix.lower() not in (".json", ".yaml", ".yml"):
        raise TaskError(f"task description file {str(path)!r} must end in .json, .yaml or .yml.")
    data = read_document(path, TaskError)  # UTF-8 only; a key given twice is an error, not silently the last
    try:
        spec = task_from_dict(data, base_dir=path.parent)
    except TaskError as err:
        raise TaskError(f"{path}: {err}") from err
    return register_task(spec, overwrite=overwrite) if register else spec


for _spec in BUILTIN_TASKS:
    register_task(_spec)
