"""Jobs whose inputs changed on disk since they ran, though their settings did not: a fusion trained on store adapters
that were replaced since (another experiment re-trained the zoo or store it fuses from), a job whose local data files
were edited, or whose encoder folder holds other weights or another tokenizer now (an edited vocabulary, special
tokens or chat template gives other tokens from the same data). Their config hash is unchanged, so the results store
keeps them done; the runner re-runs them (and the done jobs that depend on them), as `evaluate`, `prune` and `serve`
refuse such a fusion (training/rebuild.py check_fused_adapters). An interrupted one starts over rather than resume
checkpoints trained on the old inputs.

Each check compares what the run's config.json recorded with the files now. What a run did not record (runs of an
older version, a Hub encoder) or what is gone (an output dir copied to another machine, whose zoo, data and encoder
live elsewhere) cannot be judged and counts as unchanged: a run saved before runs recorded their tokenizer files
("tokenizer_files") stays fresh whatever its tokenizer holds now. File digests are remembered per process
(file_digests.py), so 36 jobs on one encoder read its weights once. `settings_changed` says the same, job by job, of
the done jobs an edited experiment file sent back to the queue (--force)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from adapterfusion.encoder_identity import weight_file_digests
from adapterfusion.errors import AdapterFusionError
from adapterfusion.experiments.plan import Job
from adapterfusion.file_digests import first_changed
from adapterfusion.run_layout import CONFIG_FILE
from adapterfusion.serialization.pieces import piece_digest
from adapterfusion.training.tokenizer_files import tokenizer_file_digests

RAN = ("done", "running", "failed")  # states of a job whose run folder is its current settings' (blocked, queued: not)


def stale_jobs(jobs: Sequence[Job], states: Mapping[str, str], output_dir: Path) -> dict[str, str]:
    """Why each job must run afresh (id -> reason), in plan order: the jobs that ran (done, or interrupted or failed:
    then not resumed) and whose run recorded inputs that changed since, and every done job that depends on one. A
    blocked or queued job's folder may hold a run of older settings: what it recorded is not this job's."""
    digests: dict[Path, str | None] = {}
    why = {
        job.id: change
        for job in jobs
        if states.get(job.id) in RAN and (change := changed_since_run(job.run_dir(output_dir), digests)) is not None
    }
    again = dict(why)
    for job in jobs:  # topologically ordered: a dependency is decided before its dependents
        needed = next((dependency for dependency in job.depends_on if dependency in again), None)
        if job.id not in again and needed is not None:
            again[job.id] = f"it needs {needed}, which runs again"
    kept = [job.id for job in jobs if job.id in why or (job.id in again and states.get(job.id) == "done")]
    return {job_id: again[job_id] for job_id in kept}


def settings_changed(jobs: Sequence[Job], reset: set[str], states: Mapping[str, str]) -> dict[str, str]:
    """Why each done job that binding an edited spec (--force) sent back to the queue runs again (id -> reason), in
    plan order: its own settings changed, or those of a job it needs (a job's settings include its dependencies')."""
    why: dict[str, str] = {}
    for job in jobs:  # topologically ordered: a dependency is decided before its dependents
        if job.id not in reset or states.get(job.id) != "done":
            continue
        needed = next((dependency for dependency in job.depends_on if dependency in reset), None)
        why[job.id] = "its settings changed" if needed is None else f"it needs {needed}, whose settings changed"
    return why


def changed_since_run(run_dir: Path, digests: dict[Path, str | None] | None = None) -> str | None:
    """What changed since the run in `run_dir` recorded its inputs (None: nothing, or nothing that can be judged).
    `digests`: store adapters' digests already taken, shared between calls."""
    digests = {} if digests is None else digests
    try:
        config = json.loads((run_dir / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    return (
        _fused_changed(config, digests)
        or _data_changed(config)
        or _encoder_changed(config)
        or _tokenizer_changed(config)
    )


def _fused_changed(config: Mapping[str, Any], digests: dict[Path, str | None]) -> str | None:
    """A store adapter the run recorded fusing that now holds other files."""
    fused = config.get("fused_adapters")
    if not isinstance(fused, dict):
        return None
    for name, record in fused.items():
        if not isinstance(record, dict) or not isinstance(record.get("entry"), str):
            continue
        adapter = Path(record["entry"]) / "adapter"
        if adapter not in digests:
            digests[adapter] = _piece_digest(adapter)
        if digests[adapter] is not None and digests[adapter] != record.get("sha256"):
            return f"the store adapter {name!r} it fused ({record['entry']}) was replaced since it ran"
    return None


def _piece_digest(adapter: Path) -> str | None:
    if not adapter.is_dir():
        return None
    try:
        return piece_digest(adapter)
    except (AdapterFusionError, OSError):
        return None


def _data_changed(config: Mapping[str, Any]) -> str | None:
    """A local data file the run read that now holds other bytes."""
    recorded = config.get("data_files")
    changed = first_changed(recorded) if isinstance(recorded, dict) else None
    return f"its data file {changed[0]} changed since it ran" if changed is not None else None


def _encoder_changed(config: Mapping[str, Any]) -> str | None:
    """The run's local encoder folder holding other weight files now (a folder without any counts as gone)."""
    found = _recorded_folder_now(config, "encoder_files", weight_file_digests)
    if found is None:
        return None
    folder, then, now = found
    if now and now != then:
        return f"other weights were saved at its encoder {folder} since it ran"
    return None


def _tokenizer_changed(config: Mapping[str, Any]) -> str | None:
    """The run's local encoder folder holding other tokenizer files now: one edited, added or removed (a folder
    without any counts as gone). A run saved before runs recorded them has no "tokenizer_files": not judged."""
    found = _recorded_folder_now(config, "tokenizer_files", tokenizer_file_digests)
    if found is None:
        return None
    folder, then, now = found
    if not now or not isinstance(then, dict) or now == then:
        return None
    changed = sorted(name for name in then.keys() | now.keys() if then.get(name) != now.get(name))
    return f"the tokenizer files of its encoder {folder} changed since it ran ({', '.join(changed)})"


def _recorded_folder_now(
    config: Mapping[str, Any], key: str, digests: Callable[[Path], dict[str, str]]
) -> tuple[Path, Any, dict[str, str]] | None:
    """(folder, its digests as the run recorded them under `key`, its `digests` now) of the encoder folder the run's
    `key` record names ({"folder": ..., "sha256": ...}); None where it recorded none, or the folder cannot be read."""
    recorded = config.get(key)
    if not isinstance(recorded, dict) or not isinstance(recorded.get("folder"), str):
        return None
    folder = Path(recorded["folder"])
    try:
        return folder, recorded.get("sha256"), digests(folder)
    except OSError:
        return None
