"""A run folder's state is judged in one place (training/run_state.py); a lock only counts while its holder lives."""

import errno
import json
import os
import subprocess
import sys
from unittest import mock

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


def _refused_once(real_open):
    """os.open that refuses writing the lock file the first time, as for a lock another user's run left (0644)."""
    refused = []

    def fake_open(path, flags, *args):
        if str(path).endswith(LOCK_FILE) and flags & os.O_RDWR and not refused:
            refused.append(path)
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args)

    return fake_open, refused


def test_a_stale_lock_this_user_may_not_write_is_removed_and_a_held_one_refuses(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / LOCK_FILE).write_text("999999999\n")  # another user's run, killed: readable, not writable
    fake_open, refused = _refused_once(os.open)
    with mock.patch("adapterfusion.training.run_lock.os.open", fake_open):
        with hold_lock(run / LOCK_FILE, "busy (pid {pid})"):
            assert refused and (run / LOCK_FILE).read_text() == f"{os.getpid()}\n"
    holder = subprocess.Popen(  # another user's live run holds it: refused, and the lock stays
        [sys.executable, "-c", f"import fcntl, os, sys; fd = os.open({str(run / LOCK_FILE)!r}, os.O_RDWR | os.O_CREAT)"
         "; fcntl.flock(fd, fcntl.LOCK_EX); os.write(fd, b'4242'); print('held', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        fake_open, refused = _refused_once(os.open)
        with mock.patch("adapterfusion.training.run_lock.os.open", fake_open):
            with pytest.raises(TrainingError, match=r"busy \(pid 4242\)"):
                with hold_lock(run / LOCK_FILE, "busy (pid {pid})"):
                    pass
        assert (run / LOCK_FILE).exists()
    finally:
        holder.communicate(timeout=10)


def test_a_lock_path_that_is_a_link_or_a_folder_is_refused_untouched(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("the user's notes\n")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / LOCK_FILE).symlink_to(notes)
    (tmp_path / "b" / LOCK_FILE).mkdir(parents=True)
    for run, what in ((tmp_path / "a", "a symbolic link"), (tmp_path / "b", "a folder")):
        with pytest.raises(TrainingError, match=f"is {what}"):
            with claimed_run(run, [], "rte/st-a seed 1", overwrite=False, resume=False):
                pass
    assert notes.read_text() == "the user's notes\n" and (tmp_path / "b" / LOCK_FILE).is_dir()


def test_a_run_whose_lock_was_deleted_by_hand_leaves_the_next_runs_lock(tmp_path):
    lock = tmp_path / "run" / LOCK_FILE
    with hold_lock(lock, "busy (pid {pid})"):
        lock.unlink()  # taken for a stale one by hand
        with hold_lock(lock, "busy (pid {pid})"):  # the next run (here: in this process) takes the folder
            pass
        lock.write_text("4242\n")  # as the next run's lock, which the first run's end must leave
    assert lock.read_text() == "4242\n"


def test_a_file_system_without_flock_falls_back_to_the_pid_in_the_lock(tmp_path):
    run = tmp_path / "run"
    no_flock = OSError(errno.ENOLCK, "No locks available")
    with mock.patch("adapterfusion.training.run_lock.fcntl.flock", side_effect=no_flock):
        with claimed_run(run, [], "rte/st-a seed 1", overwrite=False, resume=False):
            assert run_state(run).state is RunState.RUNNING and not run_state(run).running_elsewhere
        assert not (run / LOCK_FILE).exists()
        (run / LOCK_FILE).write_text("1\n")  # a live process's pid (init): another run trains it
        with pytest.raises(TrainingError, match=r"being trained right now by another process \(pid 1\)"):
            with claimed_run(run, [], "rte/st-a seed 1", overwrite=False, resume=False):
                pass
