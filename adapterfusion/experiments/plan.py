"""The job graph of an experiment: one job per (setup variant, task, seed), stage-1 adapter jobs before the fusion
jobs that fuse them, in a stable topological order.

Job ids read `<variant>/<task>/seed-<seed>` (e.g. `st-a-rf16/rte/seed-1`). Each variant's runs go to
`<output_dir>/runs/<variant>/...` and each stage-1 variant has its own AdapterStore `<output_dir>/adapters/<variant>`,
so st-a with rf 2 and rf 16 never overwrite each other's stored adapters.

A multi-task variant (mt-a) is one job per seed on all its tasks, `mt-a/all/seed-<seed>` of kind "multitask"
(train_multitask instead of train); the fusion-mt-a jobs of that seed depend on it and run on the encoder it saved.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapterfusion.defaults import default_encoder_path
from adapterfusion.errors import ZooError
from adapterfusion.experiments.analyses import SPAN_ABLATION, ablation_variant
from adapterfusion.experiments.errors import ExperimentSpecError
from adapterfusion.experiments.spec import ExperimentSpec, SetupVariant
from adapterfusion.io.paths import path_part
from adapterfusion.run_layout import seed_folder
from adapterfusion.tasks.spec import GENERATION
from adapterfusion.training.resume import without_free_settings
from adapterfusion.training.run import run_dir_for
from adapterfusion.training.store import resolve_zoo, zoo_seed

RUNS_DIR = "runs"
ADAPTERS_DIR = "adapters"
SINGLE_KIND = "single"  # training.train: one task
MULTITASK_KIND = "multitask"  # training.train_multitask: all the variant's tasks in one run
ALL_TASKS = "all"  # the task part of a multi-task job's id
MULTITASK_ENCODER_DIR = "encoder"  # where train_multitask saves the encoder it fine-tuned, inside its run dir


@dataclass(frozen=True)
class Job:
    """One training run. `options` are the setup options passed to train() (a fusion's `sources` included), or for
    kind "multitask" the keyword arguments of train_multitask (`tasks` included); `store_variant` names the
    AdapterStore it writes (stage 1) or reads (fusion); `encoder_run`, relative to the output dir, is the encoder
    it runs on instead of the experiment's (fusion-mt-a: the MT-A run's fine-tuned encoder)."""

    id: str
    variant: str
    setup: str
    task: str
    seed: int
    options: dict[str, Any] = field(default_factory=dict)
    training: dict[str, Any] = field(default_factory=dict)
    depends_on: tuple[str, ...] = ()
    store_variant: str | None = None
    kind: str = SINGLE_KIND
    encoder_run: str | None = None

    def config_hash(
        self,
        spec: ExperimentSpec,
        dependencies: Mapping[str, str] | None = None,
        absolute_paths: bool = False,
        task_specs: bool = True,
        free_settings: bool = False,
    ) -> str:
        """Digest of everything that decides this job's result, the config hashes of the jobs it depends on
        included (`dependencies`: id -> hash, see config_hashes), so a fusion whose adapters are re-trained with
        other settings is re-run too; a job whose hash changed is re-run. Without `dependencies`: the hash older
        runners recorded, which named the dependencies by id only (ResultsStore.bind upgrades such records). Paths
        count as the experiment file writes them (ExperimentSpec.recorded_dict), so a clone elsewhere keeps its
        results; absolute_paths: the hash older runners recorded, of the absolute paths. The description of a task of
        the experiment's own (task_files: its data files, labels, template) counts too, so editing it re-runs its
        jobs; task_specs=False: the hash runners recorded before it did. Settings that change how a run is logged
        or kept, not its result (training/resume.py FREE_ON_RESUME), do not count; free_settings=True: the hash
        runners recorded while they did."""
        paths = spec.to_dict() if absolute_paths else spec.recorded_dict()
        data = {
            "setup": self.setup,
            "task": self.task,
            "seed": self.seed,
            "options": self.options,
            "training": self.training if free_settings else without_free_settings(self.training),
            "depends_on": self.depends_on,
            "encoder": paths["encoder"],
            "data_dir": paths["data_dir"],
            "max_examples": spec.max_examples,
        }
        if self.depends_on and dependencies is not None:  # jobs without dependencies keep their hashes
            missing = [d for d in self.depends_on if d not in dependencies]
            if missing:
                raise ExperimentSpecError(f"job {self.id}: no config hash given for its dependencies {missing}")
            data["depends_on"] = {d: dependencies[d] for d in self.depends_on}
        if self.kind != SINGLE_KIND or self.encoder_run is not None:  # only then: older jobs keep their hashes
            data.update(kind=self.kind, encoder_run=self.encoder_run)
        own = paths.get("task_specs") or {}
        tasks = self.options.get("tasks", [self.task]) if self.kind == MULTITASK_KIND else [self.task]
        described = {task: own[task] for task in tasks if task in own}
        if task_specs and described:  # only then: jobs on built-in tasks keep their hashes
            data["task_specs"] = described
        return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode("utf-8")).hexdigest()[:16]

    def variant_dir(self, output_dir: str | Path) -> Path:
        """The output_dir passed to train() for this job (the runner deletes run dirs in it, so it must stay inside)."""
        return Path(output_dir) / RUNS_DIR / path_part(self.variant, "setup variant id")

    def run_dir(self, output_dir: str | Path) -> Path:
        """Where train() (or train_multitask, which names its run dir after the setup) writes this job's run."""
        task = self.setup if self.kind == MULTITASK_KIND else self.task
        return run_dir_for(self.variant_dir(output_dir), task, self.setup, self.seed)

    def store_dir(self, output_dir: str | Path) -> Path | None:
        if self.store_variant is None:
            return None
        return Path(output_dir) / ADAPTERS_DIR / path_part(self.store_variant, "setup variant id")

    def encoder_dir(self, output_dir: str | Path) -> Path | None:
        return None if self.encoder_run is None else Path(output_dir) / self.encoder_run


