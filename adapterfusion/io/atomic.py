"""Atomic file writes: a temp file in the same directory, fsync, then rename, so a crash at any moment
leaves either the old file or the new one, never half of one.

A writer killed mid-write (SIGKILL, power cut) leaves its temp file behind. Inside `journal_temp_files(journal)`
each temp file or folder is recorded in the journal before it is created, so whoever cleans up later removes
exactly those (remove_recorded_temp_files) and never a file that merely looks like one. The journal is appended
without fsync: it survives the writer's death, not a power cut, after which a temp file may stay unrecorded.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import json
import os
import random
import re
import shutil
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from adapterfusion.errors import ConfigError, StorageFullError
from adapterfusion.io.paths import OUT_OF_ROOM, describe

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

TEMP_SUFFIX = ".tmp"
# `.<final name>.<8 random characters>.tmp`: the names temp_path() gives, here, for AdapterStore's entry folders and
# for the runner lock; nothing else this library writes looks like that.
_TEMP_NAME = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$")
_TEMP_CHARACTERS = "abcdefghijklmnopqrstuvwxyz0123456789_"
# in each temp folder replace_folder fills, until just before the rename: only a marked one is removed as a killed
# writer's. A kill in the moment between the two leaves an unmarked copy that stays (litter, never a loss). The marker
# names its writer (host, boot, pid namespace, pid), so a writer of the same path in another process (or another
# container on this machine) that is still filling its folder keeps it (it was removed under it: a raw
# FileNotFoundError); an empty marker counts as a killed writer's.
WRITING_MARKER = ".adapterfusion-writing"
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
_PID_NAMESPACE = "/proc/self/ns/pid"
_random = random.SystemRandom()
_journal: Path | None = None  # the journal of this process while journal_temp_files() is active
_held_folders = threading.local()  # `ids`: the (device, inode) of each folder this thread holds a folder_lock on


# what it answers a write the place refuses although the checks before it passed (io/paths.py check_writable_folder):
# a permission changed since, an immutable file or folder, a security module, a read-only remount, a name the file
# system does not take (':' on FAT), a path too long for it
REFUSED = frozenset({errno.EACCES, errno.EPERM, errno.EROFS, errno.EINVAL, errno.ENAMETOOLONG, errno.ELOOP})
_naming_target: contextvars.ContextVar[Path | None] = contextvars.ContextVar("naming_target", default=None)


class UnwritableTargetError(ConfigError, OSError):
    """A write the OS refused before anything was renamed into place, so what was saved there before is as it was.
    `errno`, `strerror` and `filename` are the OS's, so `except OSError` still catches it."""

    def __str__(self) -> str:  # OSError's own would be "[Errno N] strerror: filename" once those are set
        return str(self.args[0]) if self.args else ""


@contextlib.contextmanager
def naming_the_target(final: Path) -> Iterator[None]:
    """The OS's error for a write that ran out of room, or that the place refused, names a temp file of ours (or
    nothing) and says nothing of what happened to the earlier save; raised inside this block (before any rename into
    `final`), it becomes a StorageFullError or an UnwritableTargetError naming `final`, why, that nothing there
    changed, and the fix. An error about a file elsewhere (a source being read) stays as it is. Blocks nest (a
    setup's files written into its temp folder): the outermost names the path, never a temp one inside it."""
    if _naming_target.get() is not None:
        yield
        return
    token = _naming_target.set(final)
    try:
        yield
    except OSError as error:
        if isinstance(error, (StorageFullError, UnwritableTargetError)):
            raise
        if error.errno in OUT_OF_ROOM:
            raise _os_error(
                StorageFullError(
                    f"writing {str(final)!r} failed: {error.strerror or error} (errno {error.errno}); nothing there "
                    "was changed (what was saved before is as it was, and our temp files are removed). Free space on "
                    "that disk (or raise the quota), or write somewhere else, then run it again"
                ),
                error,
                final,
            ) from None
        if error.errno in REFUSED and _about(error, final):
            code = errno.errorcode.get(error.errno, str(error.errno))
            raise _os_error(
                UnwritableTargetError(
                    f"writing {str(final)!r} failed: the OS refused to write {str(error.filename)!r} "
                    f"({error.strerror or error}, {code}); nothing there was changed (what was saved before is as it "
                    "was, and our temp files are removed). Check that place's permissions and file system (a "
                    "read-only or immutable file or folder, a name that file system does not take), or write "
                    "somewhere else"
                ),
                error,
                final,
            ) from None
        raise
    finally:
        _naming_target.reset(token)


