"""Executors: what a job leaves in its run folder's job.log, and what happens to a process pool's workers when
the runner that owns them dies."""

from __future__ import annotations

import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from adapterfusion.cli import main
from adapterfusion.experiments import run_experiment
from adapterfusion.experiments.jobs import JOB_LOG, JobPayload, capture_logs, execute_job
from adapterfusion.io.atomic import is_temp_name
from tiny_experiments import FAST, DoneExecutor, tiny_experiment

REPO = Path(__file__).resolve().parents[2]


def test_each_log_line_reaches_job_log_once(tmp_path):
    run_dir = tmp_path / "run"
    outcome = execute_job(
        JobPayload(
            job_id="x/rte/seed-1",
            task="rte",
            setup="head",
            seed=1,
            output_dir=str(tmp_path),
            run_dir=str(run_dir),
            kind="nope",
        )
    )
    assert not outcome["ok"] and "unknown kind 'nope'" in outcome["error"]
    with capture_logs(run_dir / JOB_LOG):
        for name in ("", "transformers", "transformers.trainer", "adapterfusion", "adapterfusion.training", "other"):
            logging.getLogger(name).warning("line from %r", name)
    lines = (run_dir / JOB_LOG).read_text().splitlines()
    assert sum("job x/rte/seed-1 failed" in line for line in lines) == 1, lines
    for name in ("", "transformers", "transformers.trainer", "adapterfusion", "adapterfusion.training", "other"):
        assert sum(f"line from {name!r}" in line for line in lines) == 1, (name, lines)


def _workers_of(pid: int) -> list[int]:
    """The process-pool workers (spawned `spawn_main` processes) whose parent is `pid`, from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _alive(int(entry.name)):
            try:
                stat = (entry / "stat").read_text()
                command = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2 :].split()[1]) == pid and b"spawn_main" in command:
                found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    """Runs (a zombie, ended but not yet reaped, does not count)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def _running(db: Path) -> int:
    try:
        with sqlite3.connect(db, timeout=30) as connection:
            return connection.execute("SELECT COUNT(*) FROM jobs WHERE state = 'running'").fetchone()[0]
    except sqlite3.Error:  # not created yet
        return 0


def _start_training_runner(tmp_path: Path, encoder: Path, **popen) -> tuple[subprocess.Popen, Path]:
    """`adapterfusion run` of two head jobs that train far longer than any test waits, on 2 pool workers."""
    out = tmp_path / "out"
    experiment = tmp_path / "experiment.json"
    slow = {**FAST, "max_steps": 100_000}  # the jobs are still training when the test ends the runner
    experiment.write_text(json.dumps(tiny_experiment(encoder, out, setups=["head"], training=slow)))
    command = [sys.executable, "-m", "adapterfusion.cli", "run", str(experiment), "--executor", "process"]
    runner = subprocess.Popen(
        [*command, "--workers", "2", "--no-progress"],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        **popen,
    )
    return runner, out


def _wait_for_both_jobs(runner: subprocess.Popen, out: Path) -> list[int]:
    """The two workers' pids, once both jobs run in them (each worker registers as a writer; the runner is the
    third)."""
    deadline = time.time() + 300
    while (
        runner.poll() is None
        and time.time() < deadline
        and not (_running(out / "experiment.db") == 2 and len(list((out / "writers").glob("*.journal"))) == 3)
    ):
        time.sleep(0.2)
    workers = _workers_of(runner.pid)
    assert runner.poll() is None and len(workers) == 2, "both jobs should be running in two workers"
    return workers


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="finds the workers in /proc")
def test_process_pool_workers_die_with_a_killed_runner_and_the_next_runner_starts_clean(
    tmp_path, tiny_encoder_dir, capsys
):
    runner, out = _start_training_runner(tmp_path, tiny_encoder_dir, stderr=subprocess.DEVNULL)
    experiment = tmp_path / "experiment.json"
    try:
        workers = _wait_for_both_jobs(runner, out)
    finally:
        runner.kill()  # SIGKILL: no clean-up of any kind in the runner
        runner.wait()
    deadline = time.time() + 30
    while any(map(_alive, workers)) and time.time() < deadline:
        time.sleep(0.1)
    survivors = [pid for pid in workers if _alive(pid)]
    for pid in survivors:  # not to leave them training
        os.kill(pid, signal.SIGKILL)
    assert not survivors, "the workers outlived their killed runner"

    capsys.readouterr()
    assert main(["status", str(out)]) == 0
    assert "2 interrupted" in capsys.readouterr().out
    summary = run_experiment(experiment, executor=DoneExecutor(), progress=False, report=False)
    assert summary.ok and sorted(summary.ran) == ["head/rte/seed-1", "head/sst2/seed-1"]
    assert not list((out / "writers").glob("*.journal")) and not [p for p in out.rglob("*") if is_temp_name(p.name)]


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="finds the workers in /proc")
@pytest.mark.parametrize("interrupts", [1, 2])
def test_an_interrupted_process_pool_runner_ends_its_running_jobs_at_once(tmp_path, tiny_encoder_dir, interrupts):
    """SIGINT (or SIGTERM) to the runner alone, as `kill -INT PID` or a scheduler sends it: the runner waited for the
    running jobs to finish before it ended, and a second Ctrl-C during that wait hung it at exit. Now its jobs are
    interrupted, it ends within seconds with the interrupted line and status 130, and nothing is left running."""
    runner, out = _start_training_runner(
        tmp_path,
        tiny_encoder_dir,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as from a terminal, also under nohup
    )
    try:
        workers = _wait_for_both_jobs(runner, out)
        time.sleep(1.0)  # into the jobs' training
        for _ in range(interrupts):
            runner.send_signal(signal.SIGINT)
            time.sleep(0.2)
        _, stderr = runner.communicate(timeout=30)  # a 100,000-step job would take many minutes to finish
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
    assert runner.returncode == 130, stderr
    assert "interrupted at" in stderr and "Traceback" not in stderr and "leaked" not in stderr, stderr
    assert not [pid for pid in workers if _alive(pid)], "a worker outlived its interrupted runner"
    assert _running(out / "experiment.db") == 2  # left as interrupted: the next run resumes them
