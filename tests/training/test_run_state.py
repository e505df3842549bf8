"""A run folder's state is judged in one place (training/run_state.py); a lock only counts while its holder lives."""

import json
import subprocess
import sys

import pytest

from adapterfusion.training import TrainingError
from adapterfusion.training.run_files import LOCK_FILE
from adapterfusion.training.run_lock import hold_lock
from adapterfusion.training.run_state import RunState, check_can_train, claimed_run, run_state


def test_states_from_what_the_folder_holds(tmp_path):
    run = tmp_path / "rte" / "st-a" / "seed-1"
    assert run_state(run).state is RunState.ABSENT
    run.mkdir(parents=True)
    (run / LOCK_FILE).write_text("999999999\n")  # left by a process that died: it blocks nothing
    assert run_state(run).state is RunState.ABSENT
    (run / "config.json").write_text("{}")
    assert run_state(run).state is RunState.UNFINISHED
    (run / "metrics.json").write_text(json.dumps({"best": {}}))
    assert run_state(run).state is RunState.FINISHED


def test_a_stale_lock_of_a_dead_process_does_not_block_the_next_run(tmp_path):
    run = tmp_path / "run"
    code = f"import fcntl, os; fd = os.open({str(run / LOCK_FILE)!r}, os.O_RDWR | os.O_CREAT); "
    code += "fcntl.flock(fd, fcntl.LOCK_EX); os.write(fd, b'%d' % os.getpid()); os._exit(9)"
    run.mkdir()
    subprocess.run([sys.executable, "-c", code], check=False)
    assert (run / LOCK_FILE).is_file() and run_state(run).state is RunState.ABSENT
    with claimed_run(run, [], "rte/st-a seed 1", overwrite=False, resume=False):
        assert run_state(run).state is RunState.RUNNING  # ours now: this process's pid
        assert not run_state(run).running_elsewhere
    assert not (run / LOCK_FILE).exists()


def test_a_held_lock_refuses_a_second_claim_and_resume_does_not_retrain_a_finished_run(tmp_path):
    run = tmp_path / "run"
    with hold_lock(run / LOCK_FILE, "busy"):
        with pytest.raises(TrainingError, match="busy"):
            with hold_lock(run / LOCK_FILE, "busy"):
                pass
    (run / "metrics.json").write_text("{}")
    with pytest.raises(TrainingError, match="finished run"):
        check_can_train(run_state(run), [], "rte/st-a seed 1", overwrite=False, resume=True)
    check_can_train(run_state(run), [], "rte/st-a seed 1", overwrite=True)


def test_overwrite_refuses_a_store_entry_holding_a_users_file_before_any_work(tmp_path):
    """The check the store makes when it writes the entry, made before the earlier run is replaced: otherwise the
    new run trained, replaced the finished one, and only then found the file (the run and the store disagreed)."""
    run, entry = tmp_path / "run", tmp_path / "store" / "enc" / "rte" / "st-a" / "seed-1"
    run.mkdir()
    (run / "metrics.json").write_text("{}")
    entry.mkdir(parents=True)
    (entry / "notes.txt").write_text("mine")
    with pytest.raises(TrainingError, match=r"holds 'notes.txt', which we did not write"):
        check_can_train(run_state(run), [entry], "rte/st-a seed 1", overwrite=True)
    assert (entry / "notes.txt").read_text() == "mine" and (run / "metrics.json").is_file()
