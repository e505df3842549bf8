"""Executors run one job each: `submit(JobPayload) -> Future` of the job's outcome dict. A job writes only its own
run dir (and, for stage 1, its own AdapterStore entry); the runner's parent process alone writes the results DB.

| name | where jobs run |
|---|---|
| inprocess | one at a time, in the runner's process (default; easiest to debug) |
| process | a local pool of worker processes (`concurrent.futures.ProcessPoolExecutor`, spawn start method) |
| ray | one Ray task per job on a Ray cluster (experiments/ray_executor.py; needs the `ray` extra) |

Another executor is a class with `capacity`, `submit` and `shutdown`, registered in EXECUTORS; `execute_job` is
what its workers call.
"""
from __future__ import annotations

import contextlib
import gc
import json
import logging
import multiprocessing
import os
import traceback
import warnings
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from adapterfusion.experiments.errors import ExperimentSpecError
from adapterfusion.experiments.plan import MULTITASK_KIND, SINGLE_KIND

JOB_LOG = "job.log"
_LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


@dataclass(frozen=True)
class JobPayload:
    """Everything a worker needs to run one job (plain, picklable values): `kind` "single" runs
    adapterfusion.training.train, "multitask" train_multitask with `options` as its keyword arguments. `resume`:
    a single-task job continues from its run dir's newest complete checkpoint, if any (train(resume=True))."""

    job_id: str
    task: str
    setup: str
    seed: int
    output_dir: str  # passed to train(); the run dir is inside it
    run_dir: str
    encoder: str | None = None
    data_dir: str | None = None
    store_dir: str | None = None
    training: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    max_examples: int | dict[str, int] | None = None
    kind: str = SINGLE_KIND
    resume: bool = False


@contextlib.contextmanager
def capture_logs(log_file: Path) -> Iterator[None]:
    """Send the job's logging (root, transformers, warnings) and its stdout/stderr to its own file. The HF Trainer
    then prints its loss lines instead of drawing tqdm bars (it draws them only when transformers.training_args
    logs at WARNING or below), so nothing interleaves with the runner's progress display."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    stream = open(log_file, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 - closed in finally
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter(_LOG_FORMAT))
    handler.setLevel(logging.INFO)
    loggers = [logging.getLogger(), logging.getLogger("transformers"), logging.getLogger("adapterfusion")]
    args_logger, own_logger = logging.getLogger("transformers.training_args"), logging.getLogger(__name__)
    saved_levels = args_logger.level, own_logger.level
    for logger in loggers:
        logger.addHandler(handler)
    args_logger.setLevel(logging.ERROR)
    own_logger.setLevel(logging.INFO)
    logging.captureWarnings(True)
    try:
        with contextlib.redirect_stdout(stream), contextlib.redirect_stderr(stream):
            yield
    finally:
        logging.captureWarnings(False)
        args_logger.setLevel(saved_levels[0])
        own_logger.setLevel(saved_levels[1])
        for logger in loggers:
            logger.removeHandler(handler)
        stream.close()


def _train_single(payload: JobPayload) -> Path:
    """train() of the job's one task; returns the run dir it wrote."""
    from adapterfusion.training import AdapterStore, train

    logging.getLogger(__name__).info("job %s: train(%r, %r, seed=%d) pid %d", payload.job_id, payload.task,
                                     payload.setup, payload.seed, os.getpid())
    result = train(payload.task, payload.setup, seed=payload.seed, encoder=payload.encoder,
                   data_dir=payload.data_dir, output_dir=payload.output_dir,
                   store=AdapterStore(payload.store_dir) if payload.store_dir else None,
                   training_config=payload.training, setup_options=payload.options, max_examples=payload.max_examples,
                   resume=payload.resume)
    return Path(result.run_dir)


def _train_multitask(payload: JobPayload) -> Path:
    """train_multitask() of all the job's tasks in one run; returns the run dir it wrote."""
    from adapterfusion.training import train_multitask

    options = dict(payload.options)
    tasks = options.pop("tasks")
    logging.getLogger(__name__).info("job %s: train_multitask(%r, seed=%d, %s) pid %d", payload.job_id, tasks,
                                     payload.seed, options, os.getpid())
    result = train_multitask(tasks, seed=payload.seed, encoder=payload.encoder, data_dir=payload.data_dir,
                             output_dir=payload.output_dir, store=payload.store_dir, training_config=payload.training,
                             max_examples=payload.max_examples, **options)
    return Path(result.run_dir)


