"""The reader of a runner's record, `<output_dir>/experiment.json`, read as an experiment file so that `adapterfusion
run <output_dir>/experiment.json` repeats or resumes the experiment it records (spec.py parses both forms).

The record (ExperimentSpec.recorded_dict, plus `spec_hash` and `source`: the experiment file's path relative to the
record's folder) holds the resolved `variants` and `task_specs` in place of `setups`, `training` and `task_files`,
and its paths are relative to the folder of the file named by `source` (a record without one holds absolute paths).
Each variant is checked as the setup entry that gives exactly it would be; `spec_hash` is only checked to be a
digest, as an output dir refuses a different experiment itself (store.py).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from adapterfusion.experiments.spec_checks import (
    absolute_path,
    fail,
    no_duplicates,
    reject_unknown,
    setup_name,
    string_list,
)
from adapterfusion.experiments.sweep import SELECT_KEY, SWEEP_KEY
from adapterfusion.experiments.task_settings import register_user_task
from adapterfusion.experiments.variants import Entry, SetupVariant, setup_entries
from adapterfusion.io.paths import user_path
from adapterfusion.tasks.errors import TaskError
from adapterfusion.tasks.spec import TaskSpec

_VARIANT_KEYS = ("id", "setup", "options", "training", "adapter_variant", "tasks", "sweep")  # SetupVariant.to_dict
_MISSING = object()


def is_record(data: Any) -> bool:
    """Whether `data` is a runner's record of an experiment (its resolved `variants`), not an experiment file."""
    return isinstance(data, Mapping) and "variants" in data


def check_record(data: Mapping[str, Any], record_dir: Path) -> tuple[Path, str | None]:
    """A record's own keys checked (no `setups` beside its `variants`, the form of `spec_hash`), and the folder its
    relative paths start from, with the experiment file it records: `source`, relative to the record's folder. A
    record of an experiment given as a mapping has no source, and absolute paths."""
    if "setups" in data:
        raise fail(
            "setups",
            "given beside 'variants': an experiment file lists setups, a runner's record (experiment.json) the "
            "variants they resolved to; keep one of them",
        )
    digest = data.get("spec_hash")  # its form only: the output dir's store refuses a different experiment
    if digest is not None and not (isinstance(digest, str) and re.fullmatch(r"[0-9a-f]{16}", digest)):
        raise fail("spec_hash", f"must be the 16 hex digits the runner records, got {digest!r}; or leave it out")
    source = data.get("source")
    if source is None:
        return record_dir, None
    if not isinstance(source, str) or not source:
        raise fail(
            "source",
            "must be the path of the experiment file this record was run from, relative to the record's folder (as "
            f"the runner writes it), or null; got {source!r}",
        )
    original = absolute_path(user_path(source), record_dir)
    return original.parent, str(original)


