"""The lock a training run holds on its run folder while it trains: `run.lock`, held with `fcntl.flock` and holding
the trainer's pid. The kernel drops an flock when its process dies, so a lock left by a crashed or killed run never
blocks the next one; where there is no flock (Windows, or a file system without it) a lock counts as held while its
pid is alive."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from adapterfusion.io.paths import describe
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


def locked_by_another(fd: int) -> bool | None:
    """Whether a process holds an flock on the file open as `fd` (any process on this kernel, whatever its pid
    namespace: a container's runner as well); None where there is no fcntl, or the file system has no flock. The
    shared lock taken to test it is released before this returns."""
    if fcntl is None:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:  # a file system without flock: cannot tell
        return None
    fcntl.flock(fd, fcntl.LOCK_UN)
    return False


def remove_own_lock(path: Path, fd: int) -> None:
    """Remove the lock file `path` if it is still the one open as `fd`: one removed by hand meanwhile (the process
    seemed gone) may have been replaced by another process's lock, which stays."""
    try:
        if os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
            path.unlink()
    except FileNotFoundError:
        pass


def lock_holder(path: str | os.PathLike) -> int | None:
    """The pid of the live process holding the lock file `path` (0 when it holds it but has not yet written its pid);
    None when nobody holds it (no file, or one a dead process left)."""
    path = Path(path)
    try:  # never through a link, never waiting on a FIFO: _check_lock_path refuses those
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        held = locked_by_another(fd)
    finally:
        os.close(fd)
    if held is None:  # no flock here (Windows, or a file system without it): judged by the pid it holds
        pid = _pid_in(path)
        return pid if pid is not None and _alive(pid) else None
    return (_pid_in(path) or 0) if held else None


@contextlib.contextmanager
def hold_lock(path: str | os.PathLike, busy: str) -> Iterator[None]:
    """Hold the lock file `path` (created, with this pid in it) for the block, and remove it at the end. TrainingError
    `busy` (with ' (pid N)' filled in for '{pid}') when a live process holds it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _check_lock_path(path)
    fd = _flocked(path, busy)
    if fd is None:  # no flock here: the pid in the file says who holds it
        holder = lock_holder(path)
        if holder is not None and holder != os.getpid():
            raise TrainingError(busy.format(pid=holder))
        path.write_text(f"{os.getpid()}\n", encoding="utf-8")
        try:
            yield
        finally:
            path.unlink(missing_ok=True)
        return
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        remove_own_lock(path, fd)  # before the lock is dropped, so a waiting opener sees it is gone and retries
        os.close(fd)


def _flocked(path: Path, busy: str) -> int | None:
    """The lock file `path`, open and flock-ed by this process; None where there is no flock (Windows, or a file
    system without it, whose flock() fails). TrainingError `busy` when another process holds it."""
    if fcntl is None:
        return None
    while True:
        fd = _open_lock(path, busy)
        if fd is None:
            continue  # a stale lock another user left was removed: create ours
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise TrainingError(busy.format(pid=_pid_in(path) or "unknown")) from None
        except OSError:
            os.close(fd)
            return None
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd  # still the file at `path`, not one its last holder removed after we opened it
        except FileNotFoundError:
            pass
        os.close(fd)


def _check_lock_path(path: Path) -> None:
    """Refuse a lock path that holds anything but a plain file: the lock file is written (truncated, then our pid)
    and removed at the end, which through a symbolic link would empty the file it points to; a FIFO would hang."""
    if path.is_symlink():
        what = f"a symbolic link (to {os.readlink(path)!r})"
    elif os.path.lexists(path) and describe(path) != "a file":
        what = describe(path)
    else:
        return
    raise TrainingError(
        f"{path} is {what}, where the run keeps its lock file ({path.name}, written and removed by the run); a run "
        "never makes one there, so it is not ours to write through or remove: move it away, then train again"
    )


def _open_lock(path: Path, busy: str) -> int | None:
    """The lock file `path`, opened for writing (created if missing, never through a link); None after removing a
    stale one that this user could not open (another user's killed run left it), so the caller tries again."""
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError as error:
        failure = error
    _check_lock_path(path)  # one put there since it was checked (O_NOFOLLOW refused it)
    holder = lock_holder(path) if isinstance(failure, PermissionError) else None
    if holder is not None:
        raise TrainingError(busy.format(pid=holder)) from None
    if isinstance(failure, PermissionError) and os.access(path, os.R_OK):  # judged: no live process holds it
        try:
            path.unlink()
            return None
        except OSError:
            pass
    raise TrainingError(
        f"cannot open the run's lock file {path} ({failure.strerror}); if another user's run left it there (a file "
        "this user may not write), ask them to remove it, or remove it yourself once no run of theirs trains there; "
        "else check that folder's permissions and file system"
    ) from None
