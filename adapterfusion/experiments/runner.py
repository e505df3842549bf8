"""`run_experiment`: plan the jobs of an experiment, skip the done ones, run the rest in dependency order on an
executor, and record every state change in the output dir's results store.

A job found `running` (its runner was killed) or `failed` is re-run: its run dir is emptied first, except for the
checkpoints of a single-task run, which continues from the newest one (train(resume=True)) unless the job's settings
changed, a job it depends on runs again, or an input its run recorded changed on disk since (experiments/stale.py).
A done job whose inputs changed on disk (store adapters it fused, its local data files, its encoder's weight files)
runs again with the done jobs that depend on it; the summary says why, job by job.
Before that, the runner waits for the killed runner's workers to end and removes the temp files its writers recorded
(experiments/writers.py), and nothing else.
A failed job does not stop independent jobs; the jobs that need it are marked `blocked` with the reason.
The progress display shows jobs done / running / left, each running job's epoch (from the progress.json its
training run rewrites, training/progress.py) and an ETA.
`hooks` run at the end with (spec, results store); then the report (tables and figures) is written to
`<output_dir>/report/` (experiments.report_files.write_report) unless report=False.
"""

from __future__ import annotations

import json
import os
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapterfusion.defaults import named_encoder
from adapterfusion.encoders import resolve_encoder
from adapterfusion.experiments.errors import ExperimentSpecError
from adapterfusion.experiments.executors import Executor, check_executor, check_runs_here, make_executor
from adapterfusion.experiments.jobs import JOB_LOG, JobPayload, check_data_folders, payload_options
from adapterfusion.experiments.paths import relative_to_experiment_file
from adapterfusion.experiments.plan import Job, plan_jobs, train_options
from adapterfusion.experiments.report_files import write_report
from adapterfusion.experiments.spec import ExperimentSpec, load_spec
from adapterfusion.experiments.stale import settings_changed, stale_jobs
from adapterfusion.experiments.store import DB_FILE, LOCK_FILE, ResultsStore, RunnerLock
from adapterfusion.experiments.writers import WRITERS_DIR, clear_dead_writers, registered_writer
from adapterfusion.io.atomic import atomic_write_json, is_temp_name
from adapterfusion.io.paths import check_writable_folder
from adapterfusion.training.errors import TrainingError
from adapterfusion.training.progress import read_progress
from adapterfusion.training.run import clear_run_dir

SPEC_FILE = "experiment.json"
POLL_SECONDS = 2.0  # how often the progress display re-reads the running jobs' epochs
Hook = Callable[[ExperimentSpec, ResultsStore], None]


@dataclass
class ExperimentSummary:
    """What one call of run_experiment did: `ran` this time, `skipped` (done before), `failed` and `blocked`
    (id -> error text / reason), `rerun` (id -> why a job that had finished starts afresh: its settings changed under
    --force, or an input changed on disk), and the final `counts` per state."""

    name: str
    output_dir: Path
    ran: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    blocked: dict[str, str] = field(default_factory=dict)
    rerun: dict[str, str] = field(default_factory=dict)
    warnings: dict[str, list[str]] = field(default_factory=dict)  # id -> its metrics.json warnings (jobs run now)
    counts: dict[str, int] = field(default_factory=dict)
    wall_seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failed and not self.blocked

    def __str__(self) -> str:
        line = (
            f"experiment {self.name!r}: {len(self.ran)} job(s) run, {len(self.skipped)} already done, "
            f"{len(self.failed)} failed, {len(self.blocked)} blocked in {self.wall_seconds:.1f}s; results in "
            f"{self.output_dir}"
        )
        details = [f"  re-run  {i}: {why}" for i, why in self.rerun.items()]
        details += [f"  failed  {i}: {e.strip().splitlines()[-1] if e.strip() else e}" for i, e in self.failed.items()]
        details += [f"  blocked {i}: {r}" for i, r in self.blocked.items()]
        details += [f"  warning {i}: {w}" for i, found in self.warnings.items() for w in found]
        return "\n".join([line, *details])


