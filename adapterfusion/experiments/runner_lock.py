"""The lock that keeps a second runner off an experiment's output dir: `<output_dir>/runner.lock`, holding its
runner's ProcessRecord (host, pid, boot, start time) and, where there is fcntl, flock-ed by it while it runs.

The flock is what a runner on this kernel is judged alive by, whatever pid namespace it runs in (a container with
the same host name and boot id, whose pid this process does not see, or sees as another process's); the record
judges a runner that holds no flock (an older version's), and one on another host counts as alive. A lock left by a
runner that is gone is stale and taken over, removing exactly the file judged stale, never a lock another runner
put there meanwhile.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from adapterfusion.experiments.errors import OutputDirLockedError
from adapterfusion.experiments.processes import GONE, ProcessRecord
from adapterfusion.io.atomic import create_temp_file, temp_path
from adapterfusion.training.run_lock import fcntl, locked_by_another, remove_own_lock

LOCK_FILE = "runner.lock"
_LOOKING = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)  # how a lock is opened to judge it: a FIFO there never waits


class RunnerLock:
    """An exclusive lock file `<output_dir>/runner.lock`. A lock whose runner is gone is stale and taken over; a
    live one refuses with OutputDirLockedError. The lock appears whole or not at all (a hard link of a finished,
    flock-ed temp file, which fails where a lock exists), so two runners starting together cannot both win."""

    def __init__(self, output_dir: str | os.PathLike) -> None:
        self.path = Path(output_dir) / LOCK_FILE
        self._fd: int | None = None  # the open lock file while held: its flock lasts as long

    @property
    def _held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> RunnerLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        owner = json.dumps({**ProcessRecord.current().to_dict(), "started_at": time.time()}).encode("utf-8")
        fd: int | None
        fd, tmp = create_temp_file(self.path)
        try:
            _flock(fd)  # before it is linked: never a moment the lock is there without its flock
            os.write(fd, owner)
            for _ in range(3):
                try:
                    self._fd = _place(tmp, fd, self.path, owner)
                except FileExistsError:
                    self._check_existing()
                    continue
                if self._fd == fd:
                    fd = None
                return self
        finally:
            os.unlink(tmp)
            if fd is not None:
                os.close(fd)
        raise OutputDirLockedError(f"could not take the lock {self.path}; another runner keeps racing for it")

    def _owner(self) -> dict[str, Any] | None:
        """The lock's content; None if there is no lock, {} if it cannot be read."""
        try:
            return _owner_in(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return {}

    def holder(self) -> ProcessRecord | None:
        """The runner that holds the lock now: None if there is no lock or its runner is gone."""
        try:
            fd = os.open(self.path, _LOOKING)
        except OSError:
            return None
        try:
            flocked = locked_by_another(fd)
        finally:
            os.close(fd)
        record = ProcessRecord.from_dict(self._owner())
        if record is None or (record.status() == GONE and not flocked):
            return None
        return record

    def _check_existing(self) -> None:
        """Refuse if the owner lives; remove the lock if it is stale."""
        try:
            fd = os.open(self.path, _LOOKING)
        except FileNotFoundError:
            return
        except OSError:  # one this user may not read: nothing says its runner is gone
            raise self._locked({}) from None
        try:  # what is judged and what is removed must be the same file: its inode is read with its content
            judged = os.fstat(fd).st_ino
            flocked = locked_by_another(fd)
            with os.fdopen(os.dup(fd), encoding="utf-8") as handle:
                text = handle.read()
        except (OSError, ValueError):
            text = ""
        finally:
            os.close(fd)
        owner = _owner_in(text)
        record = ProcessRecord.from_dict(owner)
        if flocked or record is None or record.status() != GONE:
            raise self._locked(owner)
        self._remove_stale(judged)

    def _remove_stale(self, judged: int) -> None:
        """Remove the stale lock `judged` (an inode). Another runner may have taken it over since it was read (it
        removed it and put its own lock there): unlinking the path would then remove a live runner's lock, and both
        would run. So the lock is renamed aside (atomic: what was at the path is now ours to look at), removed if it
        is the stale one, and else put back and refused. Only a third runner starting in the moment the live lock is
        aside could take it then (put back fails): said, never hidden."""
        aside = temp_path(self.path)
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:  # removed meanwhile by another runner: try again
            return
        if os.stat(aside).st_ino == judged:
            os.unlink(aside)
            return
        owner = _owner_in(aside.read_text(encoding="utf-8", errors="replace"))
        try:
            _put_back(aside, self.path)
        except FileExistsError:
            raise OutputDirLockedError(
                f"several runners started on {self.path.parent} at once, while a killed runner's lock was there: "
                f"the lock of the runner that took it over ({_named(owner)}) was found at {aside} and another "
                f"runner's is now at {self.path}; stop all but one runner of this experiment, delete {aside}, and "
                "run it again"
            ) from None
        raise self._locked(owner)

    def _locked(self, owner: Mapping[str, Any]) -> OutputDirLockedError:
        since = owner.get("started_at")
        when = (
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since))
            if isinstance(since, (int, float)) and not isinstance(since, bool)
            else "?"
        )
        return OutputDirLockedError(
            f"another runner ({_named(owner)}, since {when}) is using {self.path.parent}; wait for it to finish, or, "
            f"if that process is gone, delete {self.path}"
        )

    def release(self) -> None:
        if self._fd is not None:
            remove_own_lock(self.path, self._fd)  # before the flock is dropped: no runner judges it stale meanwhile
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RunnerLock:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


