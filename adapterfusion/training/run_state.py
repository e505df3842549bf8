"""What state a run folder is in, judged in one place for the training calls, the CLI, evaluation and the store:

| state | what the folder holds |
|---|---|
| absent | nothing (or no folder) |
| running | a `run.lock` that a live process holds (training/run_lock.py) |
| unfinished | files but no metrics.json, and no live lock: the run crashed or was interrupted |
| finished | metrics.json, the file a run writes last |

`check_can_train` turns the state into the one decision a training call makes before any work: go on, or refuse
with what to do instead (reuse, resume, overwrite, wait); `claimed_run` makes it and holds the folder's lock while
the run trains; `require_finished` is what reading a run's results back (evaluate, prune, rebuild_run) asks.
"""

from __future__ import annotations

import contextlib
import enum
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapterfusion._validation import check_bool
from adapterfusion.io.documents import as_written, changed_keys
from adapterfusion.training.errors import RunFileError, TrainingError
from adapterfusion.training.run_files import CONFIG_FILE, LOCK_FILE, METRICS_FILE, read_json
from adapterfusion.training.run_lock import hold_lock, lock_holder
from adapterfusion.training.store import check_entry_replaceable, entry_encoder


class RunState(enum.Enum):
    ABSENT = "absent"
    RUNNING = "running"
    UNFINISHED = "unfinished"
    FINISHED = "finished"


@dataclass(frozen=True)
class RunStatus:
    """A run folder's state; `pid` is the process training it while it is `running`."""

    run_dir: Path
    state: RunState
    pid: int | None = None

    @property
    def running_elsewhere(self) -> bool:
        """Another process (not this one) is training the run right now."""
        return self.state is RunState.RUNNING and self.pid != os.getpid()

    def describe(self) -> str:
        """What the folder holds, for messages: '<dir> holds ...'."""
        return {
            RunState.ABSENT: f"{self.run_dir} holds no run",
            RunState.RUNNING: f"{self.run_dir} is being trained right now by another process (pid {self.pid})",
            RunState.UNFINISHED: f"{self.run_dir} holds files of an unfinished run (no metrics.json: it crashed or "
            "was interrupted)",
            RunState.FINISHED: f"the run folder {self.run_dir} holds files of a finished run (metrics.json)",
        }[self.state]


def run_state(run_dir: str | os.PathLike) -> RunStatus:
    """The state of `run_dir` (see the module docstring)."""
    run_dir = Path(run_dir)
    pid = lock_holder(run_dir / LOCK_FILE)
    if pid is not None:
        return RunStatus(run_dir, RunState.RUNNING, pid)
    if (run_dir / METRICS_FILE).is_file():
        return RunStatus(run_dir, RunState.FINISHED)
    if run_dir.is_dir() and any(entry.name != LOCK_FILE for entry in run_dir.iterdir()):
        return RunStatus(run_dir, RunState.UNFINISHED)
    return RunStatus(run_dir, RunState.ABSENT)


def unfinished_fix(status: RunStatus) -> str:
    """What to do about a run folder that is not finished: wait for it, or resume / restart it."""
    if status.state is RunState.RUNNING:
        return "wait for that process to finish (or stop it, then resume the run with --resume / resume=True)"
    return "continue it with --resume (train(..., resume=True)) or start it over with --overwrite (overwrite=True)"


def options_changed(run_dir: Path, setup_options: Mapping[str, Any]) -> str | None:
    """How the run in `run_dir` was set up otherwise than a call that asks for `setup_options` (as plain JSON values:
    a fusion's sources, its adapter setup), said as 'sources [...] (this call: [...])'; None where they agree or its
    config cannot be read. A run folder is named by task, setup and seed alone, so two fusions over other sources
    share it."""
    path = run_dir / CONFIG_FILE
    if not path.is_file():
        return None
    try:
        document = read_json(path, "")  # unreadable: nothing to say here (the run's own checks say it)
    except RunFileError:
        return None
    earlier = document.get("setup_options") if isinstance(document, dict) else None
    if not isinstance(earlier, dict):
        return None
    asked = as_written(setup_options)  # as the config file holds them
    differing = changed_keys(earlier, asked)
    return ", ".join(f"{key} {earlier.get(key)!r} (this call: {asked.get(key)!r})" for key in differing) or None