def _about(error: OSError, final: Path) -> bool:
    """Whether `error` is about the place written (`final`, its temp names beside it, what is inside them), not
    about a file read from elsewhere while writing."""
    if not isinstance(error.filename, (str, bytes, os.PathLike)):
        return False
    place = os.path.abspath(final.parent)
    return os.path.abspath(os.fsdecode(error.filename)).startswith(place.rstrip(os.sep) + os.sep)


def _os_error(ours: OSError, error: OSError, final: Path) -> OSError:
    ours.errno, ours.strerror, ours.filename = error.errno, error.strerror, str(final)
    return ours


def temp_prefix(path: Path) -> str:
    """The prefix of a temp file or folder that will be renamed to `path`: hidden, and named after it."""
    return f".{path.name}."


def is_temp_name(name: str) -> bool:
    return bool(_TEMP_NAME.fullmatch(name))


def active_journal() -> Path | None:
    return _journal


@contextlib.contextmanager
def journal_temp_files(journal: str | os.PathLike, header: Mapping[str, Any]) -> Iterator[Path]:
    """Record in `journal` every temp file or folder this process creates while the block runs, before creating
    it. The journal starts with `header` (who writes, as one JSON line) and is left in place: the caller removes it
    with remove_recorded_temp_files once that writer's writes are finished or it is dead."""
    global _journal
    journal = Path(journal).absolute()
    for attempt in range(2):  # a writer that ends removes the journals' folder when it is left empty
        journal.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(journal, "w", encoding="utf-8") as handle:
                handle.write(json.dumps(dict(header), sort_keys=True) + "\n")
            break
        except FileNotFoundError:
            if attempt:
                raise
    previous, _journal = _journal, journal
    try:
        yield journal
    finally:
        _journal = previous


def read_journal(journal: str | os.PathLike) -> tuple[dict[str, Any], list[Path]]:
    """A journal's header and the temp paths it lists; ({}, []) for a journal with no complete header line."""
    try:
        lines = Path(journal).read_text(encoding="utf-8", errors="replace").split("\n")
        header = json.loads(lines[0])
    except (OSError, ValueError):
        return {}, []
    return (header if isinstance(header, dict) else {}), [Path(line) for line in lines[1:-1] if line]


def remove_recorded_temp_files(journal: str | os.PathLike) -> list[Path]:
    """Delete the temp files and folders `journal` lists that still exist, then the journal; returns them. Only
    safe once the journal's writer is dead or done. A listed path whose name is not a temp name is left alone."""
    removed: list[Path] = []
    for path in read_journal(journal)[1]:
        if not is_temp_name(path.name) or not os.path.lexists(path):
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(path)
    Path(journal).unlink(missing_ok=True)
    return removed


def temp_path(final: str | os.PathLike) -> Path:
    """A fresh temp name beside `final` (`.<name>.<8 random characters>.tmp`), recorded in the active journal
    before the caller creates anything under it."""
    final = Path(final)
    path = final.with_name(f"{temp_prefix(final)}{''.join(_random.choices(_TEMP_CHARACTERS, k=8))}{TEMP_SUFFIX}")
    if _journal is not None:
        fd = os.open(_journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{path.absolute()}\n".encode("utf-8", errors="surrogateescape"))
        finally:
            os.close(fd)
    return path


def create_temp_file(final: str | os.PathLike) -> tuple[int, Path]:
    """A new temp file beside `final`, opened for writing: (file descriptor, path). Its mode is what the user's
    umask gives any new file (0o666 masked), so saved setups and reports are as readable as the user's other files."""
    for _ in range(100):
        path = temp_path(final)
        try:
            return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666), path
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temp name beside {final}")