def train_options(spec: ExperimentSpec, job: Job) -> dict[str, Any]:
    """The setup options a job's run is given: its own, less the `pooling` the spec spelled out for its variant
    (encoder_checks.resolve_poolings) where the job's task is a generation task. That task has no head of ours to
    pool for (the language model's own head predicts each answer token), and train() refuses a pooling there; a
    variant's pooling is its heads' on the variant's other tasks. The job keeps it in its options, and so in its
    config hash: a generation run recorded before keeps its hash and is not re-run."""
    options = dict(job.options)
    if job.kind == SINGLE_KIND and spec.task_specs.get(job.task, {}).get("kind") == GENERATION:
        options.pop("pooling", None)
    return options


def job_id(variant: str, task: str, seed: int) -> str:
    return f"{variant}/{task}/{seed_folder(seed)}"


def _job(spec: ExperimentSpec, variant: SetupVariant, task: str, seed: int) -> Job:
    training = spec.job_training(variant, task)
    if variant.is_multitask:
        options = {**variant.options, "tasks": [t for t in spec.tasks if variant.runs_on(t)]}
        return Job(
            job_id(variant.id, ALL_TASKS, seed),
            variant.id,
            variant.setup,
            ALL_TASKS,
            seed,
            options,
            training,
            store_variant=variant.id,
            kind=MULTITASK_KIND,
        )
    if not variant.is_fusion:
        return Job(
            job_id(variant.id, task, seed),
            variant.id,
            variant.setup,
            task,
            seed,
            dict(variant.options),
            training,
            store_variant=variant.id if variant.is_stage1 else None,
        )
    assert variant.adapter_variant is not None  # load_spec gives every fusion variant the variant it fuses
    adapter = spec.variant(variant.adapter_variant)
    sources = spec.fusion[task]
    if not set(sources) - {task}:
        raise ExperimentSpecError(
            f"fusion.{task}: the {variant.id} run of {task!r} would fuse its own adapter alone (a fusion of one "
            f"adapter is ST-A with a trained value matrix); list source tasks in fusion.{task} (or more tasks), or "
            f"leave {task!r} out of the {variant.id} entry's tasks"
        )
    zoo = variant.options.get("zoo")
    if zoo is not None:  # every source but the target from the zoo; the target's own adapter from this experiment
        _check_zoo_sources(spec, [s for s in sources if s != task], zoo, f"fusion.{task}")
    from_experiment = [task] if zoo is not None else list(sources)
    missing = [s for s in from_experiment if s not in spec.tasks or not adapter.runs_on(s)]
    if missing:
        them = "it" if len(missing) == 1 else "them"
        raise ExperimentSpecError(
            f"fusion.{task}: the fusion of {task!r} fuses {missing}, but the experiment trains no {adapter.id} adapter "
            f"for {them}; add {missing} to tasks (and to the {adapter.id} entry's tasks, if it has any), "
            f"or drop {them} "
            f"from fusion.{task}"
            + (
                f" (its own adapter is always fused: to skip {task!r}, leave it out of the {variant.id} entry's tasks)"
                if task in missing
                else ""
            )
        )
    if adapter.is_multitask:  # the MT-A run of this seed: its adapters, on the encoder it fine-tuned
        multitask = _job(spec, adapter, ALL_TASKS, seed)
        encoder_run = (multitask.run_dir(Path()) / MULTITASK_ENCODER_DIR).as_posix()
        return Job(
            job_id(variant.id, task, seed),
            variant.id,
            variant.setup,
            task,
            seed,
            {**variant.options, "sources": list(sources), "adapter_seed": seed},
            training,
            depends_on=(multitask.id,),
            store_variant=adapter.id,
            encoder_run=encoder_run,
        )
    options = {**variant.options, "sources": list(sources), "adapter_setup": adapter.setup, "adapter_seed": seed}
    return Job(
        job_id(variant.id, task, seed),
        variant.id,
        variant.setup,
        task,
        seed,
        options,
        training,
        depends_on=tuple(job_id(adapter.id, s, seed) for s in from_experiment),
        store_variant=adapter.id,
    )


