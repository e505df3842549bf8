"""What a writer killed mid-write leaves behind (temp files of atomic writes, a store entry's temp folders) is
removed by the next writer that may remove it, and nothing else is: only the temp files a writer recorded in its
journal before creating them, never a file that merely looks like one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import adapterfusion as af
from adapterfusion.experiments import OutputDirLockedError, ResultsStore, run_experiment, writers
from adapterfusion.experiments.processes import ProcessRecord
from adapterfusion.io.atomic import (
    WRITING_MARKER,
    atomic_write_json,
    journal_temp_files,
    read_journal,
    remove_recorded_temp_files,
    temp_path,
)
from adapterfusion.training import AdapterStore
from tiny_experiments import DoneExecutor
from tiny_models import tiny_encoder

EXPERIMENT = {
    "name": "tiny",
    "tasks": ["rte"],
    "setups": ["head"],
    "encoder": "some/hub-id",
    "training": {"max_steps": 1},
}
FOREIGN = (".notes.abcdefgh.tmp", "runs/head/.keep.k2j_x9q0.tmp", "adapters/.x.12345678.tmp/f")  # the user's own


def _touch(path: Path, text: str = "x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_the_sweep_removes_only_recorded_temp_files(tmp_path):
    journal = tmp_path / "w.journal"
    with journal_temp_files(journal, {"pid": 1}):
        atomic_write_json(tmp_path / "done.json", {})  # recorded, renamed away: nothing left to remove
        stale = [_touch(temp_path(tmp_path / "metrics.json")), _touch(temp_path(tmp_path / "a" / "seed-1") / "f")]
        not_temp = tmp_path / "notes.txt"
    with open(journal, "a") as handle:
        handle.write(f"{not_temp}\n")  # a journal line naming a file that is not a temp file is ignored
    header, listed = read_journal(journal)
    assert header == {"pid": 1} and len(listed) == 4
    foreign = [_touch(tmp_path / name) for name in (".metrics.json.k2j_x9q0.tmp", ".hidden", "notes.tmp")]
    _touch(not_temp)
    removed = remove_recorded_temp_files(journal)
    assert sorted(removed) == sorted([stale[0], stale[1].parent]) and not journal.exists()
    assert not any(p.exists() for p in (stale[0], stale[1].parent))
    assert all(p.exists() for p in (*foreign, not_temp, tmp_path / "done.json"))


def _dead_writer(out: Path, leftovers: list[str]) -> list[Path]:
    """The journal of a writer killed mid-write (a dead pid) that had created `leftovers` under `out`."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    record = ProcessRecord(int(dead.stdout), ProcessRecord.current().host)
    journal = writers.journal_path(out, record)
    paths = [(out / name).absolute() for name in leftovers]
    _touch(journal, "\n".join([json.dumps(record.to_dict()), *map(str, paths), ""]))
    for path in paths:
        _touch(path / "entry.json" if path.name.startswith(".seed-") else path)
    return paths


def test_the_runner_removes_only_the_temp_files_its_dead_writers_recorded(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # output_dir ".", an earlier runner's, where the user put files of their own
    ResultsStore(tmp_path).close()
    foreign = [_touch(tmp_path / name) for name in FOREIGN]
    leftovers = _dead_writer(
        Path("."),
        [
            ".experiment.json.abcd1234.tmp",
            "report/.tables.md.zz_zz_zz.tmp",
            "adapters/v/enc/rte/st-a/.seed-1.q1w2e3r4.tmp",
        ],
    )
    summary = run_experiment({**EXPERIMENT, "output_dir": "."}, executor=DoneExecutor(), progress=False, report=False)
    assert summary.ok and not any(p.exists() for p in leftovers)
    assert all(p.exists() for p in foreign)
    assert not list(tmp_path.rglob("*.journal")) and not (tmp_path / "runner.lock").exists()


ORPHAN = """import sys, time
from pathlib import Path
from adapterfusion.experiments.writers import registered_writer
from adapterfusion.io.atomic import create_temp_file
with registered_writer(sys.argv[1]):
    fd, path = create_temp_file(Path(sys.argv[1], "runs", "job.log"))
    print(path, flush=True)
    time.sleep(300)
"""


@pytest.mark.slow
def test_a_live_writer_of_a_gone_runner_is_waited_for_and_then_refused(tmp_path, monkeypatch):
    """A worker that outlives its killed runner (registered, alive, mid-write) keeps the next runner out: it would
    write beside it. Once it has been killed, its recorded temp file goes and the runner starts."""
    out = tmp_path / "out"
    (out / "runs").mkdir(parents=True)
    ResultsStore(out).close()  # the killed runner's results store
    recorded = (out / "experiment.db").read_bytes()
    orphan = subprocess.Popen(
        [sys.executable, "-c", ORPHAN, str(out)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(af.__file__).parents[1])},
    )
    try:
        leftover = Path(orphan.stdout.readline().strip())
        assert leftover.parent == out / "runs" and leftover.exists()
        monkeypatch.setattr(writers, "ORPHAN_WAIT_SECONDS", 0.0)
        with pytest.raises(
            OutputDirLockedError,
            match=rf"pid {orphan.pid} on .* still write\(s\) into .*for a runner "
            rf"that is gone.*`kill {orphan.pid}`",
        ):
            run_experiment(
                {**EXPERIMENT, "output_dir": str(out)}, executor=DoneExecutor(), progress=False, report=False
            )
        assert leftover.exists() and not (out / "runner.lock").exists()
        assert (out / "experiment.db").read_bytes() == recorded  # refused before the results store was touched
    finally:
        orphan.kill()
        orphan.wait()
    assert leftover.exists() and len(list((out / "writers").glob("*.journal"))) == 1
    assert run_experiment(
        {**EXPERIMENT, "output_dir": str(out)}, executor=DoneExecutor(), progress=False, report=False
    ).ok
    assert not leftover.exists() and not list((out / "writers").glob("*.journal"))