def job_payload(spec: ExperimentSpec, job: Job, resume: bool = False) -> JobPayload:
    out = Path(spec.output_dir)
    store, encoder = job.store_dir(out), job.encoder_dir(out)
    return JobPayload(
        job_id=job.id,
        task=job.task,
        setup=job.setup,
        seed=job.seed,
        output_dir=str(job.variant_dir(out)),
        run_dir=str(job.run_dir(out)),
        encoder=named_encoder(spec.encoder) if encoder is None else str(encoder),
        data_dir=spec.data_dir,
        store_dir=None if store is None else str(store),
        training=payload_options(job.training),
        options=payload_options(train_options(spec, job)),
        max_examples=spec.max_examples,
        kind=job.kind,
        experiment_dir=str(out),
        resume=resume,
        task_specs=spec.task_specs,
    )


def experiment_record(spec: ExperimentSpec, out: Path) -> dict[str, Any]:
    """What the output dir `out` records of the experiment as its SPEC_FILE: paths relative to the experiment file,
    which `source` names relative to `out`, so it is the same in every clone and `load_spec` reads it back."""
    source = relative_to_experiment_file(spec.source, str(out / SPEC_FILE))
    return {**spec.recorded_dict(), "spec_hash": spec.spec_hash(), "source": source}


def _folder_given(path: Path) -> str:
    """What to run instead of the folder `path` given as an experiment file: the experiment file it holds, or, for
    an experiment's output dir, the commands that read it and the copy of its experiment file."""
    said = f"experiment file {str(path)!r} is a folder, not an experiment file"
    if (path / DB_FILE).is_file():
        return (
            f"{said}: it is an experiment's output dir (it holds {DB_FILE}). See its jobs with `adapterfusion status "
            f"{path}`, its tables with `adapterfusion report {path}`, or resume it with `adapterfusion run "
            f"{path / SPEC_FILE}` (the runner's record of the experiment)"
        )
    found = sorted(p.name for p in path.iterdir() if p.suffix in (".yaml", ".yml", ".json") and p.is_file())
    if found:
        return f"{said}; it holds {', '.join(found)}: run `adapterfusion run {path / found[0]}`"
    return f"{said}; give the path of a .yaml or .json experiment file"


def _made_by_a_runner(folder: Path) -> bool:
    """Whether `folder` is an experiment's output dir: it holds the results store, or the record of the experiment
    a runner wrote (a committed results folder, whose store git ignores), or only what a runner creates before
    either (its lock, writers/, the lock's temp file), as a runner killed at its start leaves."""
    if (folder / DB_FILE).is_file() or _is_spec_record(folder):
        return True  # ResultsStore refuses a damaged one, or a SQLite database of something else
    return all(
        name in (LOCK_FILE, WRITERS_DIR) or (name.startswith(f".{LOCK_FILE}.") and is_temp_name(name))
        for name in os.listdir(folder)
    )


