"""The runner end to end on real (tiny) training runs: every job done and recorded, a second run does nothing,
a killed run resumes without redoing finished jobs, and an output dir is never shared by accident."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import Future
from pathlib import Path

import pytest

from adapterfusion.cli import main
from adapterfusion.experiments import (
    ExperimentSpec,
    OutputDirLockedError,
    ResultsStore,
    RunnerLock,
    SpecMismatchError,
    load_spec,
    plan_jobs,
    run_experiment,
    runner,
)
from adapterfusion.experiments.errors import ExperimentSpecError
from adapterfusion.experiments.plan import config_hashes
from adapterfusion.experiments.processes import ProcessRecord
from adapterfusion.experiments.report import build_report
from adapterfusion.experiments.runner import describe_running
from adapterfusion.training import AdapterStore
from adapterfusion.training.progress import RunProgress, read_progress, write_progress
from tiny_experiments import FAST, DoneExecutor, tiny_experiment


@pytest.mark.slow
def test_end_to_end_on_a_process_pool_then_nothing_left(tmp_path, tiny_encoder_dir, capsys):
    out = tmp_path / "out"
    summary = run_experiment(tiny_experiment(tiny_encoder_dir, out), executor="process", workers=2, progress=False)
    assert summary.ok and len(summary.ran) == 6 and summary.counts["done"] == 6, summary
    with ResultsStore(out, readonly=True) as store:
        records = store.jobs()
    assert [r.state for r in records] == ["done"] * 6 and all(r.attempts == 1 for r in records)
    for record in records:
        assert record.metrics["best"] and (Path(record.run_dir) / "metrics.json").is_file()
        assert "train(" in (Path(record.run_dir) / "job.log").read_text()
    fusion = next(r for r in records if r.id == "fusion-st-a/rte/seed-1")
    assert fusion.started_at >= max(r.finished_at for r in records if r.id.startswith("st-a-rf16/"))
    assert AdapterStore(out / "adapters" / "st-a-rf16").has(str(tiny_encoder_dir), "sst2", "st-a", 1)

    again = run_experiment(tiny_experiment(tiny_encoder_dir, out), progress=False)
    assert again.ran == [] and len(again.skipped) == 6
    with ResultsStore(out, readonly=True) as store:
        assert [(r.id, r.finished_at, r.metrics) for r in store.jobs()] == [
            (r.id, r.finished_at, r.metrics) for r in records
        ]

    # Another experiment on this output dir is refused, by the API and by the CLI (exit code 2, no traceback).
    with pytest.raises(SpecMismatchError, match="--force"):
        run_experiment(tiny_experiment(tiny_encoder_dir, out, seeds=[1, 2]), progress=False)
    other = tmp_path / "other.json"
    other.write_text(json.dumps(tiny_experiment(tiny_encoder_dir, out, tasks=["rte"], setups=["head", "st-a"])))
    capsys.readouterr()
    assert main(["run", str(other), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err and "--force" in err

    # A live runner's lock refuses a second runner; a dead runner's lock is taken over.
    with RunnerLock(out):
        with pytest.raises(OutputDirLockedError, match=f"pid {os.getpid()}"):
            run_experiment(tiny_experiment(tiny_encoder_dir, out), progress=False)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    lock = {"pid": int(dead.stdout), "host": os.uname().nodename, "started_at": 0}
    (out / "runner.lock").write_text(json.dumps(lock))
    assert run_experiment(tiny_experiment(tiny_encoder_dir, out), progress=False).ran == []
    assert not (out / "runner.lock").exists()

    assert main(["status", str(out)]) == 0
    table = capsys.readouterr().out
    assert "fusion-st-a/sst2/seed-1  done" in table and "6 done" in table


def _rows(db: Path, query: str) -> list[tuple]:
    """The rows `query` selects from the runner's database; none before the runner has created it or its tables."""
    if not db.is_file():
        return []
    with sqlite3.connect(db, timeout=30) as connection:
        try:
            return connection.execute(query).fetchall()
        except sqlite3.OperationalError:  # the runner has created the file but not yet its tables
            return []


def _done(db: Path) -> dict[str, tuple]:
    rows = _rows(db, "SELECT id, finished_at, metrics FROM jobs WHERE state = 'done'")
    return {row[0]: row[1:] for row in rows}


def _running(db: Path) -> int:
    return len(_rows(db, "SELECT id FROM jobs WHERE state = 'running'"))