def test_a_store_entry_cleans_what_a_killed_writer_of_it_left(tmp_path):
    model = af.wrap(tiny_encoder())
    model.add_adapter("rte", "pfeiffer")
    store = AdapterStore(tmp_path)
    entry = store.path("enc", "rte", "st-a", 1)
    half = _touch(entry.parent / ".seed-1.abcdefgh.tmp" / "adapter" / "adapter.safetensors", "half")
    _touch(half.parents[1] / WRITING_MARKER, "")  # as replace_folder marks the folder it fills
    old = _touch(entry.parent / ".seed-1.0a1b2c3d.tmp" / "entry.json", "{}")  # killed between its two renames
    _touch(old.parent / WRITING_MARKER, "")
    other = _touch(entry.parent / ".seed-10.abcdefgh.tmp" / "entry.json", "{}")  # another entry's: not ours to touch
    _touch(other.parent / WRITING_MARKER, "")
    users = _touch(entry.parent / ".seed-1.20240101.tmp" / "notes.txt")  # named like a temp folder, not marked
    store.put_model(model, "rte", None, "enc", "rte", "st-a", 1)
    store.put_model(model, "rte", None, "enc", "rte", "st-a", 1, overwrite=True)
    assert not half.exists() and not old.exists() and other.exists() and users.read_text() == "x"
    assert sorted(os.listdir(entry.parent)) == [".seed-1.20240101.tmp", ".seed-10.abcdefgh.tmp", "seed-1"]
    assert not (entry / WRITING_MARKER).exists()


def test_a_saved_setup_keeps_a_users_folder_named_like_its_temp_folder(tmp_path):
    """save_pretrained removed every sibling named `.<name>.<8 characters>.tmp` as a killed writer's leftover: a
    user's `.rte-setup.20240101.tmp` backup, contents included, was deleted by saving `rte-setup`."""
    model = af.wrap(tiny_encoder())
    model.add_adapter("rte", "pfeiffer")
    backup = _touch(tmp_path / ".rte-setup.20240101.tmp" / "precious.txt", "my only copy")
    killed = _touch(tmp_path / ".rte-setup.k2j_x9q0.tmp" / WRITING_MARKER, "")  # a killed save's, marked
    model.save_pretrained(tmp_path / "rte-setup")
    assert backup.read_text() == "my only copy" and not killed.parent.exists()
    assert not (tmp_path / "rte-setup" / WRITING_MARKER).exists()


def test_a_writer_of_another_pid_namespace_counts_as_alive_and_an_older_record_as_before():
    """A record names its pid namespace: another container on this machine has our host name and boot id, and its
    pids are not ours to ask, so its writer is alive (unknowable), not judged dead by a pid that is dead here. A
    record without the field (written by an older version) is judged by its pid, as before."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    here = ProcessRecord.current()
    assert here.pid_namespace and ProcessRecord.from_dict(here.to_dict()) == here and here.status() == "alive"
    theirs = ProcessRecord(int(dead.stdout), here.host, here.boot_id, None, "pid:[4026530000]")
    assert theirs.status() == "alive" and "another container" in str(theirs)
    older = {key: value for key, value in theirs.to_dict().items() if key != "pid_namespace"}
    assert ProcessRecord.from_dict(older).status() == "gone"
