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
import ctypes
import gc
import json
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from adapterfusion.experiments.errors import ExperimentSpecError
from adapterfusion.experiments.plan import MULTITASK_KIND, SINGLE_KIND
from adapterfusion.experiments.writers import registered_writer

JOB_LOG = "job.log"
WATCHDOG_SECONDS = 1.0  # how often a process-pool worker checks that its runner lives
_PR_SET_PDEATHSIG = 1  # linux/prctl.h
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
    experiment_dir: str | None = None  # the worker registers there as a writer (experiments/writers.py)
    resume: bool = False


class _OncePerRecord(logging.Filter):
    """Lets each record through once. The job's handler sits on the root logger and on library loggers that may
    not propagate to it (transformers turns propagation off when first imported), so a record that does propagate
    would otherwise be written twice."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "_job_log_filter", None) == id(self):
            return False
        record._job_log_filter = id(self)
        return True


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
    handler.addFilter(_OncePerRecord())
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


@contextlib.contextmanager
def _as_writer(payload: JobPayload) -> Iterator[None]:
    """Register as a writer of the experiment's output dir, then check that the runner lives, before writing."""
    with registered_writer(payload.experiment_dir) if payload.experiment_dir else contextlib.nullcontext():
        _check_runner()
        yield


def execute_job(payload: JobPayload) -> dict[str, Any]:
    """Run one job; returns {"ok": True, "metrics": <metrics.json>} or {"ok": False, "error": <traceback text>}.
    A multi-task run's metrics.json holds every task's dev metrics (`best[task]`, `metric_for_best[task]`).
    An Exception is reported, not raised (it would have to pickle across processes); Ctrl-C still propagates."""
    run_dir = Path(payload.run_dir)
    log = logging.getLogger(__name__)
    with _as_writer(payload), capture_logs(run_dir / JOB_LOG), warnings.catch_warnings():
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

    def submit(self, payload: JobPayload) -> Future[dict[str, Any]]: ...

    def shutdown(self) -> None: ...


class InProcessExecutor:
    """Runs each job in the calling process when submitted; the returned Future is already done."""

    capacity = 1

    def __init__(self, workers: int | None = None) -> None:
        if workers not in (None, 1):
            raise ExperimentSpecError(f"workers={workers}: the inprocess executor runs one job at a time; "
                                      "use executor='process' for more")

    def submit(self, payload: JobPayload) -> Future[dict[str, Any]]:
        future: Future[dict[str, Any]] = Future()
        future.set_result(execute_job(payload))
        return future

    def shutdown(self) -> None:
        pass


_runner: int | None = None  # in a process-pool worker: the pid of the runner it works for


def _check_runner() -> None:
    """A pool worker whose runner is gone takes no job: it may have one left in the pool's queue, and the next
    runner, which waited only for the writers registered when it started, would run that job too."""
    if _runner is not None and os.getppid() != _runner:
        os._exit(1)


def _init_worker(threads: int, runner: int) -> None:
    global _runner
    _runner = runner
    _die_with_runner(runner)
    import torch

    torch.set_num_threads(threads)


def _die_with_runner(runner: int) -> None:
    """End this worker as soon as its runner (pid `runner`, its parent) ends, however it ends: a worker that
    outlived a killed runner would go on writing into the output dir while the next runner re-runs its job. Linux
    sends the parent-death signal at once; a watchdog thread notices the re-parenting elsewhere within a second."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != runner:  # the runner died before the signal was set up
        os._exit(1)
    threading.Thread(target=_watch_runner, args=(runner,), name="runner-watchdog", daemon=True).start()


def _watch_runner(runner: int) -> None:
    while os.getppid() == runner:
        time.sleep(WATCHDOG_SECONDS)
    os._exit(1)


class ProcessExecutor:
    """A pool of `workers` spawned processes (default: CPU count); each gets CPU count / workers torch threads.
    The workers die with the runner (_die_with_runner)."""

    def __init__(self, workers: int | None = None) -> None:
        cpus = os.cpu_count() or 1
        workers = cpus if workers is None else workers
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ExperimentSpecError(f"workers={workers!r} must be an integer >= 1")
        self.capacity = workers
        self._pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                                         initializer=_init_worker, initargs=(max(1, cpus // workers), os.getpid()))

    def submit(self, payload: JobPayload) -> Future[dict[str, Any]]:
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
