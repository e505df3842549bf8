"""The results store where it cannot be used as usual: a read-only results folder is still read by `status` and
`report` (which says it cannot write there), and a damaged or foreign experiment.db is a clear error for every
command, which `run` leaves byte for byte as it was."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from adapterfusion.cli import main
from adapterfusion.experiments import ResultsStore, ResultsStoreError, load_spec, plan_jobs, run_experiment
from adapterfusion.experiments.plan import config_hashes
from tiny_experiments import DoneExecutor

REPO = Path(__file__).resolve().parents[2]
EXPERIMENT = {
    "name": "tiny",
    "tasks": ["rte", "cb"],
    "setups": ["head"],
    "encoder": "some/hub-id",
    "training": {"max_steps": 1},
}
READ_ONLY_VIEW = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" "$1" && shift && exec "$@"'


def _results(folder: Path) -> Path:
    summary = run_experiment(
        {**EXPERIMENT, "output_dir": str(folder)}, executor=DoneExecutor(), progress=False, report=False
    )
    assert summary.ok
    return folder


def _read_only(folder: Path, *argv: str) -> subprocess.CompletedProcess:
    """`adapterfusion <argv>` in a private mount namespace where `folder` is mounted read-only (so even root cannot
    write there); skipped where user and mount namespaces are not available."""
    probe = subprocess.run(
        [
            "unshare",
            "--map-root-user",
            "--mount",
            "sh",
            "-c",
            READ_ONLY_VIEW,
            "sh",
            str(folder),
            "sh",
            "-c",
            '! touch "$0/probe" 2>/dev/null',
            str(folder),
        ],
        capture_output=True,
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot make a read-only view of a folder here (unshare: {probe.stderr.decode()[-200:]!r})")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [
            "unshare",
            "--map-root-user",
            "--mount",
            "sh",
            "-c",
            READ_ONLY_VIEW,
            "sh",
            str(folder),
            sys.executable,
            "-m",
            "adapterfusion.cli",
            *argv,
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=300,
    )


def _one_line_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    return result.stderr.strip().splitlines()[-1]


@pytest.mark.slow
def test_status_and_report_on_a_read_only_results_folder(tmp_path):
    out = _results(tmp_path / "out")
    assert not (out / "experiment.db-wal").exists()  # the runner closed it cleanly: no -wal, no -shm beside it
    status = _read_only(out, "status", str(out))
    assert status.returncode == 0, status.stderr
    assert "head/cb/seed-42   done" in status.stdout and "2 done" in status.stdout
    error = _one_line_error(_read_only(out, "report", str(out), "--no-figures"))
    assert error == (
        f"error: the report folder {str(out / 'report')!r} would be created in {str(out)!r}, which is read-only for "
        f"this user; copy {out} to a folder you can write to and run `adapterfusion report` on the copy"
    )
    assert sorted(os.listdir(out)) == ["experiment.db", "experiment.json"]


@pytest.mark.slow
def test_status_of_a_read_only_folder_whose_runner_was_killed(tmp_path):
    """A killed runner leaves experiment.db-wal and -shm beside the database: SQLite reads them read-only."""
    out = _results(tmp_path / "out")
    killed = (
        "import os, sys; from adapterfusion.experiments import ResultsStore; s = ResultsStore(sys.argv[1]); "
        "s._transaction(\"UPDATE jobs SET state = 'running' WHERE "
        "id = 'head/rte/seed-42'\"); os._exit(0)"
    )
    subprocess.run([sys.executable, "-c", killed, str(out)], check=True, cwd=REPO)
    assert (out / "experiment.db-wal").stat().st_size > 0
    status = _read_only(out, "status", str(out))
    assert status.returncode == 0, status.stderr
    # from the -wal
    assert "head/rte/seed-42  interrupted" in status.stdout and "1 done, 1 interrupted" in status.stdout


def _damaged(out: Path, how: str) -> bytes:
    db = out / "experiment.db"
    if how == "garbage":
        db.write_bytes(os.urandom(4096))
    elif how == "truncated":
        db.write_bytes(db.read_bytes()[: db.stat().st_size // 2])
    else:  # a SQLite database of something else: its tables named otherwise, or as ours with other columns
        db.unlink()
        with sqlite3.connect(db) as connection:
            tables = ("users (name TEXT)",) if how == "foreign" else ("meta (k TEXT)", "jobs (id TEXT, name TEXT)")
            for table in tables:
                connection.execute(f"CREATE TABLE {table}")
        connection.close()
    return db.read_bytes()


@pytest.mark.parametrize("how", ["garbage", "truncated", "foreign", "foreign-named-as-ours"])
def test_a_damaged_or_foreign_results_db_is_a_clear_error_and_run_leaves_it_alone(tmp_path, capsys, how):
    """foreign-named-as-ours: another program's database with tables `meta` and `jobs` of other columns passed the
    check of the tables' names, then status, report and run ended in sqlite3's 'no such column' traceback."""
    out = _results(tmp_path / "out")
    before = _damaged(out, how)
    experiment = tmp_path / "experiment.json"
    experiment.write_text(__import__("json").dumps({**EXPERIMENT, "output_dir": str(out)}))
    for argv in (["status", str(out)], ["report", str(out), "--no-figures"], ["run", str(experiment), "--no-progress"]):
        capsys.readouterr()
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith(f"error: {out / 'experiment.db'} ") and "Traceback" not in err, err
        if how == "foreign":
            assert "is a SQLite database of something else (tables ['users'])" in err
        elif how == "foreign-named-as-ours":
            assert "is a SQLite database of something else (its table 'meta' has no column key, value; its " in err
        else:
            assert "cannot be read as an experiment's results" in err and "move it aside" in err
            assert ("the runner leaves it as it is" in err) == (argv[0] == "run")
    assert (out / "experiment.db").read_bytes() == before
    assert not (out / "runner.lock").exists()
    with pytest.raises(ResultsStoreError):
        ResultsStore(out)


@pytest.mark.parametrize(
    "edit, said",
    [
        (
            "UPDATE jobs SET metrics = '{\"best\": ', state = 'done'",
            "the metrics of job 'head/rte/seed-42' is not JSON",
        ),
        ("UPDATE jobs SET metrics = '[1, 2]', state = 'done'", "is a JSON list, not a JSON object"),
        ("UPDATE jobs SET depends_on = 'x'", "the depends_on of job 'head/rte/seed-42' is not JSON"),
        ("UPDATE meta SET value = '{' WHERE key = 'spec'", "the recorded experiment (meta 'spec') is not JSON"),
    ],
)
def test_a_damaged_record_in_the_results_db_is_a_clear_error(tmp_path, capsys, edit, said):
    """A record the store reads back as JSON that is none (the file edited by hand, or damaged inside an intact
    SQLite page) ended status and report in a JSONDecodeError or AttributeError traceback."""
    out = tmp_path / "out"
    spec = load_spec({**EXPERIMENT, "output_dir": str(out)})
    with ResultsStore(out) as store:
        store.bind(spec, plan_jobs(spec))
    with sqlite3.connect(out / "experiment.db") as connection:
        connection.execute(edit)
    connection.close()
    before = (out / "experiment.db").read_bytes()
    for argv in (["status", str(out)], ["report", str(out), "--no-figures"]):
        if argv[0] == "status" and "meta" in edit:
            continue  # status shows no more of the recorded experiment than its name and hash
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith(f"error: {out / 'experiment.db'}: ") and said in err and "Move it aside" in err, err
        assert len(err.splitlines()) == 1
    assert (out / "experiment.db").read_bytes() == before


def test_a_results_db_without_tables_yet(tmp_path, capsys):
    """A runner killed between creating experiment.db and its tables: status says so; run fills it."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "experiment.db").write_bytes(b"")
    assert main(["status", str(out)]) == 2
    assert "holds no results yet" in capsys.readouterr().err
    with ResultsStore(out) as store:
        spec = load_spec({**EXPERIMENT, "output_dir": str(out)})
        store.bind(spec, plan_jobs(spec))
        assert store.counts()["queued"] == 2


