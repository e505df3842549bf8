"""Where a trained piece came from, for a saved setup's index and its model card: the task, dev metrics, training
config, data and origin (commit, device) of a `train()` run folder, of an AdapterStore entry, or, for the shipped
zoo's adapters, of adapterfusion/zoo/manifest.json. Local paths are left out: a card is public."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from adapterfusion._validation import short_repr
from adapterfusion.defaults import MANIFEST_FILE, STORE_DIR, ZOO_DIR, zoo_manifest
from adapterfusion.errors import ConfigError, ZooError
from adapterfusion.io.documents import read_json
from adapterfusion.run_layout import CONFIG_FILE, ENTRY_FILE, METRICS_FILE, SEED_PREFIX

RUN_FILES = (CONFIG_FILE, METRICS_FILE)  # what training/api.py's train() writes into a run folder
_TIMINGS = ("runtime", "samples_per_second", "steps_per_second")  # the Trainer's, in a run's dev metrics


def describe_origin(source: str | os.PathLike | Mapping[str, Any]) -> dict[str, Any]:
    """Provenance from a run folder, a store entry, a piece folder inside either (run_dir/adapter), or a mapping
    given as is (e.g. {"task": "rte", "dev_metrics": {"accuracy": 0.71}})."""
    if isinstance(source, Mapping):
        try:  # it goes into the index and the card as it is
            json.dumps(source)
        except (TypeError, ValueError) as error:
            raise ConfigError(f"provenance {short_repr(source)} must hold JSON values only ({error})") from None
        return dict(source)
    if not isinstance(source, (str, os.PathLike)) or not str(source):
        raise ConfigError(
            f"provenance {short_repr(source)} is neither a folder (a run folder or store entry) nor a dict"
        )
    folder = Path(source)
    for candidate in (folder, folder.parent):
        if all((candidate / name).is_file() for name in RUN_FILES):
            return _from_run(candidate)
        if (candidate / ENTRY_FILE).is_file():
            return _from_store_entry(candidate)
    raise ConfigError(
        f"provenance {str(source)!r} is neither a train() run folder (config.json + metrics.json) nor an AdapterStore "
        "entry (entry.json), nor a piece folder inside one; pass one of those or a dict"
    )


def _from_run(run_dir: Path) -> dict[str, Any]:
    config, metrics = (_object(run_dir / name) for name in RUN_FILES)
    best = _mapping(metrics.get("best"))
    return _provenance(
        config,
        dev_metrics={k: v for k, v in best.items() if k not in _TIMINGS},
        metric_for_best=metrics.get("metric_for_best"),
        origin=(
            f"adapterfusion train() run {config.get('task')}/{config.get('setup')}/{SEED_PREFIX}{config.get('seed')}"
        ),
    )


def _from_store_entry(entry_dir: Path) -> dict[str, Any]:
    entry = _object(entry_dir / ENTRY_FILE)
    if entry_dir.resolve().is_relative_to(ZOO_DIR / STORE_DIR):
        manifest, record = _zoo_record(entry.get("task"))
        return _provenance(
            record,
            task=entry.get("task"),
            dev_metrics=record.get("dev"),
            origin=f"adapterfusion shipped zoo {manifest.get('name')!r} (made {manifest.get('made')})",
        )
    run_dir = Path(str(entry.get("source", "")))
    if entry.get("source") and all((run_dir / name).is_file() for name in RUN_FILES):
        return _from_run(run_dir)
    return _provenance(entry, origin="adapterfusion AdapterStore entry")


def _zoo_record(task: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The shipped zoo's manifest and its record of `task` ({} where it has none); ZooError naming the file where
    the manifest is not the shape scripts/package_zoo.py writes (a list, no `tasks` object, a task's record no
    object), which read as a KeyError, AttributeError or TypeError."""
    manifest = zoo_manifest()
    tasks = manifest.get("tasks") if isinstance(manifest, dict) else None
    record = tasks.get(task, {}) if isinstance(tasks, dict) and isinstance(task, str) else {}
    wrong = None
    if not isinstance(manifest, dict):
        wrong = "is no JSON object"
    elif not isinstance(tasks, dict):
        wrong = "has no 'tasks' object"
    elif not isinstance(record, dict):
        wrong = f"records task {task!r} as {short_repr(record)}, not an object"
    if wrong is not None:
        raise ZooError(
            f"{ZOO_DIR / MANIFEST_FILE} {wrong}, so the provenance of the shipped zoo's adapters cannot be read: this "
            "install's adapter zoo is damaged; reinstall adapterfusion (or run scripts/package_zoo.py)"
        )
    return manifest, record


def _provenance(record: Mapping[str, Any], **overrides: Any) -> dict[str, Any]:
    """The public fields of a run config or zoo manifest record; missing values are left out."""
    hardware = _mapping(record.get("hardware"))
    fields = {
        key: record.get(key)
        for key in ("task", "setup", "setup_options", "seed", "training", "git_sha", "library_version")
    }
    fields.update(data=_data_summary(record.get("data")), device=hardware.get("device"), **overrides)
    return {key: value for key, value in fields.items() if value not in (None, {}, [])}


def _data_summary(data: Any) -> dict[str, Any] | None:
    """Source, seed, carve-out and rows per split of a run's data info (its local file paths left out)."""
    if not isinstance(data, Mapping):
        return None
    splits = _mapping(data.get("splits"))
    summary = {
        "source": data.get("source"),
        "seed": data.get("seed"),
        "carve_out": data.get("carve_out"),
        "rows": {name: split.get("num_rows") for name, split in splits.items() if isinstance(split, Mapping)},
    }
    return {key: value for key, value in summary.items() if value not in (None, {})}


def _mapping(value: Any) -> Mapping[str, Any]:
    """`value` if it is a mapping, else an empty one: a missing or malformed section reads as empty."""
    return value if isinstance(value, Mapping) else {}


def _object(path: Path) -> dict[str, Any]:
    document = read_json(path)
    if not isinstance(document, dict):
        raise ConfigError(f"{path} is not a JSON object; it is not a file that adapterfusion wrote")
    return document
