"""The one judge of file and folder targets, for writing and for reading. Names that come from files or users —
experiment files, task descriptions, a piece's name — become folder names under an output dir, a setup or a store:
`path_part` makes sure such a name stays one folder name of a length the file system takes, so that none can write
outside that root ('..', an absolute path, a separator) or fail with "File name too long".

Output paths are checked up front (`check_writable_folder`, `check_writable_file`), before any work: a file, FIFO or
device where a folder goes, a folder where a file goes, a symlink loop or a dangling symlink, a name too long, a
read-only place. And nothing already there that we did not write is overwritten: a folder we write files into says
which files (`writes`) and how to tell that what is there is ours (`ours`); anything else in it is left alone.
Files and folders to read are checked by `check_readable_file` and `check_readable_folder`, which say what is there
instead of calling it "missing", and name a file or folder this user may not read (`permission_denied`) as such
instead of calling it corrupt."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import tempfile
from collections.abc import Callable, Collection
from pathlib import Path, PurePosixPath, PureWindowsPath

from adapterfusion._validation import short_repr
from adapterfusion.errors import AdapterFusionError, ConfigError, SerializationError

_SEPARATORS = ("/", "\\", "\0")
NAME_MAX = 255  # bytes per file or folder name on Linux (ext4, xfs, btrfs, tmpfs); os.pathconf tells where it can
PATH_MAX = 4096  # bytes in a whole path on Linux
# A file is written as `.<name>.<8 random characters>.tmp` first, then renamed (io/atomic.py): 14 bytes more.
TEMP_NAME_EXTRA = len("..12345678.tmp")
# The empty temp folder check_writable_folder creates and removes to ask the file system whether it takes new entries.
PROBE_NAME = "af-probe"
# tempfile.mkdtemp's names: 8 of these characters between prefix and suffix
_PROBE = re.compile(rf"^\.{PROBE_NAME}\.[a-z0-9_]{{8}}\.tmp$")
# What the OS answers a write that runs out of room: a full disk, a quota, a file-size limit (ulimit -f).
OUT_OF_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
Error = type[AdapterFusionError]
DENIED_ERRNOS = (errno.EACCES, errno.EPERM)  # what an OSError says when this user may not read


def user_path(path: str | os.PathLike[str]) -> Path:
    """`path` with a leading '~' or '~name' expanded to that home folder; a '~name' of no such user stays as written
    (and is then said to be missing by whatever reads it), where pathlib's expanduser raises a RuntimeError."""
    return Path(os.path.expanduser(os.fspath(path)))