def test_a_results_db_locked_by_another_process_is_a_clear_error_and_nothing_changes(tmp_path):
    """A lock held past SQLite's wait (another program with the file open in a write transaction) was a raw
    sqlite3.OperationalError 'database is locked' from the write that met it (reads go on: the file is in WAL mode)."""
    folder = _results(tmp_path / "out")
    store = ResultsStore(folder)
    before = store.states()
    store._db.execute("PRAGMA busy_timeout = 50")  # not 30 s
    other = sqlite3.connect(folder / "experiment.db", isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        assert store.states() == before
        with pytest.raises(ResultsStoreError, match=r"another process held it locked for over 30 s.*nothing was"):
            store.requeue(list(before))
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert store.states() == before
    store.close()


def test_disk_full_is_recognised_on_python_3_10_without_sqlite3_SQLITE_FULL(monkeypatch):
    """sqlite3.SQLITE_FULL exists from Python 3.11 on; on 3.10 the check must not raise AttributeError."""
    from adapterfusion.experiments.store import _disk_full

    monkeypatch.delattr(sqlite3, "SQLITE_FULL", raising=False)
    assert _disk_full(sqlite3.OperationalError("database or disk is full"))
    assert not _disk_full(sqlite3.OperationalError("no such table: jobs"))


def _own_task_experiment(folder: Path, train_file: str) -> dict:
    (folder / f"{train_file}").write_text("text,label\na,pos\nb,neg\n")
    (folder / "dev.csv").write_text("text,label\nc,pos\nd,neg\n")
    task = {"name": "mine", "kind": "single", "text_fields": ["text"], "label_names": ["neg", "pos"]}
    (folder / "mine.json").write_text(
        json.dumps({**task, "data_files": {"train": train_file, "validation": "dev.csv"}})
    )
    experiment = {**EXPERIMENT, "tasks": ["mine", "rte"], "task_files": ["mine.json"], "output_dir": "out"}
    (folder / "exp.json").write_text(json.dumps(experiment))
    return load_spec(folder / "exp.json")


def test_editing_an_own_task_re_runs_its_jobs_and_keeps_the_others(tmp_path):
    """A job's hash covers its own task's description: a task pointed at new training data re-runs (with --force;
    it used to stay 'done' with results of the old data), jobs on built-in tasks are kept, and a record made before
    the hash covered the description keeps its results while the experiment is unchanged."""
    spec = _own_task_experiment(tmp_path, "train_v1.csv")
    assert run_experiment(spec, executor=DoneExecutor(), progress=False, report=False).ok
    with ResultsStore(spec.output_dir) as store:  # as a runner before this change recorded the own task's job
        legacy = config_hashes(spec, plan_jobs(spec), task_specs=False)
        with store._writing():
            store._db.execute(
                "UPDATE jobs SET config_hash = ? WHERE id = ?", (legacy["head/mine/seed-42"], "head/mine/seed-42")
            )
        assert store.bind(spec, plan_jobs(spec)) == []
    edited = _own_task_experiment(tmp_path, "train_v2.csv")
    with ResultsStore(edited.output_dir) as store:
        assert sorted(store.bind(edited, plan_jobs(edited), force=True)) == ["head/mine/seed-42"]


def test_a_done_fusion_whose_store_adapter_was_replaced_runs_again(tmp_path):
    """Its settings are unchanged, but the adapter it fused was re-trained by another experiment: evaluate refuses
    the fusion, and `run` used to keep it done (and in the report)."""
    from adapterfusion.serialization.pieces import piece_digest

    experiment = {**EXPERIMENT, "setups": ["st-a", "fusion-st-a"], "seeds": [1], "output_dir": str(tmp_path / "out")}
    spec = load_spec(experiment)
    assert run_experiment(spec, executor=DoneExecutor(), progress=False, report=False).ok
    adapter = tmp_path / "elsewhere" / "cb" / "adapter"
    adapter.mkdir(parents=True)
    (adapter / "adapter.safetensors").write_bytes(b"first weights")
    fusion = next(job for job in plan_jobs(spec) if job.id == "fusion-st-a/rte/seed-1")
    run_dir = fusion.run_dir(spec.output_dir)
    run_dir.mkdir(parents=True)
    record = {"entry": str(adapter.parent), "sha256": piece_digest(adapter)}
    (run_dir / "config.json").write_text(json.dumps({"fused_adapters": {"cb": record}}))
    again = run_experiment(spec, executor=DoneExecutor(), progress=False, report=False)
    assert again.ran == []
    (adapter / "adapter.safetensors").write_bytes(b"other weights")
    again = run_experiment(spec, executor=DoneExecutor(), progress=False, report=False)
    assert again.ran == ["fusion-st-a/rte/seed-1"]