JOB_KINDS: dict[str, Callable[[JobPayload], Path]] = {SINGLE_KIND: _train_single, MULTITASK_KIND: _train_multitask}


def execute_job(payload: JobPayload) -> dict[str, Any]:
    """Run one job; returns {"ok": True, "metrics": <metrics.json>} or {"ok": False, "error": <traceback text>}.
    A multi-task run's metrics.json holds every task's dev metrics (`best[task]`, `metric_for_best[task]`).
    An Exception is reported, not raised (it would have to pickle across processes); Ctrl-C still propagates."""
    run_dir = Path(payload.run_dir)
    log = logging.getLogger(__name__)
    with capture_logs(run_dir / JOB_LOG), warnings.catch_warnings():
        warnings.simplefilter("default")
        try:
            if payload.kind not in JOB_KINDS:
                raise ExperimentSpecError(f"job {payload.job_id}: unknown kind {payload.kind!r}; "
                                          f"known: {', '.join(JOB_KINDS)}")
            written = JOB_KINDS[payload.kind](payload)
            if written.resolve() != run_dir.resolve():
                raise RuntimeError(f"the {payload.kind} run wrote {written}, the plan expected {run_dir}")
            metrics = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
            log.info("job %s done: %s", payload.job_id, metrics.get("best"))
            return {"ok": True, "metrics": metrics}
        except Exception:  # noqa: BLE001 - reported to the runner, which records it and goes on
            error = traceback.format_exc()
            log.error("job %s failed:\n%s", payload.job_id, error)
            return {"ok": False, "error": error}
        finally:
            gc.collect()  # the run's model is gone with its result; free its memory before the next job


class Executor(Protocol):
    capacity: int  # how many jobs may run at once

    def submit(self, payload: JobPayload) -> "Future[dict[str, Any]]": ...

    def shutdown(self) -> None: ...


class InProcessExecutor:
    """Runs each job in the calling process when submitted; the returned Future is already done."""

    capacity = 1

    def __init__(self, workers: int | None = None) -> None:
        if workers not in (None, 1):
            raise ExperimentSpecError(f"workers={workers}: the inprocess executor runs one job at a time; "
                                      "use executor='process' for more")

    def submit(self, payload: JobPayload) -> "Future[dict[str, Any]]":
        future: Future[dict[str, Any]] = Future()
        future.set_result(execute_job(payload))
        return future

    def shutdown(self) -> None:
        pass


def _init_worker(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


class ProcessExecutor:
    """A pool of `workers` spawned processes (default: CPU count); each gets CPU count / workers torch threads."""

    def __init__(self, workers: int | None = None) -> None:
        cpus = os.cpu_count() or 1
        workers = cpus if workers is None else workers
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ExperimentSpecError(f"workers={workers!r} must be an integer >= 1")
        self.capacity = workers
        self._pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                                         initializer=_init_worker, initargs=(max(1, cpus // workers),))

    def submit(self, payload: JobPayload) -> "Future[dict[str, Any]]":
        return self._pool.submit(execute_job, payload)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def _ray_executor(workers: int | None = None) -> Executor:
    from adapterfusion.experiments.ray_executor import RayExecutor  # imports ray, an optional extra

    return RayExecutor(workers)


EXECUTORS: dict[str, Callable[[int | None], Executor]] = {"inprocess": InProcessExecutor, "process": ProcessExecutor,
                                                         "ray": _ray_executor}


def make_executor(name: str, workers: int | None = None) -> Executor:
    if name not in EXECUTORS:
        raise ExperimentSpecError(f"unknown executor {name!r}; choose one of {', '.join(EXECUTORS)}")
    return EXECUTORS[name](workers)


def payload_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Setup options as plain JSON-able values (tuples -> lists) for pickling and logging."""
    return json.loads(json.dumps(dict(options)))
