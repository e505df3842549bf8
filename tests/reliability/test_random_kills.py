"""SIGKILL a small experiment at two dozen seeded-random moments, restarting it after each kill, then let it finish:
the results must be identical to an uninterrupted run with the same seeds, every job done exactly once, and no
half-written file left anywhere under the output dir.

Kill moments: KILLS points drawn uniformly over the uninterrupted run's duration and sorted; each restart resumes
where the previous run's finished jobs end on that timeline, and is killed when it reaches the next point (or, if
the point lies behind it, at a random moment of its start-up). So kills fall in every job, in start-up and in the
report at the end. Runs are children of a fork server (forkserver.py) that imported the library once; the last
run, to completion, is a plain `python -m adapterfusion.cli run` subprocess. The figures are printed (pytest -s)."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from safetensors.torch import load_file

from adapterfusion.io.atomic import is_temp_name
from tiny_experiments import tiny_experiment

KILLS = 20
SEED = 20251122
ENV = {
    **os.environ,
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
}  # the fork server imports this checkout's library
TIMING_KEYS = ("runtime", "per_second", "seconds")
PNG_END = b"IEND\xaeB`\x82"


class ForkServer:
    """The test's end of forkserver.py: start a run, learn its pid, wait for its wait status."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.count = 0
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("forkserver.py"))],
            env=ENV,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        assert self._line() == "ready"

    def _line(self) -> str:
        line = self.process.stdout.readline().strip()
        assert line, f"the fork server stopped (exit {self.process.poll()})"
        return line

    def start(self, argv: list[str]) -> int:
        self.count += 1
        request = {"argv": argv, "log": str(self.log_dir / f"run-{self.count:02d}.log")}
        self.process.stdin.write(json.dumps(request) + "\n")
        kind, pid = self._line().split()
        assert kind == "pid"
        return int(pid)

    def wait(self, pid: int) -> int:
        kind, ended, status = self._line().split()
        assert kind == "exit" and int(ended) == pid
        return int(status)

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


def _jobs(db: Path) -> dict[str, dict[str, Any]]:
    if not db.is_file():
        return {}
    with sqlite3.connect(db, timeout=30) as connection:
        connection.row_factory = sqlite3.Row
        try:
            return {row["id"]: dict(row) for row in connection.execute("SELECT * FROM jobs ORDER BY position")}
        except sqlite3.OperationalError:  # killed after creating the file, before creating its tables
            return {}


def _without_timings(value: Any) -> Any:
    """Metrics minus wall-clock figures, absolute paths and `resumed_from` (which checkpoint a killed job went on
    from, None for a job that ran in one go): they differ between any two runs. The numbers must not."""
    if isinstance(value, dict):
        return {
            k: _without_timings(v)
            for k, v in value.items()
            if k not in ("store_path", "resumed_from") and not any(t in k for t in TIMING_KEYS)
        }
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value


def _files(root: Path) -> dict[str, Path]:
    return {
        str(p.relative_to(root)): p for p in root.rglob("*") if p.is_file() and not p.name.endswith(("-wal", "-shm"))
    }


def half_written_files(root: Path) -> list[str]:
    """Every sign of an interrupted write under `root`: temp files, a lock, unparsable JSON, unloadable
    safetensors, a truncated PNG, a damaged database, checkpoints of an unfinished run."""
    problems = [f"temp file {p}" for p in root.rglob("*") if is_temp_name(p.name) or p.name.endswith(".tmp")]
    problems += [f"leftover {p}" for p in root.rglob("*") if p.name in ("runner.lock", "checkpoints")]
    for name, path in _files(root).items():
        try:
            if path.suffix == ".json":
                json.loads(path.read_text(encoding="utf-8"))
            elif path.suffix == ".safetensors":
                load_file(str(path))
            elif path.suffix == ".png" and not path.read_bytes().endswith(PNG_END):
                problems.append(f"truncated PNG {name}")
            elif path.suffix in (".md", ".csv", ".log"):
                path.read_text(encoding="utf-8")
        except Exception as error:  # noqa: BLE001 - any failure to read is the finding
            problems.append(f"{name}: {type(error).__name__}: {error}")
    with sqlite3.connect(root / "experiment.db") as connection:
        check = connection.execute("PRAGMA integrity_check").fetchone()[0]
    return problems + ([] if check == "ok" else [f"experiment.db: {check}"])


