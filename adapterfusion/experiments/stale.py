"""Finished jobs whose inputs changed on disk since they ran, though their settings did not: a fusion trained on
store adapters that were replaced since (another experiment re-trained the zoo or store it fuses from). Their config
hash is unchanged, so the results store keeps them done; the runner re-runs them (and the jobs that depend on them),
as `evaluate`, `prune` and `serve` refuse such a fusion (training/rebuild.py check_fused_adapters)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from adapterfusion.errors import AdapterFusionError
from adapterfusion.experiments.plan import Job
from adapterfusion.run_layout import CONFIG_FILE
from adapterfusion.serialization.pieces import piece_digest


def stale_jobs(jobs: Sequence[Job], states: Mapping[str, str], output_dir: Path) -> list[str]:
    """Ids of the done jobs whose fused adapters changed, and of every job depending on one, in plan order."""
    digests: dict[Path, str | None] = {}
    stale = {job.id for job in jobs if states.get(job.id) == "done" and _fused_changed(job, output_dir, digests)}
    for job in jobs:  # topologically ordered: a dependency is decided before its dependents
        if any(dependency in stale for dependency in job.depends_on):
            stale.add(job.id)
    return [job.id for job in jobs if job.id in stale and states.get(job.id) == "done"]


def _fused_changed(job: Job, output_dir: Path, digests: dict[Path, str | None]) -> bool:
    """Whether a store adapter the job's run recorded fusing now holds other files. An entry that is gone (an
    output dir copied to another machine, whose zoo lives elsewhere) cannot be judged and counts as unchanged."""
    try:
        config = json.loads((job.run_dir(output_dir) / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    fused = config.get("fused_adapters") if isinstance(config, dict) else None
    if not isinstance(fused, dict):
        return False
    for record in fused.values():
        if not isinstance(record, dict) or not isinstance(record.get("entry"), str):
            continue
        adapter = Path(record["entry"]) / "adapter"
        if adapter not in digests:
            digests[adapter] = _digest(adapter)
        if digests[adapter] is not None and digests[adapter] != record.get("sha256"):
            return True
    return False


def _digest(adapter: Path) -> str | None:
    if not adapter.is_dir():
        return None
    try:
        return piece_digest(adapter)
    except (AdapterFusionError, OSError):
        return None