def create_temp_dir(final: str | os.PathLike) -> Path:
    """A new empty temp folder beside `final`, with the mode the user's umask gives any new folder."""
    for _ in range(100):
        path = temp_path(final)
        try:
            path.mkdir(mode=0o777)
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temp name beside {final}")


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with naming_the_target(path):
        fd, tmp_name = create_temp_file(path)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp_name, path)
        except BaseException:
            try:
                os.unlink(tmp_name)
            except FileNotFoundError:
                pass
            raise
    _fsync_directory(path.parent)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, data: Any) -> None:
    atomic_write_text(path, json_text(data))


def json_text(data: Any) -> str:
    """How every JSON file we write is laid out (atomic_write_json, and the files atomic_write_files writes as one)."""
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def atomic_write_files(files: Mapping[Path, bytes], pending: Path | None = None) -> None:
    """Write several files as one: every file goes to a temp file beside it first, and only once all of them are
    written (the part that fails: disk full, quota, Ctrl-C) are they renamed into place, in the order given. A
    failure before the renames leaves every old file as it was and removes the temps and any folder this call
    created; what remains is the moment between renames, which readers detect by digests (serialization/), or,
    for a format without them, by `pending`: a file that exists from just before the first rename until the last
    one is done, so a reader finding it knows the files may not belong together."""
    created: list[Path] = []
    temps: dict[Path, Path] = {}
    renamed = 0
    try:
        for path, data in files.items():
            with naming_the_target(path):
                created += _make_folders(path.parent)
                fd, temps[path] = create_temp_file(path)
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
                    handle.flush()
                    os.fsync(handle.fileno())
        with _renaming_into([*(path.parent for path in files), *([pending.parent] if pending else [])]):
            if pending is not None:
                atomic_write_bytes(pending, "\n".join(path.name for path in files).encode("utf-8"))
            for path, tmp in temps.items():
                os.replace(tmp, path)
                renamed += 1
            if pending is not None:
                pending.unlink()
    except BaseException:
        if pending is not None and not renamed:  # every old file is as it was
            with contextlib.suppress(OSError):
                pending.unlink()
        for tmp in temps.values():
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        for folder in reversed(created):
            with contextlib.suppress(OSError):  # not empty: a file was renamed into it, or is not ours
                folder.rmdir()
        raise
    for folder in dict.fromkeys(path.parent for path in files):
        _fsync_directory(folder)


@contextlib.contextmanager
def folder_lock(folder: str | os.PathLike) -> Iterator[None]:
    """Hold an flock on `folder` for the block, waiting for another process (or thread) that holds it: for writers
    of several files there that must not interleave. Readers take none. Where there is no fcntl, the folder cannot be
    opened, or its file system has no flock, the block runs unlocked."""
    fd = None
    if fcntl is not None:
        with contextlib.suppress(OSError, ValueError):
            fd = os.open(folder, os.O_RDONLY)
    held: frozenset[tuple[int, int]] = getattr(_held_folders, "ids", frozenset())
    folder_id = None if fd is None else (os.fstat(fd).st_dev, os.fstat(fd).st_ino)
    if fd is not None and folder_id in held:  # held by this thread already (a nested write): no flock on itself
        os.close(fd)
        yield
        return
    try:
        if fd is not None:
            with contextlib.suppress(OSError):  # a file system without flock (some network ones)
                fcntl.flock(fd, fcntl.LOCK_EX)
            _held_folders.ids = held | {folder_id}
        yield
    finally:
        if fd is not None:
            _held_folders.ids = held
            os.close(fd)  # drops the lock


def _renaming_into(folders: list[Path]) -> contextlib.AbstractContextManager[None]:
    """folder_lock on the folder holding `folders` while one atomic_write_files renames its files into place: two
    writers of the same files at once (two saves of one piece) then rename theirs one batch after the other, so the
    last one's files are all in place, never the weights of one beside the config of the other. The renames take
    moments, so the other waits."""
    return folder_lock(os.path.commonpath([os.path.abspath(folder) for folder in folders]))


