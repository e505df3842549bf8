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
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from types import FrameType
from typing import Any, Protocol, cast

import torch
import tqdm

from adapterfusion.experiments.errors import ExperimentSpecError
from adapterfusion.experiments.jobs import JobPayload, execute_job, work_for
from adapterfusion.experiments.plan import Job
from adapterfusion.experiments.ray_executor import RayExecutor  # which imports ray, an optional extra, when used

WATCHDOG_SECONDS = 1.0  # how often a process-pool worker checks that its runner lives
INTERRUPT_GRACE_SECONDS = 10.0  # how long an interrupted runner's workers get to unwind their jobs before a kill
INTERRUPT_EVERY_SECONDS = 0.5  # how often they are interrupted again meanwhile
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


class Executor(Protocol):
    @property
    def capacity(self) -> int: ...  # how many jobs may run at once

    def submit(self, payload: JobPayload) -> Future[dict[str, Any]]: ...

    def shutdown(self) -> None: ...


def check_workers(workers: object, executor: str) -> None:
    """How many jobs `executor` runs at once: None (its default) or an integer >= 1, and 1 for inprocess, which runs
    one job at a time."""
    if workers is None:
        return
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ExperimentSpecError(f"workers={workers!r} must be an integer >= 1")
    if executor == "inprocess" and workers != 1:
        raise ExperimentSpecError(
            f"workers={workers}: the inprocess executor runs one job at a time; use executor='process' for more"
        )


class InProcessExecutor:
    """Runs each job in the calling process when submitted; the returned Future is already done."""

    capacity = 1

    def __init__(self, workers: int | None = None) -> None:
        check_workers(workers, "inprocess")

    def submit(self, payload: JobPayload) -> Future[dict[str, Any]]:
        future: Future[dict[str, Any]] = Future()
        future.set_result(execute_job(payload))
        return future

    def shutdown(self) -> None:
        pass


def _init_worker(threads: int, runner: int) -> None:
    # A worker starts with SIGINT blocked (ProcessExecutor.submit), so a Ctrl-C while it imports cannot end it with
    # a traceback and break the pool. Idle, it ignores SIGINT (which drops one still pending): a Ctrl-C is for the
    # jobs (_run_job), not for the pool's loop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    work_for(runner)
    _die_with_runner(runner)
    torch.set_num_threads(threads)
    # tqdm's default lock is a multiprocessing one, which a worker killed after its grace leaves for the resource
    # tracker to report as leaked; a worker's bars share no stream with another process's
    tqdm.tqdm.set_lock(threading.RLock())


def _run_job(payload: JobPayload) -> dict[str, Any]:
    """execute_job in a pool worker, interruptible by SIGINT (Ctrl-C, or the runner's ProcessExecutor.shutdown)
    while the job runs; the worker's idle loop ignores it, so an idle worker waits for the pool's own end."""
    signal.signal(signal.SIGINT, _interrupt_once)
    try:
        return execute_job(payload)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


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


@contextlib.contextmanager
def _sigint_blocked() -> Iterator[None]:
    """SIGINT held back in this thread meanwhile: one that comes is delivered when the block ends, not lost."""
    if not hasattr(signal, "pthread_sigmask"):  # Windows
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _interrupt_once(signum: int, frame: FrameType | None) -> None:
    """A job's first SIGINT raises KeyboardInterrupt; later ones (a second Ctrl-C, the runner's repeats) are ignored,
    so they cannot cut short the cleanup the first one started (the job's finally blocks)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


class ProcessExecutor:
    """A pool of `workers` spawned processes (default: CPU count); each gets CPU count / workers torch threads.
    The workers die with the runner (_die_with_runner). A shutdown with jobs still running (the runner was
    interrupted: Ctrl-C, SIGTERM) interrupts them, as a terminal's Ctrl-C does, instead of waiting for them to end."""

    def __init__(self, workers: int | None = None) -> None:
        cpus = os.cpu_count() or 1
        workers = cpus if workers is None else workers
        check_workers(workers, "process")
        self.capacity = workers
        self._pool = ProcessPoolExecutor(
            max_workers=workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_init_worker,
            initargs=(max(1, cpus // workers), os.getpid()),
        )
        self._in_flight: set[Future[dict[str, Any]]] = set()

    def submit(self, payload: JobPayload) -> Future[dict[str, Any]]:
        with _sigint_blocked():  # inherited by a worker the pool spawns here: it unblocks once ready (_init_worker)
            future = self._pool.submit(_run_job, payload)
            self._in_flight.add(future)  # before a Ctrl-C held back meanwhile is raised
        future.add_done_callback(self._in_flight.discard)
        return future

    def shutdown(self) -> None:
        if all(future.done() for future in list(self._in_flight)):  # the workers end on the pool's own signal
            self._pool.shutdown(wait=True, cancel_futures=True)
            return
        # The runner was interrupted. Waiting on the pool's own end waited for the running jobs to finish, and a
        # second Ctrl-C during that wait could leave a worker without its stop signal, so the command hung at exit
        # (joining the workers). Each running job is interrupted instead and given INTERRUPT_GRACE_SECONDS to unwind
        # (its finally blocks run; its run stays resumable from its last checkpoint); what still runs then is killed.
        # ProcessPoolExecutor names its processes only in `_processes`.
        workers = list((getattr(self._pool, "_processes", None) or {}).values())
        try:
            self._pool.shutdown(wait=False, cancel_futures=True)
            _interrupt_until_ended(workers, INTERRUPT_GRACE_SECONDS)
        finally:
            for worker in workers:
                if worker.is_alive():
                    worker.kill()


def _interrupt_until_ended(workers: Sequence[multiprocessing.process.BaseProcess], seconds: float) -> None:
    """SIGINT each worker, again every INTERRUPT_EVERY_SECONDS, until all ended or `seconds` passed: a running job
    raises KeyboardInterrupt (once: _interrupt_once), an idle worker ignores it, and one that was still starting or
    just took a queued job when the first came is reached by a later one. Waits without reaping them (the pool's
    own thread joins them)."""
    deadline = time.monotonic() + seconds
    left = {worker.sentinel: worker.pid for worker in workers if worker.pid is not None}
    while left and (timeout := deadline - time.monotonic()) > 0:
        for pid in left.values():
            with contextlib.suppress(OSError):  # ended since
                os.kill(pid, signal.SIGINT)
        for ended in multiprocessing.connection.wait(list(left), min(timeout, INTERRUPT_EVERY_SECONDS)):
            left.pop(cast(int, ended))


def _ray_executor(workers: int | None = None) -> Executor:
    return RayExecutor(workers)


EXECUTORS: dict[str, Callable[[int | None], Executor]] = {
    "inprocess": InProcessExecutor,
    "process": ProcessExecutor,
    "ray": _ray_executor,
}


def check_executor(name: str, workers: int | None = None) -> None:
    """make_executor's arguments, which run_experiment checks before it writes anything."""
    if name not in EXECUTORS:
        raise ExperimentSpecError(f"unknown executor {name!r}; choose one of {', '.join(EXECUTORS)}")
    check_workers(workers, name)


def make_executor(name: str, workers: int | None = None) -> Executor:
    check_executor(name, workers)
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
