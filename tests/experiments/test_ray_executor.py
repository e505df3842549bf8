"""The ray executor on a real 2-CPU Ray cluster started by the test: the tiny experiment run through Ray records
the same results as an in-process run, a second run has nothing to do, and the CLI refuses --ray-* options with
another executor. The cluster is stopped by killing exactly its own processes (`ray stop` would stop every Ray
instance on the machine)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

ray = pytest.importorskip("ray")
import psutil  # noqa: E402 - a dependency of ray

from adapterfusion import ConfigError  # noqa: E402
from adapterfusion.cli import main  # noqa: E402
from adapterfusion.experiments import ExperimentError, ResultsStore, run_experiment  # noqa: E402
from adapterfusion.experiments.ray_executor import RayExecutor, import_ray  # noqa: E402
from tiny_experiments import tiny_experiment  # noqa: E402

TIMING_KEYS = {"runtime", "samples_per_second", "steps_per_second", "wall_seconds", "train_seconds", "store_path"}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _group_processes(group: int) -> list[psutil.Process]:
    """The live processes of a process group and all their descendants (Ray workers start groups of their own)."""
    members = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == group:
                members.append(process)
                members += process.children(recursive=True)
        except (OSError, psutil.Error):  # gone, or not ours to inspect
            continue
    return [p for p in {p.pid: p for p in members}.values() if _alive(p)]


def _alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE  # an orphan's zombie waits for pid 1, which may never reap
    except psutil.Error:
        return False


def _stop(group: int, grace: float = 2.0) -> None:
    """SIGTERM then SIGKILL every process the `ray start` of this group left behind, and nothing else."""
    processes = _group_processes(group)
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, grace)):
        for process in processes:
            try:
                process.send_signal(sig)
            except psutil.Error:
                pass
        deadline = time.monotonic() + wait
        while processes and time.monotonic() < deadline:
            time.sleep(0.1)
            processes = [p for p in processes if _alive(p)]
        if not processes:
            return
    raise RuntimeError(f"Ray processes survived SIGKILL: {[p.pid for p in processes]}")


@pytest.fixture
def ray_cluster(monkeypatch) -> Iterator[str]:
    """A 2-CPU Ray head on 127.0.0.1 with its own temp dir and process group; yields its GCS address."""
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    # `ray start` turns token auth on when ~/.ray/auth_token exists, but a driver given an address does not: off for
    # both, so the test does not depend on the home directory (the cluster listens on 127.0.0.1 only).
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    temp = Path(tempfile.mkdtemp(prefix="afray"))  # short: Ray's socket paths must fit in 107 characters
    port = _free_port()
    command = [
        sys.executable,
        "-m",
        "ray.scripts.scripts",
        "start",
        "--head",
        f"--port={port}",
        "--num-cpus=2",
        "--num-gpus=0",
        "--include-dashboard=false",
        "--disable-usage-stats",
        "--node-ip-address=127.0.0.1",
        f"--temp-dir={temp}",
        f"--dashboard-port={_free_port()}",
        f"--dashboard-agent-listen-port={_free_port()}",
    ]
    with open(temp / "ray-start.log", "w") as log:  # not a pipe: the daemons would hold it open
        start = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=temp, start_new_session=True)
    try:
        if start.wait(timeout=90) != 0:
            pytest.fail(f"ray start failed:\n{(temp / 'ray-start.log').read_text()}")
        yield f"127.0.0.1:{port}"
    finally:
        if start.poll() is None:
            start.kill()
        _stop(start.pid)  # start_new_session: the group id is the `ray start` process's pid
        shutil.rmtree(temp, ignore_errors=True)


def _reproducible(metrics: object) -> object:
    """metrics.json without its timings and paths (they differ between any two runs)."""
    if isinstance(metrics, dict):
        return {k: _reproducible(v) for k, v in metrics.items() if k not in TIMING_KEYS}
    if isinstance(metrics, list):
        return [_reproducible(v) for v in metrics]
    return metrics


def _results(out: Path) -> dict[str, tuple]:
    with ResultsStore(out, readonly=True) as store:
        return {r.id: (r.state, r.attempts, _reproducible(r.metrics)) for r in store.jobs()}


def _run_cli(argv: list[str], capsys) -> str:
    capsys.readouterr()
    code = main(argv)
    printed = capsys.readouterr()
    assert code == 0, printed.out + printed.err
    return printed.out


@pytest.mark.slow
def test_a_ray_run_records_what_an_inprocess_run_does(tmp_path, tiny_encoder_dir, ray_cluster, capsys):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each 1-CPU Ray task does, so that results can match bit for bit
    try:
        reference = run_experiment(tiny_experiment(tiny_encoder_dir, tmp_path / "inprocess"), progress=False)
    finally:
        torch.set_num_threads(threads)
    assert reference.ok and len(reference.ran) == 6, reference

    out = tmp_path / "ray"
    experiment = tmp_path / "exp.json"
    experiment.write_text(json.dumps(tiny_experiment(tiny_encoder_dir, out)))
    run = ["run", str(experiment), "--ray-address", ray_cluster, "--no-progress"]  # implies --executor ray
    assert "6 job(s) run" in _run_cli(run, capsys)

    expected = _results(tmp_path / "inprocess")
    assert _results(out) == expected and {state for state, _, _ in expected.values()} == {"done"}
    with ResultsStore(out, readonly=True) as store:
        logs = [(Path(r.run_dir) / "job.log").read_text() for r in store.jobs()]
    pids = {int(pid) for log in logs for pid in re.findall(r"\) pid (\d+)$", log, re.MULTILINE)}
    assert len(pids) >= 1 and os.getpid() not in pids  # every job logged its worker's pid: Ray's, not ours

    assert "0 job(s) run, 6 already done" in _run_cli(run, capsys)
    assert _results(out) == expected  # nothing re-run: attempts still 1


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--executor", "process", "--ray-address", "auto"], "--ray-address only apply to --executor ray"),
        (
            ["--ray-cpus-per-job", "1", "--ray-gpus-per-job", "1", "--executor", "inprocess"],
            "--ray-cpus-per-job, --ray-gpus-per-job only apply",
        ),
        (["--ray-cpus-per-job", "0"], "cpus_per_job=0.0 must be a positive number"),
        (["--executor", "ray", "--ray-gpus-per-job", "-1"], "gpus_per_job=-1.0 must be a positive number"),
        (["--executor", "ray", "--workers", "0"], "workers=0 must be a positive number"),
        # '' was taken as no address in the message but given to ray.init, after the output dir had been written
        (["--ray-address", ""], "the Ray address '' (--ray-address) names no cluster"),
        (["--ray-address", " "], "the Ray address ' ' (--ray-address) names no cluster"),
        (["--ray-address", "127.0.0.1:1"], "nothing answers at the Ray cluster address '127.0.0.1:1'"),
    ],
)
def test_cli_refuses_bad_ray_options_before_running(tmp_path, capsys, argv, message):
    assert main(["run", str(tmp_path / "missing.yaml"), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err


def test_ray_executor_validates_its_request_without_connecting():
    with pytest.raises(ConfigError, match="cpus_per_job=True"):
        RayExecutor(cpus_per_job=True)
    executor = RayExecutor(address="127.0.0.1:1", cpus_per_job=0.5, gpus_per_job=1)
    assert executor.request.jobs_fitting({"CPU": 8.0, "GPU": 2.0}) == 2
    assert executor.request.jobs_fitting({"CPU": 8.0}) == 1  # never zero: Ray queues what does not fit yet
    executor.shutdown()  # never connected: nothing to end
    assert not ray.is_initialized()


def test_without_ray_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    with pytest.raises(ExperimentError, match=r"pip install 'adapterfusion\[ray\]'"):
        import_ray()


@pytest.mark.parametrize("via_environment", [False, True])
def test_an_address_where_nothing_answers_is_refused_in_seconds(monkeypatch, via_environment):
    """--ray-address HOST:PORT (or RAY_ADDRESS) where no cluster listens: ray.init retried it for many minutes,
    printing GCS time-outs, before the run failed."""
    address = f"127.0.0.1:{_free_port()}"
    if via_environment:
        monkeypatch.setenv("RAY_ADDRESS", address)
    executor = RayExecutor(address=None if via_environment else address)
    monkeypatch.setattr(ray, "init", lambda *args, **kwargs: pytest.fail("ray.init was called"))
    started = time.monotonic()
    with pytest.raises(ExperimentError, match=f"nothing answers at the Ray cluster address '{address}'"):
        _ = executor.capacity
    assert time.monotonic() - started < 10
    assert not ray.is_initialized()
