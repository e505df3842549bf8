"""`run_experiment`: plan the jobs of an experiment, skip the done ones, run the rest in dependency order on an
executor, and record every state change in the output dir's results store.

A job found `running` (its runner was killed) or `failed` is re-run from scratch: its run dir is removed first.
A failed job does not stop independent jobs; the jobs that need it are marked `blocked` with the reason.
`hooks` run at the end with (spec, results store); then the report (tables and figures) is written to
`<output_dir>/report/` (experiments.report.write_report) unless report=False.
"""
from __future__ import annotations

import os
import shutil
import time
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapterfusion.experiments.executors import Executor, JobPayload, make_executor, payload_options
from adapterfusion.experiments.plan import Job, plan_jobs
from adapterfusion.experiments.report import write_report
from adapterfusion.experiments.spec import ExperimentSpec, load_spec
from adapterfusion.experiments.store import ResultsStore, RunnerLock
from adapterfusion.io.atomic import atomic_write_json

SPEC_FILE = "experiment.json"
Hook = Callable[[ExperimentSpec, ResultsStore], None]


@dataclass
class ExperimentSummary:
    """What one call of run_experiment did: `ran` this time, `skipped` (done before), `failed` and `blocked`
    (id -> error text / reason), and the final `counts` per state."""

    name: str
    output_dir: Path
    ran: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    blocked: dict[str, str] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    wall_seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failed and not self.blocked

    def __str__(self) -> str:
        line = (f"experiment {self.name!r}: {len(self.ran)} job(s) run, {len(self.skipped)} already done, "
                f"{len(self.failed)} failed, {len(self.blocked)} blocked in {self.wall_seconds:.1f}s; results in "
                f"{self.output_dir}")
        details = [f"  failed  {i}: {e.strip().splitlines()[-1] if e.strip() else e}" for i, e in self.failed.items()]
        details += [f"  blocked {i}: {r}" for i, r in self.blocked.items()]
        return "\n".join([line, *details])


def job_payload(spec: ExperimentSpec, job: Job) -> JobPayload:
    out = Path(spec.output_dir)
    store = job.store_dir(out)
    return JobPayload(job_id=job.id, task=job.task, setup=job.setup, seed=job.seed, output_dir=str(job.variant_dir(out)),
                      run_dir=str(job.run_dir(out)), encoder=spec.encoder, data_dir=spec.data_dir,
                      store_dir=None if store is None else str(store), training=payload_options(job.training),
                      options=payload_options(job.options), max_examples=spec.max_examples)


def run_experiment(
    spec_or_path: ExperimentSpec | str | os.PathLike,
    executor: str | Executor = "inprocess",
    workers: int | None = None,
    force: bool = False,
    progress: bool = True,
    hooks: Sequence[Hook] = (),
    report: bool = True,
) -> ExperimentSummary:
    """Run every unfinished job of the experiment; returns an ExperimentSummary.

    executor: "inprocess" (default), "process" (a local pool of `workers` processes), or an Executor object.
    force: reuse an output dir that holds a different spec's results (jobs whose settings changed are re-run).
    """
    spec = load_spec(spec_or_path)
    jobs = plan_jobs(spec)
    out = Path(spec.output_dir)
    start = time.perf_counter()
    summary = ExperimentSummary(spec.name, out)
    with RunnerLock(out), ResultsStore(out) as store:
        store.bind(spec, jobs, force=force)
        store.requeue_unfinished()
        atomic_write_json(out / SPEC_FILE, {**spec.to_dict(), "spec_hash": spec.spec_hash(), "source": spec.source})
        states = store.states()
        summary.skipped = [job.id for job in jobs if states[job.id] == "done"]
        pool = make_executor(executor, workers) if isinstance(executor, str) else executor
        try:
            _schedule(spec, [job for job in jobs if states[job.id] != "done"], store, pool, summary,
                      _Progress(len(jobs), len(summary.skipped), spec.name, enabled=progress))
        finally:
            pool.shutdown()
        summary.counts = store.counts()
        for hook in hooks:
            hook(spec, store)
        if report:
            try:
                write_report(out, store)
            except Exception as err:  # noqa: BLE001 - the jobs are done and recorded; the report can be made later
                warnings.warn(f"writing the report of {out} failed ({type(err).__name__}: {err}); "
                              f"run `adapterfusion report {out}` once the cause is fixed", stacklevel=2)
    summary.wall_seconds = time.perf_counter() - start
    return summary


def _schedule(spec: ExperimentSpec, pending: list[Job], store: ResultsStore, pool: Executor,
              summary: ExperimentSummary, progress: "_Progress") -> None:
    """Submit each job once its dependencies are done, as many at a time as the executor takes."""
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
                shutil.rmtree(run_dir, ignore_errors=True)  # a re-run starts from scratch
                store.mark_running(job.id, str(run_dir))
                states[job.id] = "running"
                progress.started(job.id)
                try:
                    future = pool.submit(job_payload(spec, job))
                except Exception as err:  # noqa: BLE001 - e.g. a broken process pool: the job fails, not the runner
                    future = Future()
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
                else:
                    store.mark_failed(job.id, outcome["error"])
                    states[job.id] = "failed"
                    summary.failed[job.id] = outcome["error"]
                progress.finished(job.id, states[job.id])
    except BaseException:
        for job in running.values():  # interrupted (Ctrl-C): unfinished jobs go back to the queue
            store.mark_queued(job.id)
        raise
    finally:
        progress.close()


def _outcome(future: Future) -> dict[str, Any]:
    try:
        return future.result()
    except Exception as err:  # noqa: BLE001 - a worker process died (e.g. out of memory), not the job's own error
        return {"ok": False, "error": f"the worker running this job died: {type(err).__name__}: {err}"}


class _Progress:
    """A tqdm bar of jobs: done / running / left, failures, and tqdm's ETA."""

    def __init__(self, total: int, done: int, name: str, enabled: bool = True) -> None:
        from tqdm.auto import tqdm

        self.running: list[str] = []
        self.counts = {"failed": 0, "blocked": 0}
        self.left = total - done
        self._bar = tqdm(total=total, initial=done, desc=name, unit="job", disable=not enabled, dynamic_ncols=True)
        self._show()

    def _show(self) -> None:
        postfix = {"running": len(self.running), "left": self.left}
        postfix.update({k: v for k, v in self.counts.items() if v})
        if self.running:
            postfix["now"] = self.running[-1]
        self._bar.set_postfix(postfix, refresh=True)

    def started(self, job_id: str) -> None:
        self.running.append(job_id)
        self._show()

    def finished(self, job_id: str, state: str) -> None:
        if job_id in self.running:
            self.running.remove(job_id)
        if state in self.counts:
            self.counts[state] += 1
        self.left -= 1
        self._bar.update(1)
        self._show()

    def close(self) -> None:
        self._bar.close()