def _check_zoo_sources(spec: ExperimentSpec, sources: list[str], zoo: str, path: str) -> None:
    """Each zoo source must have exactly one adapter in the zoo for the experiment's encoder."""
    encoder = spec.encoder if spec.encoder is not None else str(default_encoder_path())
    try:
        store = resolve_zoo(zoo)
        for source in sources:
            zoo_seed(store, encoder, source)
    except ZooError as err:
        raise ExperimentSpecError(f"{path}: {err}") from None


def plan_jobs(spec: ExperimentSpec) -> list[Job]:
    """Every job of the experiment in a topological order: seed by seed, stage-1 variants first, fusions last,
    the other setups between, tasks in the experiment's order; a multi-task variant is one job per seed."""
    rank = {v.id: (0 if v.is_stage1 else 2 if v.is_fusion else 1) for v in spec.variants}
    variants = sorted(spec.variants, key=lambda v: rank[v.id])
    jobs = [
        _job(spec, variant, task, seed)
        for seed in spec.seeds
        for variant in variants
        for task in _job_tasks(spec, variant)
    ]
    return topological_order(jobs + _ablation_jobs(spec))


def _ablation_jobs(spec: ExperimentSpec) -> list[Job]:
    """One job per adapter a span-ablation analysis evaluates (experiments/analyses.py, span_ablation.py): after
    the job that trained it, with that run's folder (relative to the output dir) in its options; a zoo's adapter
    is one job per task, under the seed it was stored with."""
    jobs = []
    for analysis in spec.analyses:
        if analysis["kind"] != SPAN_ABLATION:
            continue
        variant = ablation_variant(analysis)
        options = {k: v for k, v in analysis.items() if k not in ("kind", "tasks", "variant")}
        if "zoo" in analysis:
            limit = spec.max_examples.get("validation") if isinstance(spec.max_examples, dict) else spec.max_examples
            if limit is not None and "max_examples" not in options:  # the experiment's, as its runs' dev sets
                options["max_examples"] = limit
            encoder = spec.encoder if spec.encoder is not None else str(default_encoder_path())
            try:
                store = resolve_zoo(analysis["zoo"])
                seeds = {task: zoo_seed(store, encoder, task) for task in analysis["tasks"]}
            except ZooError as err:
                raise ExperimentSpecError(f"analyses ({variant}): {err}") from None
            jobs += [
                Job(job_id(variant, task, seed), variant, SPAN_ABLATION, task, seed, options, kind=SPAN_ABLATION)
                for task, seed in seeds.items()
            ]
            continue
        adapter = spec.variant(analysis["variant"])
        for seed in spec.seeds:
            for task in analysis["tasks"]:
                trained = _job(spec, adapter, task, seed)
                source = {"variant": adapter.id, "source_run": trained.run_dir(Path()).as_posix()}
                jobs.append(
                    Job(
                        job_id(variant, task, seed),
                        variant,
                        SPAN_ABLATION,
                        task,
                        seed,
                        {**options, **source},
                        depends_on=(trained.id,),
                        kind=SPAN_ABLATION,
                    )
                )
    return jobs


def jobs_per_variant(jobs: list[Job]) -> dict[str, int]:
    """Variant id -> its number of jobs, in plan order: what `adapterfusion plan` shows before anything runs."""
    counts: dict[str, int] = {}
    for job in jobs:
        counts[job.variant] = counts.get(job.variant, 0) + 1
    return counts


def config_hashes(
    spec: ExperimentSpec,
    jobs: list[Job],
    absolute_paths: bool = False,
    task_specs: bool = True,
    free_settings: bool = False,
) -> dict[str, str]:
    """Job id -> config hash, each job's folding in its dependencies' (and so, through theirs, every job it
    needs, transitively)."""
    hashes: dict[str, str] = {}
    for job in topological_order(jobs):
        hashes[job.id] = job.config_hash(spec, hashes, absolute_paths, task_specs, free_settings)
    return hashes


def _job_tasks(spec: ExperimentSpec, variant: SetupVariant) -> list[str]:
    """The task part of each of the variant's job ids in one seed."""
    return [ALL_TASKS] if variant.is_multitask else [t for t in spec.tasks if variant.runs_on(t)]


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