def as_path(value: object, what: str, error: Error = ConfigError) -> Path:
    """`value` as a Path if it is a non-empty str or os.PathLike; else `error` naming `what`. An empty string would
    be Path('.'), the current folder, and None a TypeError from pathlib. A leading ~ is the user's home, as when the
    path is read (io/hub.py locate): saving to '~/x' wrote a folder named '~' in the current one."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value.strip():
        raise error(
            f"{what} {short_repr(value)} is not a path; give a folder or file path (a non-empty string or Path)"
        )
    return user_path(value)


def path_part(value: object, what: str) -> str:
    """`value` if it is one plain folder name the file system takes; else ConfigError naming `what`, the value and
    the rule."""
    if (
        not isinstance(value, str)
        or value.strip() in ("", ".", "..")
        or any(s in value for s in _SEPARATORS)
        or PurePosixPath(value).is_absolute()
        or PureWindowsPath(value).drive
    ):
        raise ConfigError(
            f"{what} {short_repr(value)} cannot be a folder name: it must be one plain name without '/', '\\', '..' "
            "or a drive, or it would lead outside the folder it is written to"
        )
    return check_name_length(value, what)


def name_max(path: str | os.PathLike) -> int:
    """The longest file or folder name, in bytes, that the file system holding `path` (or its nearest existing
    folder) takes: os.pathconf's PC_NAME_MAX where the platform has it, else Linux's 255."""
    folder = Path(os.path.abspath(path))
    while not os.path.isdir(folder) and folder != folder.parent:
        folder = folder.parent
    try:
        return int(os.pathconf(folder, "PC_NAME_MAX"))
    except (AttributeError, ValueError, OSError):
        return NAME_MAX


def check_name_length(
    name: str, what: str, where: str | os.PathLike = ".", extra: int = 0, error: Error = ConfigError
) -> str:
    """`name` if a folder of that name (or, with `extra`=TEMP_NAME_EXTRA, a file written under a temp name that
    much longer) can be created in `where`; else `error` naming the limit."""
    size, limit = len(os.fsencode(name)), name_max(where)
    if size > limit - extra:
        shown = name if len(name) <= 40 else f"{name[:20]}...{name[-12:]}"
        temp = f" ({limit - extra} for one first written under a temp name {extra} bytes longer)" if extra else ""
        raise error(
            f"{what} {shown!r} is {size} bytes long; a file or folder name may have at most {limit} bytes on this "
            f"file system{temp}; choose a shorter name"
        )
    return name


def describe(path: str | os.PathLike) -> str:
    """What is at `path`, in words: 'a folder', 'a file', 'a FIFO (named pipe)', 'a character device', 'a symlink
    loop', 'a symlink to X, which does not exist', 'nothing' ... (a symlink to a device says where it points)."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except OSError as error:
        return _unreachable(path, error)
    except ValueError:  # the OS takes no path with a NUL in it
        return "no path the OS can open (it holds a NUL character)"
    kinds = (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISREG, "a file"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    kind = next((words for test, words in kinds if test(mode)), "a special file")
    if path.is_symlink() and kind not in ("a folder", "a file"):
        kind += f" (a symlink to {os.readlink(path)!r})"
    return kind


def _unreachable(path: Path, error: OSError) -> str:
    if error.errno in DENIED_ERRNOS:
        return "out of this user's reach (a folder on its path may not be searched: permission denied)"
    if error.errno == errno.ELOOP:
        return "a symlink loop (a link that leads back to itself, which no file or folder can be created through)"
    if error.errno == errno.ENAMETOOLONG:
        return "a path with a name longer than the file system allows"
    if os.path.islink(path):
        return f"a symlink to {os.readlink(path)!r}, which does not exist"
    if error.errno in (errno.ENOENT, errno.ENOTDIR):  # ENOTDIR: a path through a file, which holds nothing
        return "nothing"
    return f"unreachable ({error.strerror})"


def _check_lengths(path: Path, what: str, is_file: bool, error: Error, temp_folder: bool = False) -> None:
    """Every name in `path` within the file system's limit (the last with room for its temp name when it is a
    file we write, or a folder first built under a temp name), and the whole path within PATH_MAX."""
    for i, part in enumerate(path.parts):
        extra = TEMP_NAME_EXTRA if (is_file or temp_folder) and i == len(path.parts) - 1 else 0
        check_name_length(part, f"{what} {_short(path)!r}: the name", path, extra, error)
    if len(os.fsencode(os.path.abspath(path))) + TEMP_NAME_EXTRA > PATH_MAX:
        raise error(
            f"{what} {_short(path)!r} is too long: a whole path may have at most {PATH_MAX} bytes on Linux; "
            "choose a shorter path"
        )


def _short(path: Path) -> str:
    text = str(path)
    return text if len(text) <= 120 else f"{text[:60]}...{text[-40:]}"


def check_writable_folder(
    path: str | os.PathLike,
    what: str,
    *,
    writes: Collection[str] = (),
    ours: Callable[[Path], bool] | None = None,
    only_ours: str | None = None,
    error: Error = ConfigError,
    fix: str = "choose a folder you can write in, or change its permissions",
    built_aside: bool = False,
) -> Path:
    """`path` as a Path if it is, or can be created as, a folder this process may write in; else `error` naming
    `what`. Checked before any work, so a bad output path fails at once instead of after a computation.
    `built_aside`: a new folder is first built whole under a temp name beside it and then renamed (io/atomic.py
    replace_folder), so its name must leave room for that temp name.

    Nothing already there that we did not write is overwritten: each of the files `writes` names that exists must
    be a regular file, one of ours if `ours` is given (`ours(path)`: the folder holds what we wrote there), and not
    write-protected (check_not_protected). With `only_ours` (what ours is, e.g. 'a saved setup'), a folder holding
    anything must be ours as a whole. `fix`: what to do about a read-only place."""
    path = as_path(path, what, error)
    _check_lengths(path, what, is_file=False, error=error, temp_folder=built_aside and not os.path.lexists(path))
    found = describe(path)
    if found not in ("a folder", "nothing"):
        fix = "choose a folder path (or remove the file)" if found == "a file" else "choose another folder path"
        raise error(f"{what} {str(path)!r} is {found}, not a folder; {fix}")
    existing = path
    while describe(existing) == "nothing" and existing != existing.parent:
        existing = existing.parent
    found = describe(existing)
    if found != "a folder":
        raise error(
            f"{what} {str(path)!r} cannot be created: {str(existing)!r} is {found}, not a folder; choose another path"
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        state = "is" if existing == path else f"would be created in {str(existing)!r}, which is"
        raise error(f"{what} {str(path)!r} {state} read-only for this user; {fix}")
    _check_can_create(existing, f"{what} {str(path)!r}", fix, error)
    if existing == path:
        _check_nothing_foreign(path, what, writes, ours, only_ours, error)
    return path


def _check_can_create(folder: Path, subject: str, fix: str, error: Error) -> None:
    """Ask the file system itself whether `folder` takes new entries, by creating an empty temp folder there and
    removing it: os.access answers from permission bits, and for root from nothing at all, so /proc and /sys (which
    refuse any new file, to root too) passed it and the save failed half-way with a raw OSError. A full disk is left
    to the writer, whose StorageFullError says what happened to the earlier save."""
    _remove_left_probes(folder)
    try:  # named as io/atomic.py names its temp folders, `.<name>.<8 random characters>.tmp`
        probe = Path(tempfile.mkdtemp(prefix=f".{PROBE_NAME}.", suffix=".tmp", dir=folder))
    except FileExistsError:  # no free temp name: nothing learnt, the writer will tell
        return
    except OSError as err:
        if err.errno in OUT_OF_ROOM:
            return
        code = errno.errorcode.get(err.errno or 0, str(err.errno))
        raise error(
            f"{subject} cannot be written: the file system refuses to create anything in {str(folder)!r} "
            f"({err.strerror}, {code}), as a kernel file system such as /proc or /sys does, or a read-only mount, or "
            f"a place this user may not write; nothing was written. {fix[:1].upper()}{fix[1:]}"
        ) from None
    with contextlib.suppress(OSError):
        probe.rmdir()


def _remove_left_probes(folder: Path) -> None:
    """Remove the empty probe folders a check killed between creating and removing its probe left in `folder`: one
    there made the folder not empty for good, and every later save into it (or run into that output dir) was
    refused. Only empty ones go (rmdir): a folder of the user's of that name, with anything in it, stays."""
    with contextlib.suppress(OSError, ValueError):
        for entry in os.scandir(folder):
            if _PROBE.fullmatch(entry.name) and entry.is_dir(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    os.rmdir(entry.path)


def _is_probe(entry: Path) -> bool:
    """Whether `entry` is an empty probe folder: one another process's check has in this folder right now."""
    if not _PROBE.fullmatch(entry.name) or entry.is_symlink() or not entry.is_dir():
        return False
    with contextlib.suppress(OSError):
        return not any(entry.iterdir())
    return False


def _check_nothing_foreign(
    path: Path,
    what: str,
    writes: Collection[str],
    ours: Callable[[Path], bool] | None,
    only_ours: str | None,
    error: Error,
) -> None:
    """Refuse to write into `path` where that would overwrite (or, for a whole setup, mix with) what we did not
    write."""
    if only_ours and ours is not None:
        held = sorted(
            entry.name
            for entry in check_readable_folder(path, f"{what} {str(path)!r}", error=error).iterdir()
            if not _is_probe(entry)
        )
        if held and not ours(path):
            raise error(
                f"{what} {str(path)!r} is not empty (it holds {listing(held)}) and is not {only_ours}; we never "
                "overwrite or delete what we did not write: save into a new or empty folder"
            )
    for name in writes:
        target = path / name
        if not os.path.lexists(target):
            continue
        found = describe(target)
        if found != "a file":
            raise error(
                f"{what} {str(path)!r} holds {name!r}, which is {found} where our file goes; choose another folder, "
                f"or move {str(target)!r} away"
            )
        if ours is None or not ours(path):
            whose = "which we did not write there" if ours is not None else "which may not be ours"
            raise error(
                f"{what} {str(path)!r} already holds {name!r}, {whose}; we never overwrite a file we did not write: "
                f"choose another folder, or move {str(target)!r} away"
            )
        check_not_protected(target, f"{what} {str(path)!r} holds {name!r}, which", error)


def check_not_protected(path: Path, subject: str, error: Error) -> None:
    """Refuse to replace the file `path` when it is read-only for this user: a rename replaces a file whatever its
    mode, so the write protection a user gave a file (chmod a-w: keep this one) would be overridden without a word.
    `subject` starts the message ('... which')."""
    write_bits = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH  # none set: protected even for root, whom access() lets
    if not os.access(path, os.W_OK) or not os.stat(path).st_mode & write_bits:
        raise error(
            f"{subject} is read-only (write-protected) for this user; we never replace a protected file: make it "
            f"writable first (chmod u+w {str(path)!r}) if it is to be replaced, or choose another path"
        )


def listing(names: list[str]) -> str:
    """The first five `names` quoted, and how many more, for a message saying what a folder holds."""
    return ", ".join(repr(n) for n in names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def check_writable_file(path: str | os.PathLike, what: str, error: Error = ConfigError) -> Path:
    """`path` as a Path if a file can be written there: nothing or a regular file there (replaced, as asked, unless
    it is read-only: check_not_protected), in a folder that is (or can be) writable. A folder, FIFO, device or
    symlink loop there is refused."""
    path = as_path(path, what, error)
    _check_lengths(path, what, is_file=True, error=error)
    found = describe(path)
    if found == "a folder":
        raise error(f"{what} {str(path)!r} is a folder; give a file path, e.g. {str(path / 'result.json')!r}")
    if found not in ("a file", "nothing"):
        raise error(f"{what} {str(path)!r} is {found}, not a regular file; give the path of a file to write")
    check_writable_folder(path.parent, f"the folder of {what}", error=error)
    if found == "a file":
        check_not_protected(path, f"{what} {str(path)!r}", error)
    return path


def check_readable_file(
    path: str | os.PathLike,
    fix: str,
    what: str | None = None,
    error: Error = SerializationError,
    missing: str | None = None,
) -> Path:
    """`path` as a Path if it is a regular file this user may read; else `error` saying what is there instead
    (nothing, a folder, a device, a FIFO, a symlink loop...) and `fix` (`missing`, if given, when nothing is there),
    or that this user may not read it (permission_denied). A device is never read: /dev/zero would never end. The
    message starts with `what` and the quoted path, or with the bare path when `what` is None."""
    path = Path(path)
    found = describe(path)
    subject = str(path) if what is None else f"{what} {str(path)!r}"
    if found == "a file":
        if not os.access(path, os.R_OK):
            raise permission_denied(path, subject, error)
        return path
    if found == "nothing":
        raise error(f"{subject} is missing; {missing or fix}")
    if out_of_reach(path):
        raise permission_denied(path, subject, error)
    raise error(f"{subject} is {found}, not a file; {fix}")


def check_readable_folder(
    path: str | os.PathLike, subject: str | None = None, error: Error = SerializationError
) -> Path:
    """`path` as a Path if it is a folder this user may list and open files in; else `error` naming `subject`
    (default: the path) and what is there instead, or that this user may not read it (permission_denied)."""
    path = Path(path)
    subject = subject or str(path)
    found = describe(path)
    if found == "a folder":
        if not os.access(path, os.R_OK | os.X_OK):
            raise permission_denied(path, subject, error)
        return path
    if out_of_reach(path):
        raise permission_denied(path, subject, error)
    raise error(f"{subject} is {found}, not a folder; pass a folder")


def out_of_reach(path: Path) -> bool:
    """Whether this user may not even look at `path`: a folder on its path may not be searched."""
    try:
        os.stat(path)
    except OSError as err:
        return err.errno in DENIED_ERRNOS
    except ValueError:
        return False
    return False


def permission_denied(
    path: str | os.PathLike, subject: str | None = None, error: Error = SerializationError
) -> AdapterFusionError:
    """The error for a file or folder (`subject`, default its path) that this user may not read: which folder on its
    path is closed to it, and the fix. Never "corrupt": nothing is wrong with the file itself."""
    path = Path(path)
    subject = subject or str(path)
    blocked = next(
        (
            folder
            for folder in reversed(Path(os.path.abspath(path)).parents)
            if os.path.isdir(folder) and not os.access(folder, os.X_OK)
        ),
        None,
    )
    if blocked is not None:
        return error(
            f"{subject} cannot be read by this user: the folder {str(blocked)!r} on its path may not be searched "
            f"(permission denied); check its permissions (e.g. chmod u+rx {str(blocked)!r} as its owner), or read "
            "it as a user who may"
        )
    flags = "u+rx" if os.path.isdir(path) else "u+r"
    return error(
        f"{subject} cannot be read by this user (permission denied); check its permissions (e.g. chmod {flags} "
        f"{str(path)!r} as its owner), or read it as a user who may"
    )


def check_writable_tree(folder: str | os.PathLike, what: str, fix: str, error: Error = ConfigError) -> None:
    """Refuse `folder` unless this user may remove what is in it: it and every folder below it writable and
    searchable (and readable, to be walked). Checked before anything is written, so a removal never fails half-way."""
    walk = os.walk(os.fspath(folder), onerror=lambda err: _raise_denied(err, what, fix, error))  # links not followed
    for root, _, _ in walk:
        if not os.access(root, os.W_OK | os.X_OK | os.R_OK):
            raise error(f"{what}: {str(root)!r} is read-only for this user; {fix}")


def _raise_denied(err: OSError, what: str, fix: str, error: Error) -> None:
    raise error(f"{what}: {err.filename!r} cannot be read by this user ({err.strerror}); {fix}")


def foreign_files(folder: str | os.PathLike, ours: Callable[[str], bool]) -> list[str]:
    """The files and folders under `folder` (relative, '/'-separated) that `ours` does not claim: what replacing
    or removing the folder would delete although we did not write it. A folder counts only if it is empty."""
    folder = Path(folder)
    found = []
    for root, dirs, files in os.walk(folder):
        relative = Path(root).relative_to(folder).as_posix()
        for name in files + [d for d in dirs if not os.listdir(os.path.join(root, d))]:
            name = name if relative == "." else f"{relative}/{name}"
            if not ours(name):
                found.append(name)
    return sorted(found)


def check_replaceable(
    folder: str | os.PathLike, what: str, ours: Callable[[str], bool], error: Error = ConfigError
) -> None:
    """Refuse to replace `folder` as a whole if it holds anything `ours` does not claim (see foreign_files)."""
    foreign = foreign_files(folder, ours) if Path(folder).is_dir() else []
    if foreign:
        raise error(
            f"{what} {str(folder)!r} holds {listing(foreign)}, which we did not write; replacing it would delete "
            f"{'them' if len(foreign) > 1 else 'it'}: move {'them' if len(foreign) > 1 else 'it'} out of the folder "
            "first"
        )