@pytest.mark.slow
def test_kill_9_mid_run_then_resume_redoes_only_unfinished_jobs(tmp_path, tiny_encoder_dir, capsys):
    out = tmp_path / "out"
    experiment = tmp_path / "exp.json"
    experiment.write_text(json.dumps(tiny_experiment(tiny_encoder_dir, out, setups=["st-a", "fusion-st-a"])))
    child = subprocess.Popen(
        [sys.executable, "-m", "adapterfusion.cli", "run", str(experiment), "--no-progress"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    # Kill once a job has finished and the next one is running: on a loaded machine the runner can take a while
    # between marking one job done and starting the next, and a kill in that gap interrupts nothing.
    deadline = time.time() + 120
    while time.time() < deadline and child.poll() is None:
        if _done(out / "experiment.db") and _running(out / "experiment.db"):
            break
        time.sleep(0.05)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    finished = _done(out / "experiment.db")
    assert 1 <= len(finished) < 4, "the run should have been killed after its first job"
    with ResultsStore(out, readonly=True) as store:
        assert "running" in store.counts() and store.counts()["running"] == 1  # the job the kill interrupted
    assert main(["status", str(out)]) == 0
    assert "1 interrupted" in capsys.readouterr().out

    summary = run_experiment(experiment, progress=False)  # the dead runner's lock is stale
    assert summary.ok and sorted(summary.skipped) == sorted(finished) and len(summary.ran) == 4 - len(finished)
    after = _done(out / "experiment.db")
    assert len(after) == 4 and all(after[i] == finished[i] for i in finished)  # finished jobs not re-run
    with ResultsStore(out, readonly=True) as store:
        attempts = {r.id: r.attempts for r in store.jobs()}
    assert [attempts[i] for i in finished] == [1] * len(finished) and sorted(attempts.values())[-1] == 2


class _ScriptedExecutor:
    """Succeeds or fails jobs by id without training, to test the scheduling alone."""

    capacity = 2

    def __init__(self, fail: set[str]) -> None:
        self.fail, self.submitted = fail, []

    def submit(self, payload):
        self.submitted.append(payload.job_id)
        future = Future()
        future.set_result(
            {"ok": False, "error": "boom"}
            if payload.job_id in self.fail
            else {"ok": True, "metrics": {"best": {"eval_accuracy": 0.5}}}
        )
        return future

    def shutdown(self):
        pass


def test_a_failed_job_blocks_only_its_dependents_and_is_retried_next_run(tmp_path, tiny_encoder_dir):
    spec = tiny_experiment(tiny_encoder_dir, tmp_path / "out")
    executor = _ScriptedExecutor(fail={"st-a-rf16/rte/seed-1"})
    summary = run_experiment(spec, executor=executor, progress=False)
    assert list(summary.failed) == ["st-a-rf16/rte/seed-1"]
    assert sorted(summary.blocked) == ["fusion-st-a/rte/seed-1", "fusion-st-a/sst2/seed-1"]
    assert "st-a-rf16/rte/seed-1 (failed)" in summary.blocked["fusion-st-a/rte/seed-1"]
    assert sorted(summary.ran) == ["head/rte/seed-1", "head/sst2/seed-1", "st-a-rf16/sst2/seed-1"]
    retry = _ScriptedExecutor(fail=set())
    summary = run_experiment(spec, executor=retry, progress=False)
    assert summary.ok
    assert retry.submitted == ["st-a-rf16/rte/seed-1", "fusion-st-a/rte/seed-1", "fusion-st-a/sst2/seed-1"]


_HOLD_LOCK = """
import sys
from adapterfusion.training.run_lock import hold_lock
with hold_lock(sys.argv[1], "busy"):
    print("held", flush=True)
    sys.stdin.read()
"""


def test_a_job_whose_run_folder_another_process_trains_fails_and_its_files_stay(tmp_path, tiny_encoder_dir):
    """The runner cleared each job's run folder before it ran, run.lock and files of a train() another process ran
    there included; now that job fails naming the process, and runs once that process is done."""
    spec = tiny_experiment(tiny_encoder_dir, tmp_path / "out")
    loaded = ExperimentSpec.from_dict(spec)
    run_dir = next(j for j in plan_jobs(loaded) if j.id == "head/rte/seed-1").run_dir(loaded.output_dir)
    run_experiment(spec, executor=_ScriptedExecutor(fail={"head/rte/seed-1"}), progress=False)  # retried next run
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "metrics.json").write_text("{}")
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_LOCK, str(run_dir / "run.lock")], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
        summary = run_experiment(spec, executor=_ScriptedExecutor(fail=set()), progress=False)
    finally:
        holder.communicate(timeout=30)
    assert list(summary.failed) == ["head/rte/seed-1"]
    assert f"is being trained by process {holder.pid}" in summary.failed["head/rte/seed-1"]
    assert (run_dir / "metrics.json").read_text() == "{}"
    retry = _ScriptedExecutor(fail=set())
    assert run_experiment(spec, executor=retry, progress=False).ok and retry.submitted[0] == "head/rte/seed-1"


