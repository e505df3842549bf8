"""The lock a training run holds on its run folder while it trains: `run.lock`, held with `fcntl.flock` and holding
the trainer's pid. The kernel drops an flock when its process dies, so a lock left by a crashed or killed run never
blocks the next one; where there is no fcntl (Windows) a lock counts as held while its pid is alive."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from adapterfusion.training.errors import TrainingError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]


def _pid_in(path: Path) -> int | None:
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def lock_holder(path: str | os.PathLike) -> int | None:
    """The pid of the live process holding the lock file `path` (0 when it holds it but has not yet written its pid);
    None when nobody holds it (no file, or one a dead process left)."""
    path = Path(path)
    if fcntl is None:
        pid = _pid_in(path)
        return pid if pid is not None and _alive(pid) else None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _pid_in(path) or 0
    finally:
        os.close(fd)  # closing drops the shared lock taken to test it
    return None


@contextlib.contextmanager
def hold_lock(path: str | os.PathLike, busy: str) -> Iterator[None]:
    """Hold the lock file `path` (created, with this pid in it) for the block, and remove it at the end. TrainingError
    `busy` (with ' (pid N)' filled in for '{pid}') when a live process holds it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if fcntl is None:
        holder = lock_holder(path)
        if holder is not None and holder != os.getpid():
            raise TrainingError(busy.format(pid=holder))
        path.write_text(f"{os.getpid()}\n", encoding="utf-8")
        try:
            yield
        finally:
            path.unlink(missing_ok=True)
        return
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise TrainingError(busy.format(pid=_pid_in(path) or "unknown")) from None
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                break  # still the file at `path`, not one its last holder removed after we opened it
        except FileNotFoundError:
            pass
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        path.unlink(missing_ok=True)  # before the lock is dropped, so a waiting opener sees it is gone and retries
        os.close(fd)