def check_can_train(
    status: RunStatus,
    entries: Sequence[Path],
    what: str,
    overwrite: bool = False,
    resume: bool = False,
    changed: str | None = None,
) -> None:
    """Refuse (TrainingError), before any work, a training call that would replace an earlier result without
    `overwrite` or collide with a run in progress. `entries`: the store entries the run would write; `changed`: how
    the finished run there was set up otherwise (options_changed), which is then no result of this call to reuse. A
    finished run is never continued by `resume`; an unfinished one is, by `resume` or `overwrite` (which starts it
    over)."""
    check_bool(overwrite, "overwrite")
    check_bool(resume, "resume")
    if status.running_elsewhere:
        raise TrainingError(f"{what}: {status.describe()}; {unfinished_fix(status)}")
    if overwrite:
        for entry in entries:  # before the earlier run is replaced, not after the new one trained
            check_entry_replaceable(entry, TrainingError)
        return
    stored = [f"the store holds its adapter at {entry}{_trained_on(entry)}" for entry in entries if entry.exists()]
    if status.state is RunState.FINISHED and changed:
        raise TrainingError(
            f"{what} was trained before with other settings: {status.describe()}, with {changed}; choose another "
            "output dir (CLI: --output-dir) to keep both, or pass overwrite=True (CLI: --overwrite) to replace it"
        )
    if status.state is RunState.FINISHED or (stored and status.state is RunState.ABSENT):
        found = ([status.describe()] if status.state is RunState.FINISHED else []) + stored
        reuse = (
            f"reuse it (rebuild_run({str(status.run_dir)!r}); CLI: adapterfusion evaluate {status.run_dir})"
            if status.state is RunState.FINISHED
            else "reuse it (AdapterStore.load_into)"
        )
        raise TrainingError(
            f"{what} was trained before: {' and '.join(found)}; {reuse}, pass overwrite=True (CLI: --overwrite) "
            "to replace it, or choose another output dir, store or seed"
        )
    if status.state is RunState.UNFINISHED and not resume:
        raise TrainingError(f"{what}: {status.describe()}; {unfinished_fix(status)}")


def _trained_on(entry: Path) -> str:
    """' (trained on the encoder X)': which encoder a store entry holds an adapter of. Its folder names the encoder
    by the last two parts of its path only, so it may be another encoder's (AdapterStore.put refuses to replace it)."""
    encoder = entry_encoder(entry)
    return f" (trained on the encoder {encoder})" if encoder else ""


@contextlib.contextmanager
def claimed_run(
    run_dir: Path,
    entries: Sequence[Path],
    what: str,
    overwrite: bool,
    resume: bool,
    writes: bool = True,
    changed: str | None = None,
) -> Iterator[None]:
    """Judge `run_dir` (check_can_train), then hold its lock for the block and judge it again under the lock (another
    process may have finished it in between). `writes` False (the non-zero ranks of a distributed launch): rank 0
    does both, so nothing is done here."""
    if not writes:
        yield
        return
    check_can_train(run_state(run_dir), entries, what, overwrite, resume, changed)
    busy = RunStatus(run_dir, RunState.RUNNING, -1)
    with hold_lock(
        run_dir / LOCK_FILE,
        f"{what}: {run_dir} is being trained right now by another process (pid {{pid}}); {unfinished_fix(busy)}",
    ):
        check_can_train(run_state(run_dir), entries, what, overwrite, resume, changed)
        yield


def require_finished(run_dir: str | os.PathLike) -> None:
    """RunFileError, saying what the folder holds and what to do, unless `run_dir` holds a finished run."""
    status = run_state(run_dir)
    if status.state is RunState.FINISHED:
        return
    if status.state is RunState.ABSENT:
        raise RunFileError(
            f"{status.run_dir} holds no run; give the folder train() wrote: <output_dir>/<task>/<setup>/seed-<seed>"
        )
    raise RunFileError(f"{status.describe()}, so it has no trained model to use; {unfinished_fix(status)}")