def test_force_after_changing_the_adapters_settings_re_runs_the_fusions_that_fuse_them(tmp_path, tiny_encoder_dir):
    spec = tiny_experiment(tiny_encoder_dir, tmp_path / "out")
    assert run_experiment(spec, executor=_ScriptedExecutor(fail=set()), progress=False).ok
    changed = {**spec, "setups": ["head", {"name": "st-a", "learning_rate": 5e-3}, "fusion-st-a"]}
    rerun = _ScriptedExecutor(fail=set())
    summary = run_experiment(changed, executor=rerun, force=True, progress=False)
    assert summary.ok
    assert summary.rerun["st-a-rf16/rte/seed-1"] == "its settings changed"
    assert summary.rerun["fusion-st-a/sst2/seed-1"].startswith("it needs st-a-rf16/")
    assert sorted(summary.rerun) == sorted(rerun.submitted) and "re-run  st-a-rf16/sst2/seed-1" in str(summary)
    assert rerun.submitted == [
        "st-a-rf16/rte/seed-1",
        "st-a-rf16/sst2/seed-1",
        "fusion-st-a/rte/seed-1",
        "fusion-st-a/sst2/seed-1",
    ]  # the head jobs are kept


def test_changing_only_logging_and_checkpoint_keeping_settings_re_runs_nothing(tmp_path, tiny_encoder_dir):
    """logging_steps, save_total_limit, gradient_checkpointing and the rest of resume.FREE_ON_RESUME change how a
    run is logged or kept, not its result: the experiment stays the same one (no --force) and every job stays done.
    A record made while they counted in the hashes is kept too; a setting that changes results still re-runs."""
    spec = tiny_experiment(tiny_encoder_dir, tmp_path / "out", setups=["head", {"name": "st-a", "logging_steps": 5}])
    assert run_experiment(spec, executor=_ScriptedExecutor(fail=set()), progress=False).ok
    free = {"name": "st-a", "logging_steps": 1, "save_total_limit": 2, "gradient_checkpointing": True}
    relogged = {**spec, "setups": ["head", free], "task_training": {"rte": {"report_to": "none"}}}
    again = _ScriptedExecutor(fail=set())
    summary = run_experiment(relogged, executor=again, progress=False)
    assert summary.ok and again.submitted == [] and not summary.rerun, summary

    loaded = load_spec(relogged)
    jobs = plan_jobs(loaded)
    with sqlite3.connect(tmp_path / "out" / "experiment.db") as db:  # as a runner recorded them while they counted
        db.execute("UPDATE meta SET value = ? WHERE key = 'spec_hash'", (loaded.spec_hash(free_settings=True),))
        for job_id, digest in config_hashes(loaded, jobs, free_settings=True).items():
            db.execute("UPDATE jobs SET config_hash = ? WHERE id = ?", (digest, job_id))
    with ResultsStore(tmp_path / "out") as store:
        assert store.bind(loaded, jobs) == []

    retrained = {**relogged, "setups": ["head", {**free, "learning_rate": 5e-3}]}
    with pytest.raises(SpecMismatchError):
        run_experiment(retrained, executor=_ScriptedExecutor(fail=set()), progress=False)