def _is_spec_record(folder: Path) -> bool:
    """Whether `folder`'s experiment.json is the record a runner wrote (it holds the spec_hash we add), not an
    experiment file of the user's that happens to have that name."""
    try:
        record = json.loads((folder / SPEC_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and "spec_hash" in record


def _check_output_dir(spec: ExperimentSpec) -> Path:
    """The experiment's output dir, if the runner may write there: a new or empty folder, or an output dir of an
    earlier run (resumed). A folder of the user's own files ('~', '.', a results folder) is refused: experiment.json
    and report/ there would be overwritten. So is a user's experiment.json there, e.g. the experiment file itself."""
    out = check_writable_folder(
        spec.output_dir,
        "output_dir",
        only_ours=f"an experiment's output dir (one that holds {DB_FILE})",
        ours=_made_by_a_runner,
        error=ExperimentSpecError,
    )
    return check_writable_folder(
        out, "output_dir", writes=(SPEC_FILE,), ours=_is_spec_record, error=ExperimentSpecError
    )


def run_experiment(
    spec_or_path: ExperimentSpec | Mapping[str, Any] | str | os.PathLike,
    executor: str | Executor = "inprocess",
    workers: int | None = None,
    force: bool = False,
    progress: bool = True,
    hooks: Sequence[Hook] = (),
    report: bool = True,
) -> ExperimentSummary:
    """Run every unfinished job of the experiment; returns an ExperimentSummary.

    executor: "inprocess" (default), "process" (a local pool of `workers` processes), "ray" (RAY_ADDRESS or a local
    Ray instance; build experiments.ray_executor.RayExecutor for an address or per-job CPUs/GPUs), or an Executor.
    force: reuse an output dir that holds a different spec's results (jobs whose settings changed are re-run).
    """
    if isinstance(spec_or_path, (str, os.PathLike)) and Path(spec_or_path).is_dir():
        raise ExperimentSpecError(_folder_given(Path(spec_or_path)))
    spec = load_spec(spec_or_path)
    jobs = plan_jobs(spec)
    if spec.encoder is not None:  # once, not per job: a Hub id that is neither cached nor reachable fails here
        resolve_encoder(named_encoder(spec.encoder))
    check_data_folders(spec.data_dir, spec.tasks, spec.task_specs)
    if isinstance(executor, str):  # before the output dir and its store are written
        check_executor(executor, workers)
    out = _check_output_dir(spec)
    start = time.perf_counter()
    summary = ExperimentSummary(spec.name, out)
    with registered_writer(out), RunnerLock(out):
        clear_dead_writers(out)  # a killed runner's workers have ended; the temp files its writers left are removed
        with ResultsStore(out) as store:
            if store.meta().get("spec_hash") != spec.spec_hash():  # a spec bound before ran (or was refused) already
                check_runs_here(executor, jobs)
            before = store.states()
            reset = set(store.bind(spec, jobs, force=force))
            summary.rerun = settings_changed(jobs, reset, before)  # --force on an edited experiment file
            summary.rerun |= stale_jobs(jobs, store.states(), out)  # inputs changed on disk since they ran
            store.requeue(list(summary.rerun))
            reset |= set(summary.rerun)
            store.requeue_unfinished()
            atomic_write_json(out / SPEC_FILE, experiment_record(spec, out))
            states = store.states()
            summary.skipped = [job.id for job in jobs if states[job.id] == "done"]
            resumable = frozenset(
                job.id for job in jobs if job.id not in reset and all(states[d] == "done" for d in job.depends_on)
            )
            pool = make_executor(executor, workers) if isinstance(executor, str) else executor
            try:
                _schedule(
                    spec,
                    [job for job in jobs if states[job.id] != "done"],
                    store,
                    pool,
                    summary,
                    _Progress(len(jobs), len(summary.skipped), spec.name, enabled=progress),
                    resumable,
                )
            finally:
                pool.shutdown()
            summary.counts = store.counts()
            for hook in hooks:
                hook(spec, store)
            if report:
                try:
                    write_report(out, store)
                except Exception as err:  # noqa: BLE001 - the jobs are done and recorded; the report can be made later
                    warnings.warn(
                        f"writing the report of {out} failed ({type(err).__name__}: {err}); "
                        f"run `adapterfusion report {out}` once the cause is fixed",
                        stacklevel=2,
                    )
    summary.wall_seconds = time.perf_counter() - start
    return summary


def _schedule(
    spec: ExperimentSpec,
    pending: list[Job],
    store: ResultsStore,
    pool: Executor,
    summary: ExperimentSummary,
    progress: _Progress,
    resumable: frozenset[str] = frozenset(),
) -> None:
    """Submit each job once its dependencies are done, as many at a time as the executor takes; the `resumable`
    ones continue from their checkpoints (their settings and their dependencies' results are unchanged)."""
    states = store.states()
    running: dict[Future, Job] = {}
    try:
        while pending or running:
            for job in list(pending):  # pending is topologically ordered, so blocking propagates in one pass
                bad = [d for d in job.depends_on if states[d] in ("failed", "blocked")]
                if bad:
                    reason = "needs " + ", ".join(f"{d} ({states[d]})" for d in bad)
                    store.mark_blocked(job.id, reason)
                    states[job.id] = "blocked"
                    summary.blocked[job.id] = reason
                    pending.remove(job)
                    progress.finished(job.id, "blocked")
            ready = [job for job in pending if all(states[d] == "done" for d in job.depends_on)]
            while ready and len(running) < pool.capacity:
                job = ready.pop(0)
                pending.remove(job)
                run_dir = job.run_dir(spec.output_dir)
                try:
                    clear_run_dir(run_dir, keep_checkpoints=job.id in resumable, also=(JOB_LOG,))
                except TrainingError as err:  # another process trains in that folder: this job fails, untouched
                    cleared: str | None = str(err)
                else:
                    cleared = None
                store.mark_running(job.id, str(run_dir))
                states[job.id] = "running"
                progress.started(job.id, run_dir)
                future: Future = Future()
                if cleared is not None:
                    future.set_result({"ok": False, "error": cleared})
                else:
                    try:
                        future = pool.submit(job_payload(spec, job, resume=job.id in resumable))
                    except Exception as err:  # noqa: BLE001 - e.g. a broken process pool: the job fails, not the runner
                        future.set_exception(err)
                running[future] = job
            if not running:
                break  # nothing runnable is left (only possible with an inconsistent plan)
            finished, _ = wait(list(running), return_when=FIRST_COMPLETED)
            for future in finished:
                job = running.pop(future)
                outcome = _outcome(future)
                if outcome["ok"]:
                    store.mark_done(job.id, outcome["metrics"])
                    states[job.id] = "done"
                    summary.ran.append(job.id)
                    found = outcome["metrics"].get("warnings") or []
                    if found:
                        summary.warnings[job.id] = [str(w) for w in found]
                else:
                    store.mark_failed(job.id, outcome["error"])
                    states[job.id] = "failed"
                    summary.failed[job.id] = outcome["error"]
                progress.finished(job.id, states[job.id])
    finally:  # interrupted (Ctrl-C): unfinished jobs stay `running`, shown as interrupted, re-run by the next run
        progress.close()


def _outcome(future: Future) -> dict[str, Any]:
    try:
        return future.result()
    except Exception as err:  # noqa: BLE001 - a worker process died (e.g. out of memory), not the job's own error
        return {"ok": False, "error": f"the worker running this job died: {type(err).__name__}: {err}"}


def describe_running(job_id: str, run_dir: str | os.PathLike) -> str:
    """A running job with its epoch when its run has written progress.json, e.g. "st-a-rf16/rte/seed-1 epoch 2/3"."""
    progress = read_progress(run_dir)
    return job_id if progress is None else f"{job_id} {progress.describe()}"


class _Progress:
    """A tqdm bar of jobs: done / running / left, failures, tqdm's ETA, and each running job's epoch. A ticker
    thread re-reads the running runs' progress.json every POLL_SECONDS, so the epoch moves while a job trains in
    this process (inprocess executor) or elsewhere (process pool, Ray)."""

    def __init__(self, total: int, done: int, name: str, enabled: bool = True) -> None:
        from tqdm.auto import tqdm

        self.running: dict[str, Path] = {}  # job id -> run dir
        self.counts = {"failed": 0, "blocked": 0}
        self.left = total - done
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._bar = tqdm(total=total, initial=done, desc=name, unit="job", disable=not enabled, dynamic_ncols=True)
        self._show()
        self._ticker = threading.Thread(target=self._tick, name="experiment-progress", daemon=True) if enabled else None
        if self._ticker is not None:
            self._ticker.start()

    def _tick(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            self._show()

    def _show(self) -> None:
        with self._lock:
            postfix: dict[str, Any] = {"running": len(self.running), "left": self.left}
            postfix.update({k: v for k, v in self.counts.items() if v})
            if self.running:
                postfix["now"] = ", ".join(describe_running(i, d) for i, d in self.running.items())
            self._bar.set_postfix(postfix, refresh=True)

    def started(self, job_id: str, run_dir: Path) -> None:
        with self._lock:
            self.running[job_id] = run_dir
        self._show()

    def finished(self, job_id: str, state: str) -> None:
        with self._lock:
            self.running.pop(job_id, None)
            if state in self.counts:
                self.counts[state] += 1
            self.left -= 1
            self._bar.update(1)
        self._show()

    def close(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        self._bar.close()
