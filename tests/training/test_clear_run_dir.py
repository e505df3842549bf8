"""clear_run_dir, which the experiment runner calls before a job runs again, removes only what a run wrote."""

from __future__ import annotations

from pathlib import Path

from adapterfusion.training.run import RUN_ENTRIES, clear_run_dir


def _run_folder(tmp_path: Path) -> Path:
    run = tmp_path / "seed-1"
    for name in RUN_ENTRIES:
        if "." in name:
            (run / name).parent.mkdir(parents=True, exist_ok=True)
            (run / name).write_text("{}")
        else:
            (run / name).mkdir(parents=True)
            (run / name / "weights.safetensors").write_bytes(b"x")
    (run / "job.log").write_text("log")
    (run / "notes.txt").write_text("what the user wrote beside the run")
    (run / "plots").mkdir()
    (run / "plots" / "mine.png").write_bytes(b"png")
    return run


def test_clear_run_dir_removes_the_run_files_and_keeps_what_the_user_put_there(tmp_path):
    run = _run_folder(tmp_path)
    clear_run_dir(run, also=("job.log",))
    assert sorted(p.relative_to(run).as_posix() for p in run.rglob("*")) == ["notes.txt", "plots", "plots/mine.png"]


def test_clear_run_dir_for_a_resume_keeps_checkpoints_and_config(tmp_path):
    run = _run_folder(tmp_path)
    clear_run_dir(run, keep_checkpoints=True)
    left = sorted(p.name for p in run.iterdir())
    assert left == sorted(["checkpoints", "config.json", "job.log", "notes.txt", "plots"])


def test_clear_run_dir_of_a_missing_folder_does_nothing(tmp_path):
    clear_run_dir(tmp_path / "absent")
    assert not (tmp_path / "absent").exists()