def test_a_store_of_an_older_runner_keeps_only_the_fusions_whose_adapters_finished_before_them(
    tmp_path, tiny_encoder_dir
):
    """Older runners hashed a fusion job with its dependencies' ids only; such a record is upgraded in place when
    its adapters finished before it started, and re-run when one of them was re-run since (the stale fusion)."""
    spec = load_spec(
        tiny_experiment(
            tiny_encoder_dir,
            tmp_path / "out",
            tasks=["rte", "sst2", "cb"],
            setups=["st-a", "fusion-st-a"],
            fusion={"rte": ["rte", "cb"], "sst2": ["rte", "sst2"], "cb": ["cb", "rte"]},
        )
    )
    jobs = plan_jobs(spec)
    assert run_experiment(spec, executor=_ScriptedExecutor(fail=set()), progress=False).ok
    with sqlite3.connect(tmp_path / "out" / "experiment.db") as db:  # as an older runner recorded them
        for job in jobs:
            db.execute("UPDATE jobs SET config_hash = ? WHERE id = ?", (job.config_hash(spec), job.id))
        db.execute("UPDATE jobs SET finished_at = 1e12 WHERE id = 'st-a-rf16/sst2/seed-1'")  # re-run after the fusions
    with ResultsStore(tmp_path / "out") as store:
        assert store.bind(spec, jobs) == ["fusion-st-a/sst2/seed-1"]
        states = store.states()
    assert states["fusion-st-a/rte/seed-1"] == "done" and states["fusion-st-a/sst2/seed-1"] == "queued"
    with ResultsStore(tmp_path / "out") as store:
        assert store.bind(spec, jobs) == []  # upgraded: the next bind finds the current hashes


@pytest.mark.slow
def test_mt_a_then_fusion_mt_a_end_to_end_reported_per_task_then_nothing_left(tmp_path, tiny_encoder_dir, capsys):
    out = tmp_path / "out"
    experiment = tiny_experiment(
        tiny_encoder_dir, out, setups=["head", {"name": "mt-a", "max_steps": 6}, "fusion-mt-a"]
    )
    summary = run_experiment(experiment, progress=False)
    assert summary.ok and summary.ran == [
        "mt-a/all/seed-1",
        "head/rte/seed-1",
        "head/sst2/seed-1",
        "fusion-mt-a/rte/seed-1",
        "fusion-mt-a/sst2/seed-1",
    ], summary
    with ResultsStore(out, readonly=True) as store:
        records = {r.id: r for r in store.jobs()}
    mt = records["mt-a/all/seed-1"]
    assert (mt.task, mt.setup) == ("all", "mt-a") and Path(mt.run_dir) == out / "runs/mt-a/mt-a/mt-a/seed-1"
    per_task = mt.task_metrics()
    assert sorted(per_task) == ["rte", "sst2"]
    # the store's per-task records are what the MT-A run wrote in its metrics.json
    written = json.loads((Path(mt.run_dir) / "metrics.json").read_text())
    assert per_task == {t: {"metric_for_best": "accuracy", "best": written["best"][t]} for t in ("rte", "sst2")}
    assert "train_multitask(['rte', 'sst2']" in (Path(mt.run_dir) / "job.log").read_text()
    # 2 x 16 training examples, batch 8: 4 steps per epoch, so max_steps 6 plans 2 epochs.
    assert read_progress(mt.run_dir).describe() == "epoch 2/2 eval"
    for task in ("rte", "sst2"):
        fusion = records[f"fusion-mt-a/{task}/seed-1"]
        assert fusion.depends_on == ("mt-a/all/seed-1",) and fusion.started_at >= mt.finished_at
        config = json.loads((Path(fusion.run_dir) / "config.json").read_text())
        assert Path(config["encoder"]) == Path(mt.run_dir) / "encoder"  # fused on the encoder MT-A fine-tuned
        assert AdapterStore(out / "adapters" / "mt-a").has(str(tiny_encoder_dir), task, "mt-a", 1)
    assert read_progress(records["head/rte/seed-1"].run_dir).describe() == "epoch 1/1 eval"

    report = build_report(out)
    table1 = report.table("table1")
    assert table1.columns == ("head", "mt-a", "fusion-mt-a")
    for task in ("rte", "sst2"):
        assert table1.cell(task, "mt-a").value == pytest.approx(100 * per_task[task]["best"]["accuracy"])
        fused = records[f"fusion-mt-a/{task}/seed-1"].metrics
        assert table1.cell(task, "fusion-mt-a").value == pytest.approx(100 * fused["best"]["accuracy"])
    assert report.table("table2").columns == ("fusion-mt-a vs mt-a",)
    assert "| rte | " in (out / "report" / "tables.md").read_text()

    again = run_experiment(experiment, progress=False)
    assert again.ran == [] and len(again.skipped) == 5
    capsys.readouterr()
    assert main(["status", str(out)]) == 0
    table = capsys.readouterr().out
    assert "mt-a/all/seed-1" in table and "rte accuracy=" in table and "sst2 accuracy=" in table and "5 done" in table