def _experiment(tmp_path: Path, encoder: Path, name: str) -> tuple[Path, Path]:
    out = tmp_path / name
    path = tmp_path / f"{name}.json"
    # Stage-1 adapters (run folders and AdapterStore entries) and the fusions that need them: 4 jobs of ~1 s.
    path.write_text(json.dumps(tiny_experiment(encoder, out, setups=["st-a", "fusion-st-a"])))
    return path, out


@pytest.mark.slow
def test_random_sigkills_then_resume_give_the_uninterrupted_results(tmp_path, tiny_encoder_dir):
    clock = time.perf_counter()
    (tmp_path / "logs").mkdir()
    server = ForkServer(tmp_path / "logs")
    figures: Counter[str] = Counter()
    try:
        baseline, baseline_out = _experiment(tmp_path, tiny_encoder_dir, "baseline")
        began = time.time()
        pid = server.start(["run", str(baseline), "--no-progress"])
        assert server.wait(pid) == 0, (tmp_path / "logs" / "run-01.log").read_text()
        duration = time.time() - began
        reference = _jobs(baseline_out / "experiment.db")
        ends = [job["finished_at"] - began for job in reference.values()]  # the inprocess executor runs them in order
        startup = min(job["started_at"] for job in reference.values()) - began

        killed, killed_out = _experiment(tmp_path, tiny_encoder_dir, "killed")
        rng = random.Random(SEED)
        first_done: dict[str, tuple[float, int]] = {}
        for target in sorted(rng.uniform(0, duration) for _ in range(KILLS)):
            before = _jobs(killed_out / "experiment.db")
            done = sum(job["state"] == "done" for job in before.values())
            reached = ends[done - 1] if done else 0.0
            delay = startup + target - reached if target > reached else rng.uniform(0, startup)
            pid = server.start(["run", str(killed), "--no-progress"])
            time.sleep(delay)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            status = server.wait(pid)
            after = _jobs(killed_out / "experiment.db")
            if not (os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL):
                figures["ran to the end before its kill"] += 1
            elif any(
                job["state"] == "running" and job["attempts"] > before.get(i, {}).get("attempts", 0)
                for i, job in after.items()
            ):
                figures["landed mid-job"] += 1
            elif after and all(job["state"] == "done" for job in after.values()):
                figures["landed after the last job (report, bookkeeping)"] += 1
            else:
                figures["landed in start-up or between jobs"] += 1
            figures["left a stale runner lock"] += (killed_out / "runner.lock").exists()
            figures["left temp files"] += any(is_temp_name(p.name) for p in killed_out.rglob("*"))
            for job_id, job in after.items():
                if job["state"] == "done":
                    seen = first_done.setdefault(job_id, (job["finished_at"], job["attempts"]))
                    assert seen == (job["finished_at"], job["attempts"]), f"{job_id} was re-run after it was done"
    finally:
        server.close()

    final = subprocess.run(
        [sys.executable, "-m", "adapterfusion.cli", "run", str(killed), "--no-progress"],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert final.returncode == 0, final.stderr[-3000:]
    result = _jobs(killed_out / "experiment.db")
    assert list(result) == list(reference) and all(job["state"] == "done" for job in result.values())
    for job_id, (finished_at, attempts) in first_done.items():
        assert (result[job_id]["finished_at"], result[job_id]["attempts"]) == (finished_at, attempts), job_id

    same_metrics = all(
        _without_timings(json.loads(result[i]["metrics"])) == _without_timings(json.loads(job["metrics"]))
        for i, job in reference.items()
    )
    ours, theirs = _files(killed_out), _files(baseline_out)
    weights = [name for name in theirs if name.endswith((".safetensors", "fusion_attention.json"))]
    same_files = set(ours) == set(theirs) and all(ours[n].read_bytes() == theirs[n].read_bytes() for n in weights)
    problems = half_written_files(killed_out)
    print(
        f"\nrandom SIGKILLs (seed {SEED}): {KILLS} kills over a {duration:.1f} s run of {len(reference)} jobs; "
        + ", ".join(f"{n} {what}" for what, n in sorted(figures.items()))
        + f"; attempts per job {sorted(job['attempts'] for job in result.values())}; "
        f"metrics identical to the uninterrupted run: {'yes' if same_metrics else 'NO'}; "
        f"{len(weights)} weight/attention files byte-identical: {'yes' if same_files else 'NO'}; "
        f"half-written files: {len(problems)}; test time {time.perf_counter() - clock:.0f} s"
    )
    assert same_metrics and same_files, sorted(set(ours) ^ set(theirs))
    assert not problems, problems
    assert figures["landed mid-job"] >= KILLS // 3, figures
