"""The job graph of an experiment: one job per (setup variant, task, seed), stage-1 adapter jobs before the fusion
jobs that fuse them, in a stable topological order.

Job ids read `<variant>/<task>/seed-<seed>` (e.g. `st-a-rf16/rte/seed-1`). Each variant's runs go to
`<output_dir>/runs/<variant>/...` and each stage-1 variant has its own AdapterStore `<output_dir>/adapters/<variant>`,
so st-a with rf 2 and rf 16 never overwrite each other's stored adapters.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapterfusion.experiments.errors import ExperimentSpecError
from adapterfusion.experiments.spec import ExperimentSpec, SetupVariant
from adapterfusion.training.api import run_dir_for

RUNS_DIR = "runs"
ADAPTERS_DIR = "adapters"


@dataclass(frozen=True)
class Job:
    """One training run. `options` are the setup options passed to train() (a fusion's `sources` included);
    `store_variant` names the AdapterStore it writes (stage 1) or reads (fusion)."""

    id: str
    variant: str
    setup: str
    task: str
    seed: int
    options: dict[str, Any] = field(default_factory=dict)
    training: dict[str, Any] = field(default_factory=dict)
    depends_on: tuple[str, ...] = ()
    store_variant: str | None = None

    def config_hash(self, spec: ExperimentSpec) -> str:
        """Digest of everything that decides this job's result; a job whose hash changed is re-run."""
        data = {"setup": self.setup, "task": self.task, "seed": self.seed, "options": self.options,
                "training": self.training, "depends_on": self.depends_on, "encoder": spec.encoder,
                "data_dir": spec.data_dir, "max_examples": spec.max_examples}
        return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode("utf-8")).hexdigest()[:16]

    def variant_dir(self, output_dir: str | Path) -> Path:
        """The output_dir passed to train() for this job."""
        return Path(output_dir) / RUNS_DIR / self.variant

    def run_dir(self, output_dir: str | Path) -> Path:
        return run_dir_for(self.variant_dir(output_dir), self.task, self.setup, self.seed)

    def store_dir(self, output_dir: str | Path) -> Path | None:
        return None if self.store_variant is None else Path(output_dir) / ADAPTERS_DIR / self.store_variant


def job_id(variant: str, task: str, seed: int) -> str:
    return f"{variant}/{task}/seed-{seed}"


def _job(spec: ExperimentSpec, variant: SetupVariant, task: str, seed: int) -> Job:
    training = spec.job_training(variant, task)
    if not variant.is_fusion:
        return Job(job_id(variant.id, task, seed), variant.id, variant.setup, task, seed, dict(variant.options),
                   training, store_variant=variant.id if variant.is_stage1 else None)
    adapter = spec.variant(variant.adapter_variant)
    sources = spec.fusion[task]
    missing = [s for s in sources if s not in spec.tasks or not adapter.runs_on(s)]
    if missing:
        them = "it" if len(missing) == 1 else "them"
        raise ExperimentSpecError(
            f"fusion.{task}: the fusion of {task!r} fuses {missing}, but the experiment trains no {adapter.id} adapter "
            f"for {them}; add {missing} to tasks (and to the {adapter.id} entry's tasks, if it has any), or drop {them} "
            f"from fusion.{task}")
    options = {**variant.options, "sources": list(sources), "adapter_setup": adapter.setup, "adapter_seed": seed}
    return Job(job_id(variant.id, task, seed), variant.id, variant.setup, task, seed, options, training,
               depends_on=tuple(job_id(adapter.id, s, seed) for s in sources), store_variant=adapter.id)


def plan_jobs(spec: ExperimentSpec) -> list[Job]:
    """Every job of the experiment in a topological order: seed by seed, stage-1 variants first, fusions last,
    the other setups between, tasks in the experiment's order.

    Hook for MT-A (training.multitask.train_multitask, not yet planned; spec.NOT_YET_PLANNED rejects it): one job
    per seed on all tasks at once, id `mt-a/all/seed-<s>`, storing each task's adapter as setup "mt-a"; the
    fusion-mt-a jobs of that seed depend on it and run on its encoder (`<run>/encoder`). It needs a `kind` field on
    Job so executors call train_multitask instead of train."""
    rank = {v.id: (0 if v.is_stage1 else 2 if v.is_fusion else 1) for v in spec.variants}
    variants = sorted(spec.variants, key=lambda v: rank[v.id])
    jobs = [_job(spec, variant, task, seed) for seed in spec.seeds for variant in variants for task in spec.tasks
            if variant.runs_on(task)]
    return topological_order(jobs)


def topological_order(jobs: list[Job]) -> list[Job]:
    """A topological order as close to the given one as the dependencies allow (the given order itself when it is
    one); a dependency on a job not in the list, or a cycle, is an error."""
    by_id = {job.id: job for job in jobs}
    for job in jobs:
        unknown = [d for d in job.depends_on if d not in by_id]
        if unknown:
            raise ExperimentSpecError(f"job {job.id} depends on {unknown}, which the experiment does not plan")
    done: set[str] = set()
    ordered: list[Job] = []
    remaining = list(jobs)
    while remaining:
        emitted = []
        for job in remaining:
            if all(d in done for d in job.depends_on):
                ordered.append(job)
                done.add(job.id)
                emitted.append(job.id)
        if not emitted:
            raise ExperimentSpecError(f"the jobs {[j.id for j in remaining]} depend on each other in a cycle")
        remaining = [job for job in remaining if job.id not in done]
    return ordered

def dependents(jobs: list[Job], job_id_: str) -> list[str]:
    """Ids of every job that needs `job_id_`, directly or through others."""
    out: list[str] = []
    frontier = {job_id_}
    while frontier:
        nxt = {j.id for j in jobs if frontier & set(j.depends_on) and j.id not in out}
        out.extend(sorted(nxt))
        frontier = nxt
    return out