def recorded_tasks(value: Any, base_dir: Path) -> dict[str, dict[str, Any]]:
    """A record's `task_specs` (name -> TaskSpec dict, data files relative to the experiment file), registered as
    their task_files were."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise fail("task_specs", f"must map a task name to its task description, got {value!r}")
    out: dict[str, dict[str, Any]] = {}
    for name, raw in value.items():
        try:
            if not isinstance(raw, Mapping):
                raise TaskError(f"must be a task description (a mapping), got {raw!r}")
            files = raw.get("data_files")
            if isinstance(files, Mapping):  # made absolute as the task file's own paths were, without links followed
                files = {
                    role: str(absolute_path(Path(f), base_dir)) if isinstance(f, str) else f
                    for role, f in files.items()
                }
                raw = {**raw, "data_files": files}
            task = TaskSpec.from_dict(raw)
            if task.name != name:
                raise TaskError(f"describes a task named {task.name!r}; a task is listed under its own name")
            task = register_user_task(task)
        except TaskError as err:
            raise fail(f"task_specs.{name}", str(err)) from None
        out[task.name] = task.to_dict()
    return out


def recorded_entries(raw: Any, tasks: tuple[str, ...]) -> list[Entry]:
    """A record's `variants`, each checked as the setup entry that gives exactly it (its id, options and merged
    training), then given the `sweep` and `adapter_variant` it records, which are checked against the others."""
    given: list[Mapping[str, Any]] = []
    entries: list[dict[str, Any]] = []
    for i, variant in enumerate(string_list(raw, "variants")):
        path = f"variants[{i}]"
        if not isinstance(variant, Mapping):
            raise fail(path, f"must be a setup variant as the runner records it ({', '.join(_VARIANT_KEYS)})")
        reject_unknown(variant, _VARIANT_KEYS, path)
        for key in ("id", "setup"):
            if key not in variant:
                raise fail(f"{path}.{key}", "missing")
        setup_name(variant["setup"], f"{path}.setup")
        parts = {key: variant.get(key) or {} for key in ("options", "training")}
        for key, part in parts.items():
            if not isinstance(part, Mapping):
                raise fail(f"{path}.{key}", f"must be a mapping, got {part!r}")
        # The zoo is the experiment's (top-level `zoo`), written into each fusion-st-a variant as it is read.
        options = {k: v for k, v in parts["options"].items() if k != "zoo"}
        entry = {"name": variant["setup"], "id": variant["id"], **options, **parts["training"]}
        if variant.get("tasks") is not None:
            entry["tasks"] = variant["tasks"]
        given.append(variant)
        entries.append(entry)
    out = setup_entries(entries, {}, tasks, key="variants")
    stage1 = {v.id: v for _, v, _ in out if v.is_stage1}
    for k, ((i, variant, entry), recorded) in enumerate(zip(out, given, strict=True)):
        path = f"variants[{i}]"
        adapter_variant = recorded.get("adapter_variant")
        if variant.is_fusion:
            fused = stage1.get(adapter_variant) if isinstance(adapter_variant, str) else None
            if fused is None or fused.setup != variant.fused_setup:
                choices = [v.id for v in stage1.values() if v.setup == variant.fused_setup]
                raise fail(
                    f"{path}.adapter_variant",
                    f"{adapter_variant!r} is not a {variant.fused_setup} variant of this record; choose one of "
                    f"{choices}",
                )
        elif adapter_variant is not None:
            raise fail(f"{path}.adapter_variant", f"only a fusion variant fuses adapters; {variant.id} is none")
        sweep = _recorded_sweep(recorded.get("sweep"), variant, path)
        out[k] = (i, dataclasses.replace(variant, adapter_variant=adapter_variant, sweep=sweep), entry)
    return out


def _recorded_sweep(value: Any, variant: SetupVariant, path: str) -> dict[str, Any] | None:
    """A recorded variant's `sweep` ({"group", "settings"}), whose settings must be the variant's own values."""
    if value is None:
        return None
    path = f"{path}.{SWEEP_KEY}"
    if variant.is_fusion or variant.is_multitask:
        raise fail(path, f"{variant.setup} variants are not swept")
    if (
        not isinstance(value, Mapping)
        or set(value) != {"group", "settings"}
        or not isinstance(value["group"], str)
        or not isinstance(value["settings"], Mapping)
        or not value["settings"]
    ):
        raise fail(path, f"must be {{group: <its sweep>, settings: {{<swept key>: <value>}}}}, got {value!r}")
    own = {**variant.options, **variant.training}
    for key, setting in value["settings"].items():
        if own.get(key, _MISSING) != setting:
            raise fail(f"{path}.settings.{key}", f"{setting!r}, but the variant's {key} is {own.get(key)!r}")
    return {"group": value["group"], "settings": dict(value["settings"])}


def recorded_select(value: Any) -> Any:
    """A record's `select` (a list of rows, {name, sweep, ...}, in the file's order) as the file's mapping."""
    if value is None or isinstance(value, Mapping):  # a mapping, as the file has it, is taken as it is
        return value
    rows = string_list(value, SELECT_KEY)
    if not all(isinstance(row, Mapping) and isinstance(row.get("name"), str) for row in rows):
        raise fail(SELECT_KEY, f"must be a list of rows {{name: <row>, sweep: <sweep>, ...}}, got {value!r}")
    no_duplicates([row["name"] for row in rows], SELECT_KEY)
    return {row["name"]: {k: v for k, v in row.items() if k != "name"} for row in rows}