def test_the_progress_display_shows_each_running_jobs_epoch_as_it_moves(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    assert describe_running("st-a-rf16/rte/seed-1", run_dir) == "st-a-rf16/rte/seed-1"  # nothing written yet
    monkeypatch.setattr(runner, "POLL_SECONDS", 0.02)
    display = runner._Progress(total=3, done=1, name="x")
    try:
        display.started("st-a-rf16/rte/seed-1", run_dir)
        write_progress(run_dir, RunProgress(epoch=2, epochs=3))
        deadline = time.time() + 10
        while "epoch 2/3" not in display._bar.postfix and time.time() < deadline:
            time.sleep(0.02)
        assert "now=st-a-rf16/rte/seed-1 epoch 2/3" in display._bar.postfix and "running=1" in display._bar.postfix
        display.finished("st-a-rf16/rte/seed-1", "done")
        assert "now" not in display._bar.postfix and "left=1" in display._bar.postfix
    finally:
        display.close()
    assert not display._ticker.is_alive()


def _status(out: Path, capsys) -> str:
    capsys.readouterr()
    assert main(["status", str(out)]) == 0
    return capsys.readouterr().out


def test_status_shows_a_running_jobs_epoch_and_an_interrupted_job_once_its_runner_is_gone(
    tmp_path, tiny_encoder_dir, capsys
):
    out = tmp_path / "out"
    spec = load_spec(tiny_experiment(tiny_encoder_dir, out, setups=["head"], tasks=["rte"]))
    jobs = plan_jobs(spec)
    with RunnerLock(out), ResultsStore(out) as store:  # as a live runner holds it
        store.bind(spec, jobs)
        store.mark_running(jobs[0].id, str(tmp_path / "run"))
        write_progress(tmp_path / "run", RunProgress(epoch=1, epochs=4, phase="evaluating"))
        shown = _status(out, capsys)
        assert "head/rte/seed-1  running" in shown and "epoch 1/4 eval" in shown and "1 running" in shown
    shown = _status(out, capsys)  # the runner stopped (Ctrl-C) and released its lock
    assert "head/rte/seed-1  interrupted  1" in shown and "1 interrupted" in shown and " running" not in shown
    assert "stopped at epoch 1/4 eval; runner gone; `adapterfusion run` re-runs it" in shown

    me = ProcessRecord.current()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    for owner, state in [
        ({**me.to_dict(), "pid": int(dead.stdout)}, "interrupted"),  # killed
        ({**me.to_dict(), "boot_id": "another-boot"}, "interrupted"),  # the machine rebooted since
        ({**me.to_dict(), "start_time": (me.start_time or 0) + 1}, "interrupted"),  # pid reused
        ({**me.to_dict(), "host": "another-host"}, "running"),  # cannot tell from here
        (me.to_dict(), "running"),
    ]:
        (out / "runner.lock").write_text(json.dumps(owner))
        assert f"head/rte/seed-1  {state}" in _status(out, capsys), owner


def test_ctrl_c_leaves_the_job_it_stopped_interrupted_and_the_next_run_re_runs_it(tmp_path, tiny_encoder_dir, capsys):
    class _CtrlC(_ScriptedExecutor):
        capacity = 1  # as the inprocess executor

        def submit(self, payload):
            if payload.job_id == "head/sst2/seed-1":
                raise KeyboardInterrupt  # as Ctrl-C while the inprocess executor runs the job
            return super().submit(payload)

    spec = tiny_experiment(tiny_encoder_dir, tmp_path / "out", setups=["head"])
    with pytest.raises(KeyboardInterrupt):
        run_experiment(spec, executor=_CtrlC(fail=set()), progress=False)
    shown = _status(tmp_path / "out", capsys)
    assert "head/rte/seed-1   done" in shown and "head/sst2/seed-1  interrupted" in shown
    again = _ScriptedExecutor(fail=set())
    assert run_experiment(spec, executor=again, progress=False).ok and again.submitted == ["head/sst2/seed-1"]


def test_a_clone_elsewhere_records_the_same_experiment_file_and_report(tmp_path):
    """experiment.json and the report name their paths relative to the experiment file, so running the same
    experiment file in two clones (other absolute paths, other working dirs) writes the same bytes, and an output
    dir moved with its clone is still this experiment's."""
    written = []
    for clone in (tmp_path / "one", tmp_path / "elsewhere" / "two"):
        for task in ("rte", "sst2"):  # the runner checks that data_dir holds a folder per task; DoneExecutor reads none
            (clone / "data" / task).mkdir(parents=True)
        experiment = clone / "examples" / "tiny.json"
        experiment.parent.mkdir()
        spec = {**tiny_experiment(None, Path("results/tiny"), setups=["head"]), "encoder": None, "data_dir": "../data"}
        experiment.write_text(json.dumps(spec))
        summary = run_experiment(experiment, executor=DoneExecutor(), progress=False)
        assert summary.ok and summary.output_dir == clone / "examples" / "results" / "tiny"
        recorded = json.loads((summary.output_dir / "experiment.json").read_text())
        assert (recorded["data_dir"], recorded["output_dir"], recorded["source"]) == (
            "../data",
            "results/tiny",
            "../../tiny.json",
        )
        report = (summary.output_dir / "report" / "tables.md").read_text()
        assert "jobs done in `results/tiny`" in report
        written.append([(summary.output_dir / name).read_bytes() for name in ("experiment.json", "report/tables.md")])
    assert written[0] == written[1]
    moved = tmp_path / "moved"
    (tmp_path / "one").rename(moved)
    again = run_experiment(moved / "examples" / "tiny.json", executor=DoneExecutor(), progress=False)
    assert again.ok and again.ran == [] and len(again.skipped) == 2  # the same experiment, its jobs done

    # An output dir an older runner made (digests of the absolute paths) is still this experiment's, its jobs done.
    spec = load_spec(moved / "examples" / "tiny.json")
    older = config_hashes(spec, plan_jobs(spec), absolute_paths=True)
    with sqlite3.connect(again.output_dir / "experiment.db") as db:
        db.execute("UPDATE meta SET value = ? WHERE key = 'spec_hash'", (spec.spec_hash(absolute_paths=True),))
        db.executemany("UPDATE jobs SET config_hash = ? WHERE id = ?", [(h, i) for i, h in older.items()])
    assert spec.spec_hash(absolute_paths=True) != spec.spec_hash()
    assert run_experiment(spec, executor=DoneExecutor(), progress=False).ran == []


def test_running_its_record_resumes_the_experiment_without_its_file(tmp_path, tiny_encoder_dir, capsys):
    """`adapterfusion run <output_dir>/experiment.json` (the runner's record: resolved variants, recorded-only keys,
    paths relative to the experiment file) was refused ('source: unknown key'). It now repeats the experiment from
    the record alone: into the same output dir, where the failed job runs again and the finished ones are kept."""
    experiment = tmp_path / "examples" / "tiny.json"
    experiment.parent.mkdir()
    experiment.write_text(json.dumps(tiny_experiment(tiny_encoder_dir, "results/tiny")))
    first = run_experiment(experiment, executor=_ScriptedExecutor(fail={"fusion-st-a/rte/seed-1"}), progress=False)
    assert list(first.failed) == ["fusion-st-a/rte/seed-1"] and len(first.ran) == 5
    record = first.output_dir / "experiment.json"
    written = record.read_bytes()
    with ResultsStore(first.output_dir, readonly=True) as store:
        done = {r.id: (r.finished_at, r.metrics) for r in store.jobs() if r.state == "done"}
    experiment.unlink()

    again = _ScriptedExecutor(fail=set())
    summary = run_experiment(record, executor=again, progress=False)
    assert summary.ok and summary.output_dir == first.output_dir and again.submitted == ["fusion-st-a/rte/seed-1"]
    assert sorted(summary.skipped) == sorted(done) and record.read_bytes() == written
    with ResultsStore(first.output_dir, readonly=True) as store:
        assert {r.id: (r.finished_at, r.metrics) for r in store.jobs() if r.id in done} == done
    capsys.readouterr()
    assert main(["run", str(record), "--no-progress"]) == 0
    assert "0 job(s) run, 6 already done" in capsys.readouterr().out


def test_fp16_on_a_machine_without_cuda_is_refused_before_any_job_then_runs_once_fixed(
    tmp_path, tiny_encoder_dir, monkeypatch
):
    """fp16 under a local executor on a CPU machine failed every job on its own (train() refuses it) and blocked the
    fusions; the runner now refuses it before recording anything, so the fixed file runs without --force. Under an
    executor of the user's own (or ray: GPU nodes) it is left to the jobs."""
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    spec = tiny_experiment(tiny_encoder_dir, tmp_path / "out", training={**FAST, "fp16": True})
    with pytest.raises(ExperimentSpecError, match=r"fp16: true, which needs a CUDA GPU.*bf16: true"):
        run_experiment(spec, executor="inprocess", progress=False)
    assert not (tmp_path / "out" / "experiment.json").exists()
    fixed = tiny_experiment(tiny_encoder_dir, tmp_path / "out")
    assert run_experiment(fixed, executor=DoneExecutor(), progress=False).ok
    elsewhere = tiny_experiment(tiny_encoder_dir, tmp_path / "other", training={**FAST, "fp16": True})
    assert run_experiment(elsewhere, executor=DoneExecutor(), progress=False).ok


def test_an_edited_experiment_file_is_refused_naming_what_differs(tmp_path, tiny_encoder_dir):
    """The refusal gave two spec hashes and nothing a user could act on; it now names the keys that differ."""
    assert run_experiment(tiny_experiment(tiny_encoder_dir, tmp_path / "out"), executor=DoneExecutor()).ok
    edited = tiny_experiment(tiny_encoder_dir, tmp_path / "out", seeds=[1, 2], training={**FAST, "max_steps": 3})
    with pytest.raises(SpecMismatchError, match=r"which differs in seeds, setups or training .*; .*--force"):
        run_experiment(edited, executor=DoneExecutor(), progress=False)


def test_a_data_dir_without_a_task_folder_is_refused_before_the_output_dir_is_made(tmp_path):
    """Each job of a task reads <data_dir>/<task>/: a data_dir that lacks one (or a missing data_dir) failed every
    job of that task after the output dir was written; now the runner refuses it first. A task with data_files of
    its own does not read data_dir, so it needs no folder there."""
    from adapterfusion.experiments.jobs import check_data_folders

    (tmp_path / "data" / "rte").mkdir(parents=True)
    experiment = tiny_experiment(None, tmp_path / "out", setups=["head"], data_dir=str(tmp_path / "data"))
    with pytest.raises(ExperimentSpecError, match=r"holds no folder for task\(s\) \['sst2'\] \(its folders: \['rte'\]"):
        run_experiment({**experiment, "encoder": None}, executor=DoneExecutor(), progress=False)
    with pytest.raises(ExperimentSpecError, match=r"data_dir: the data folder .*nowhere' does not exist"):
        run_experiment(
            {**experiment, "encoder": None, "data_dir": str(tmp_path / "nowhere")},
            executor=DoneExecutor(),
            progress=False,
        )
    assert not (tmp_path / "out").exists()
    check_data_folders(str(tmp_path / "data"), ["rte", "reviews"], {"reviews": {"data_files": {"train": "t.csv"}}})


@pytest.mark.parametrize("value", ["nowhere", "a-file"])
def test_an_adapterfusion_data_dir_that_is_no_folder_is_refused_before_the_output_dir_is_made(
    tmp_path, monkeypatch, value
):
    """$ADAPTERFUSION_DATA_DIR mistyped (or naming a file): each task reads it only if it holds the task's folder,
    so every job passed it over for the Hub without a word (and, offline, failed saying to set it)."""
    from adapterfusion.experiments.jobs import check_data_folders

    (tmp_path / "a-file").write_text("not a folder")
    monkeypatch.setenv("ADAPTERFUSION_DATA_DIR", str(tmp_path / value))
    experiment = tiny_experiment(None, tmp_path / "out", setups=["head"])
    with pytest.raises(ExperimentSpecError, match=r"\$ADAPTERFUSION_DATA_DIR='.*': the data folder .* Or unset it"):
        run_experiment({**experiment, "encoder": None, "data_dir": None}, executor=DoneExecutor(), progress=False)
    assert not (tmp_path / "out").exists()
    check_data_folders(None, ["reviews"], {"reviews": {"data_files": {"train": "t.csv"}}})  # reads no data folder
    monkeypatch.setenv("ADAPTERFUSION_DATA_DIR", "")  # set empty: unset
    check_data_folders(None, ["rte"], {})
