"""The processes that write into an experiment's output dir, and what the killed ones left behind.

Every process that writes there for a runner (the runner itself, and each executor worker while it runs a job)
first registers: it creates `<output_dir>/writers/<host>-<pid>.journal`, whose first line is its ProcessRecord,
and while registered it records there each temp file or folder before creating it (io/atomic.py). A runner that
starts after a kill then knows

* whether a writer of the killed runner still lives (a worker whose runner died ends within a second or two): it
  waits for it, and refuses to start while it lives, so it never writes beside an orphan;
* exactly which temp files the dead writers left half-written: it removes those, and nothing else of the output
  dir (which may be `.` or hold the user's own files).
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

from adapterfusion.experiments.errors import OutputDirLockedError
from adapterfusion.experiments.processes import ALIVE, ProcessRecord
from adapterfusion.io.atomic import (
    active_journal,
    journal_temp_files,
    pid_namespace,
    read_journal,
    remove_recorded_temp_files,
)

WRITERS_DIR = "writers"
JOURNAL_SUFFIX = ".journal"
ORPHAN_WAIT_SECONDS = 10.0  # how long a starting runner waits for a killed runner's workers to end
_POLL_SECONDS = 0.2


def journal_path(output_dir: str | os.PathLike, record: ProcessRecord, namespace: str = "") -> Path:
    """Where the writer `record` (of the pid namespace `namespace`: pid_namespace()) keeps its journal. The namespace
    is in the name: a writer in another container with our host name and our pid (each container has a pid 1) has a
    journal of its own, which registering never takes for an earlier one of ours and sweeps away under it."""
    host = re.sub(r"[^A-Za-z0-9_.-]", "_", record.host)
    space = re.sub(r"[^0-9]", "", namespace)
    return (
        Path(output_dir).absolute()
        / WRITERS_DIR
        / f"{host}-{f'ns{space}-' if space else ''}{record.pid}{JOURNAL_SUFFIX}"
    )


def _own_journal(output_dir: str | os.PathLike) -> Path:
    return journal_path(output_dir, ProcessRecord.current(), pid_namespace())


@contextlib.contextmanager
def registered_writer(output_dir: str | os.PathLike) -> Iterator[None]:
    """Register this process as a writer of `output_dir` while the block runs. At the end its writes are over
    (an atomic write removes its temp file when it fails), so its journal is swept and removed. Re-entrant: the
    in-process executor runs jobs inside the runner's own registration."""
    record = ProcessRecord.current()
    journal = _own_journal(output_dir)
    if active_journal() == journal:
        yield
        return
    remove_recorded_temp_files(journal)  # an earlier process with this pid (dead), or this one's earlier run
    try:
        with journal_temp_files(journal, record.to_dict()):
            yield
    finally:
        remove_recorded_temp_files(journal)
        with contextlib.suppress(OSError):  # the last writer leaves no empty folder behind
            journal.parent.rmdir()


def writer_journals(output_dir: str | os.PathLike) -> dict[Path, ProcessRecord | None]:
    """Every journal in `output_dir` and the process that writes it (None if its header names none)."""
    folder = Path(output_dir) / WRITERS_DIR
    journals = sorted(folder.glob(f"*{JOURNAL_SUFFIX}")) if folder.is_dir() else []
    return {journal: ProcessRecord.from_dict(read_journal(journal)[0]) for journal in journals}


def clear_dead_writers(output_dir: str | os.PathLike, wait: float | None = None) -> list[Path]:
    """For a runner that holds the lock, before it writes: wait up to `wait` seconds (ORPHAN_WAIT_SECONDS) for
    the other registered writers on this host to end, refuse with OutputDirLockedError if some still live, then
    remove the temp files the dead ones recorded; returns those. A writer on another host counts as dead: it
    worked for a runner that is gone (we hold its lock), and Ray ends a dead driver's tasks."""
    own = _own_journal(output_dir)
    deadline = time.monotonic() + (ORPHAN_WAIT_SECONDS if wait is None else wait)
    while True:
        journals = {j: r for j, r in writer_journals(output_dir).items() if j != own}
        live = [record for record in journals.values() if record is not None and record.status() == ALIVE]
        if not live:
            break
        if time.monotonic() >= deadline:
            here = [r for r in live if not r.elsewhere_on_this_machine()]  # a pid only means something in its own
            ending = [f"`kill {' '.join(str(r.pid) for r in here)}`"] if here else []
            if len(here) < len(live):
                ending.append("from inside their container")
            raise OutputDirLockedError(
                f"{', '.join(map(str, live))} still write(s) into {output_dir} for a runner that is gone (e.g. a "
                f"worker of a killed runner); wait for them to end, or end them ({' or '.join(ending)}), then run "
                "again"
            )
        time.sleep(_POLL_SECONDS)
    removed: list[Path] = []
    for journal in journals:
        removed += remove_recorded_temp_files(journal)
    return removed