# what link() answers on a file system without hard links (FAT, exFAT, some network shares)
_NO_HARD_LINKS = frozenset({errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS})


def _flock(fd: int) -> None:
    """Take the lock's flock on `fd` (a file of our own, so it never waits); none where there is no flock."""
    if fcntl is not None:
        with contextlib.suppress(OSError):  # a file system without flock: judged by its record alone
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


def _place(tmp: Path, fd: int, path: Path, owner: bytes) -> int:
    """Put the finished lock `tmp` (open as `fd`, flock-ed) at `path`, FileExistsError where a lock is there; returns
    the file descriptor that holds the lock. A hard link appears whole or not at all; where the file system has no
    hard links, the lock is created in place instead (O_EXCL), flock-ed before its content is written: a runner
    killed in between leaves an empty lock, which the next one refuses and names (delete it by hand)."""
    try:
        os.link(tmp, path)
        return fd
    except OSError as error:
        if error.errno not in _NO_HARD_LINKS:
            raise
    created = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        _flock(created)
        os.write(created, owner)
    except BaseException:
        os.close(created)
        path.unlink(missing_ok=True)
        raise
    return created


def _put_back(aside: Path, path: Path) -> None:
    """Put the live lock `aside` back at `path` (FileExistsError where another is there now): a hard link where the
    file system has them, else a rename onto a path found empty."""
    try:
        os.link(aside, path)
        os.unlink(aside)
        return
    except OSError as error:
        if isinstance(error, FileExistsError) or error.errno not in _NO_HARD_LINKS:
            raise
    if os.path.lexists(path):
        raise FileExistsError(errno.EEXIST, "a lock is there", str(path))
    os.rename(aside, path)


def _owner_in(text: str) -> dict[str, Any]:
    """The owner a lock file's `text` records; {} for text that records none (damaged, or written by hand)."""
    try:
        owner = json.loads(text or "{}")
    except ValueError:
        return {}
    return owner if isinstance(owner, dict) else {}


def _named(owner: Mapping[str, Any]) -> str:
    """'pid N on HOST' of a lock's owner, or what it lacks."""
    if "pid" not in owner and "host" not in owner:
        return "a runner its lock file does not name"
    return f"pid {owner.get('pid')} on {owner.get('host')}"
