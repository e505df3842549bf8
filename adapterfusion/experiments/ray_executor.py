"""The `ray` executor: one Ray task per job, for when one machine is not enough.

Each job is a Ray remote task with its own `num_cpus`/`num_gpus` request that calls `execute_job` and returns the
outcome dict; the runner's process alone writes the results DB, as with every executor. Ray's own retries are off
(`max_retries=0`): a job whose worker died is recorded as failed and re-run from scratch by the next `run`.

Requirements on a multi-node cluster: every node runs the same Python with `adapterfusion` (and its extras)
installed, and the runner's working directory, the experiment's output, data and encoder paths are on a filesystem
that every node mounts at the same path (each task changes into the runner's working directory first, so relative
paths in the experiment file mean the same thing on every node).
"""

from __future__ import annotations

import math
import os
import socket
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from adapterfusion._validation import check_positive
from adapterfusion.errors import ConfigError
from adapterfusion.experiments.errors import ExperimentError
from adapterfusion.experiments.jobs import JobPayload, execute_job

INSTALL_HINT = "pip install 'adapterfusion[ray]'"


@dataclass(frozen=True)
class RayRequest:
    """What each job asks Ray for: CPUs (also its torch thread count, rounded up) and GPUs (fractions allowed)."""

    cpus: float = 1.0
    gpus: float = 0.0

    def __post_init__(self) -> None:
        check_positive(self.cpus, "cpus_per_job")
        if self.gpus != 0:  # 0: a CPU-only job
            check_positive(self.gpus, "gpus_per_job")

    def jobs_fitting(self, resources: dict[str, float]) -> int:
        """How many such jobs the cluster's total `resources` hold at once (at least 1)."""
        fits = [resources.get("CPU", 0.0) // self.cpus]
        if self.gpus:
            fits.append(resources.get("GPU", 0.0) // self.gpus)
        return max(1, int(min(fits)))


def _run_on_node(payload: JobPayload, cwd: str, threads: int) -> dict[str, Any]:
    """The Ray task: run one job from the runner's working directory, so relative paths resolve as they did there."""
    if not os.path.isdir(cwd):
        return {
            "ok": False,
            "error": f"the runner's working directory {cwd} does not exist on Ray node "
            f"{socket.gethostname()}; put it and the output dir on a filesystem every "
            f"node mounts at the same path",
        }
    import torch

    torch.set_num_threads(threads)
    previous = os.getcwd()
    os.chdir(cwd)
    try:
        return execute_job(payload)
    finally:
        os.chdir(previous)


def import_ray() -> Any:
    """The `ray` module, or an ExperimentError that says how to install it."""
    try:
        import ray
    except ImportError as err:
        raise ExperimentError(
            f"the ray executor needs Ray, which is not installed ({err}); run `{INSTALL_HINT}`"
        ) from err
    return ray


REACH_SECONDS = 5.0  # how long a cluster's head gets to answer a plain TCP connect


def _check_answers(address: str) -> None:
    """Refuse a HOST:PORT where nothing answers: ray.init retries such an address for many minutes before it gives
    up, while a TCP connect says so in seconds. Other forms (auto, ray://...) are left to Ray."""
    host, colon, port = address.rpartition(":")
    if "://" in address or not colon or not host or not port.isdigit():
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=REACH_SECONDS):
            pass
    except (OSError, OverflowError) as err:  # OverflowError: a port beyond 65535
        raise ExperimentError(
            f"nothing answers at the Ray cluster address {address!r} ({err}); start the cluster there with "
            "`ray start --head`, or give its head's HOST:PORT, or auto"
        ) from None


class RayExecutor:
    """Submits each job as a Ray task. `address`: "auto" (a cluster started on this machine with `ray start`),
    "host:port" (its head's GCS address), or None (RAY_ADDRESS if set, else a Ray instance started for this run).
    `workers`: jobs kept in flight (default: as many as the cluster's CPUs/GPUs hold). Ray is imported here, but
    connected to only on first use, so a runner that fails before scheduling leaves no session behind."""

    def __init__(
        self,
        workers: int | None = None,
        address: str | None = None,
        cpus_per_job: float = 1.0,
        gpus_per_job: float = 0.0,
    ) -> None:
        if workers is not None:
            check_positive(workers, "workers")
        if address is not None and (not isinstance(address, str) or not address.strip()):  # before any job starts
            raise ConfigError(
                f"the Ray address {address!r} (--ray-address) names no cluster; give auto or the head's HOST:PORT, or "
                "leave it out for RAY_ADDRESS, else a Ray instance started for this run"
            )
        self.request = RayRequest(cpus_per_job, gpus_per_job)
        self.address, self._workers = address, workers
        self._ray = import_ray()
        self._task: Any = None  # the remote function, once connected
        self._owns_session = False
        self._capacity = 0
        self._in_flight: dict[Future, Any] = {}

    def _remote(self) -> Any:
        """The remote job function, connecting to Ray the first time."""
        if self._task is None:
            self._connect()
        return self._task

    def check_address(self) -> None:
        """Refuse, in seconds and with a plain TCP connect rather than ray.init, a HOST:PORT address (given, or
        RAY_ADDRESS) where nothing answers: the command line calls it before the output dir is written; the first
        use calls it too."""
        _check_answers(self.address or os.environ.get("RAY_ADDRESS") or "")

    def _connect(self) -> None:
        ray = self._ray
        if not ray.is_initialized():
            self.check_address()
            local = {} if self.address or os.environ.get("RAY_ADDRESS") else {"include_dashboard": False}
            try:
                ray.init(address=self.address, log_to_driver=False, logging_level="warning", **local)
            except (ConnectionError, ValueError, RuntimeError) as err:
                target = self.address or os.environ.get("RAY_ADDRESS") or "a new local instance"
                raise ExperimentError(
                    f"cannot connect to the Ray cluster at {target!r} ({err}); start one with "
                    "`ray start --head` and pass its head's host:port or auto"
                ) from err
            self._owns_session = True
        self._capacity = self._workers or self.request.jobs_fitting(ray.cluster_resources())
        self._task = ray.remote(_run_on_node).options(
            num_cpus=self.request.cpus, num_gpus=self.request.gpus, max_retries=0
        )

    @property
    def capacity(self) -> int:
        self._remote()
        return self._capacity

    def submit(self, payload: JobPayload) -> Future[dict[str, Any]]:
        ref = self._remote().remote(payload, os.getcwd(), max(1, math.ceil(self.request.cpus)))
        future = ref.future()
        self._in_flight[future] = ref
        future.add_done_callback(self._forget)
        return future

    def _forget(self, future: Future) -> None:
        self._in_flight.pop(future, None)

    def shutdown(self) -> None:
        """Cancel the jobs still running (the runner re-queues them) and end the Ray session if this run began it."""
        for ref in list(self._in_flight.values()):
            self._ray.cancel(ref, force=True)
        self._in_flight.clear()
        if self._owns_session:
            self._ray.shutdown()
            self._owns_session = False
        self._task = None