def _make_folders(folder: Path) -> list[Path]:
    """Create `folder` and its missing parents; returns those created, outermost first."""
    missing = []
    while not os.path.lexists(folder) and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    for path in reversed(missing):
        path.mkdir(exist_ok=True)
    return list(reversed(missing))


def replace_folder(final: str | os.PathLike, write: Callable[[Path], object], replace: bool = True) -> Path:
    """Fill a new temp folder beside `final` with `write(tmp)`, then rename it to `final`, replacing an old one: a
    crash leaves the old folder or the new one, never a mix (plus a temp folder, which the next writer removes: one
    marked as ours, never a folder that merely has such a name).
    replace=False: a `final` that exists when the rename comes (another process wrote it meanwhile) is kept, and
    FileExistsError raised; the rename itself refuses a folder that is not empty, so no check-then-write race.
    A `final` that is a symbolic link is refused (ConfigError), before and again just before the rename: replacing
    it would rename the user's link aside, mark the folder it points to as a temp folder of ours, and put our folder
    in its place; the folder behind it is not ours to replace whole."""
    final = Path(final)
    _refuse_link(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    recover_replaced(final)
    for stale in final.parent.glob(f"{temp_prefix(final)}*"):  # left by a writer of `final` that was killed
        if _is_ours(stale):
            shutil.rmtree(stale, ignore_errors=True)
    with naming_the_target(final):
        tmp = create_temp_dir(final)
    try:
        with naming_the_target(final):
            _mark(tmp)
            write(tmp)
        (tmp / WRITING_MARKER).unlink()
        if not replace:
            try:
                os.rename(tmp, final)  # fails on a folder that is not empty (an empty one holds nothing to keep)
            except OSError as error:
                if error.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                    raise
                raise FileExistsError(errno.EEXIST, "written meanwhile by another process", str(final)) from None
        else:
            _refuse_link(final)  # one put there while `write` ran
            _swap_in(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _swap_in(tmp: Path, final: Path) -> None:
    """Rename the filled `tmp` to `final`, moving an old folder there aside first and removing it after; a failure
    puts the old folder back. Another writer of `final` may rename its folder there in the moment between (two
    overwriting saves at once): that one is moved aside too, as the old folder would have been had it come a moment
    sooner, so the last writer wins whole and no half-replaced or orphaned copy is left."""
    aside: list[Path] = []  # what was at `final`, in the order moved away: the old folder, then other writers'
    try:
        for _ in range(_SWAP_TRIES):
            if os.path.lexists(final):
                old = temp_path(final)
                try:
                    os.replace(final, old)
                except FileNotFoundError:  # another writer moved it away meanwhile
                    continue
                aside.append(old)
                with contextlib.suppress(OSError):  # a crash before the removal below leaves it for the next writer
                    _mark(old, replaced=True)
            try:
                os.replace(tmp, final)
            except OSError as error:
                if error.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
                continue  # another writer's folder was renamed to `final` in between: move it aside in turn
            break
        else:
            raise FileExistsError(errno.EEXIST, "other writers kept renaming their folders there", str(final))
    except BaseException:  # the new folder is not in place: the last one moved aside goes back, unmarked
        if aside and not os.path.lexists(final):
            with contextlib.suppress(OSError):
                (aside[-1] / WRITING_MARKER).unlink()
            os.replace(aside.pop(), final)
        for old in aside:  # replaced meanwhile by the folder now there
            shutil.rmtree(old, ignore_errors=True)
        raise
    for old in aside:
        shutil.rmtree(old, ignore_errors=True)


_SWAP_TRIES = 100  # renames of another writer's folder in between that one replace_folder outlasts


def write_new_folder(
    final: str | os.PathLike, write: Callable[[Path], object], what: str, action: str, fix: str
) -> Path:
    """replace_folder(final, write, replace=False) for a `final` that was new or empty when the caller checked it,
    maybe minutes before the rename: whatever appeared there since (the user's folder, another writer's) is kept,
    and a ConfigError says so. `what` names the folder ('save_pretrained: the folder'), `action` the work ('the
    save'); `fix` ends the message."""
    final = Path(final)
    try:
        return replace_folder(final, write, replace=False)
    except FileExistsError as error:
        if error.filename != str(final):  # not the rename's refusal
            raise
        raise ConfigError(
            f"{what} {str(final)!r} did not exist, or was empty, when {action} began, and something was put there "
            f"while it ran ({describe(final)} is there now); it is left as it is and nothing was saved. {fix}"
        ) from None


def _refuse_link(final: Path) -> None:
    """Raise ConfigError if `final` is a symbolic link (replace_folder)."""
    if os.path.islink(final):
        raise ConfigError(
            f"{str(final)!r} is a symbolic link (to {os.readlink(final)!r}); a folder is written by building it "
            "beside its path and renaming it there, which would replace the link, not fill the folder it points "
            "to, so we never write over a link: give the path of the folder itself (or a new path)"
        )


def _is_ours(path: Path) -> bool:
    """A temp folder a writer of ours left (killed mid-write): temp-named and marked, by a writer that no longer
    runs. A name alone proves nothing: a user's `.setup.20240101.tmp` backup has one."""
    marker = path / WRITING_MARKER
    return is_temp_name(path.name) and not path.is_symlink() and marker.is_file() and not _writer_runs(marker)


def _writer() -> dict[str, Any]:
    """This process as a marker names it: host, boot id and pid namespace (where Linux gives them) and pid."""
    try:
        boot = _BOOT_ID.read_text(encoding="utf-8").strip()
    except OSError:
        boot = ""
    return {"host": socket.gethostname(), "boot": boot, "pid_namespace": pid_namespace(), "pid": os.getpid()}


def pid_namespace() -> str:
    """This process's pid namespace ('pid:[4026531836]'), '' where the system does not say (no Linux /proc): two
    containers on one machine may share its host name and boot id, and each has a pid 1."""
    try:
        return os.readlink(_PID_NAMESPACE)
    except OSError:
        return ""


def _mark(folder: Path, replaced: bool = False) -> None:
    """Mark `folder` as a temp folder this process fills (WRITING_MARKER, naming the writer); `replaced`: the folder
    it moved aside from its final path, whole, to put its new one there."""
    (folder / WRITING_MARKER).write_text(json.dumps({**_writer(), "replaced": replaced}), encoding="utf-8")


def recover_replaced(final: str | os.PathLike) -> bool:
    """Put back at `final`, if nothing is there, the folder a writer killed while replacing it had moved aside (its
    new one was not yet in place): else the next writer removed that whole earlier folder as a killed writer's temp
    folder, and a write that would have been refused (an entry stored before) went through. Returns whether one was
    put back. A moment's rename: the new folder, whole but unmarked, stays beside it as litter."""
    final = Path(final)
    if os.path.lexists(final):
        return False
    for stale in sorted(final.parent.glob(f"{temp_prefix(final)}*")):
        if _is_ours(stale) and _marker(stale).get("replaced") is True:
            try:
                (stale / WRITING_MARKER).unlink()
                os.rename(stale, final)
            except OSError:  # put there meanwhile, or a place this user may not write: left as it is
                continue
            return True
    return False


def _marker(folder: Path) -> dict[str, Any]:
    try:
        stamp = json.loads((folder / WRITING_MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return stamp if isinstance(stamp, dict) else {}


def _writer_runs(marker: Path) -> bool:
    """Whether the writer `marker` names may still be filling its folder: one on another host (which we cannot ask),
    or a running process of this host's boot. An empty or unreadable marker is a killed writer's."""
    stamp = _marker(marker.parent)
    if not isinstance(stamp.get("pid"), int):
        return False
    here = _writer()
    if stamp.get("host") != here["host"]:
        return True
    if stamp.get("boot") != here["boot"]:
        return False
    if stamp.get("pid_namespace", here["pid_namespace"]) != here["pid_namespace"]:
        return True  # another container on this machine (its host name may be ours): its pids are not ours to ask
    try:
        os.kill(stamp["pid"], 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: it runs
        return True
    return True


def _fsync_directory(directory: Path) -> None:
    """Make the rename itself durable; not every platform lets a directory be opened."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
