"""Executors decide where jobs run: `submit(JobPayload) -> Future` of the job's outcome dict, which the job's
worker computes with experiments/jobs.py's `execute_job`. The runner's process alone writes the results DB.

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
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any, Protocol

import torch

from adapterfusion.experiments.errors import ExperimentSpecError
from adapterfusion.experiments.jobs import JobPayload, execute_job, work_for
from adapterfusion.experiments.plan import Job
from adapterfusion.experiments.ray_executor import RayExecutor  # which imports ray, an optional extra, when used

WATCHDOG_SECONDS = 1.0  # how often a process-pool worker checks that its runner lives
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


class Executor(Protocol):
    @property
    def capacity(self) -> int: ...  # how many jobs may run at once

    def submit(self, payload: JobPayload) -> Future[dict[str, Any]]: ...

    def shutdown(self) -> None: ...


class InProcessExecutor:
    """Runs each job in the calling process when submitted; the returned Future is already done."""

    capacity = 1

    def __init__(self, workers: int | None = None) -> None:
        if workers not in (None, 1):
            raise ExperimentSpecError(
                f"workers={workers}: the inprocess executor runs one job at a time; use executor='process' for more"
            )

    def submit(self, payload: JobPayload) -> Future[dict[str, Any]]:
        future: Future[dict[str, Any]] = Future()
        future.set_result(execute_job(payload))
        return future

    def shutdown(self) -> None:
        pass


def _init_worker(threads: int, runner: int) -> None:
    work_for(runner)
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
        self._pool = ProcessPoolExecutor(
            max_workers=workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_init_worker,
            initargs=(max(1, cpus // workers), os.getpid()),
        )

    def submit(self, payload: JobPayload) -> Future[dict[str, Any]]:
        return self._pool.submit(execute_job, payload)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def _ray_executor(workers: int | None = None) -> Executor:
    return RayExecutor(workers)


EXECUTORS: dict[str, Callable[[int | None], Executor]] = {
    "inprocess": InProcessExecutor,
    "process": ProcessExecutor,
    "ray": _ray_executor,
}


def make_executor(name: str, workers: int | None = None) -> Executor:
    if name not in EXECUTORS:
        raise ExperimentSpecError(f"unknown executor {name!r}; choose one of {', '.join(EXECUTORS)}")
    return EXECUTORS[name](workers)


LOCAL_EXECUTORS = ("inprocess", "process")  # run the jobs on this machine (ray may send them to GPU nodes)


def check_runs_here(executor: str | Executor, jobs: Sequence[Job]) -> None:
    """Refuse, before any job, what no job can do on this machine under a local executor: fp16 without a CUDA GPU
    (train() refuses it too, so each job would fail on its own, and every fusion after it be blocked)."""
    if executor not in LOCAL_EXECUTORS or torch.cuda.is_available():
        return
    first = next((job for job in jobs if job.training.get("fp16")), None)
    if first is not None:
        raise ExperimentSpecError(
            f"job {first.id} trains with fp16: true, which needs a CUDA GPU, and none is visible here (executor "
            f"{executor!r} runs the jobs on this machine); use bf16: true (CPUs run bfloat16) or no mixed precision, "
            "or run with executor ray on GPU machines"
        )
