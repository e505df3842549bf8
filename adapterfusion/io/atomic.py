"""Atomic file writes: a temp file in the same directory, fsync, then rename, so a crash at any moment
leaves either the old file or the new one, never half of one."""
from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

TEMP_SUFFIX = ".tmp"
# `.<final name>.<8 random characters>.tmp`: the names tempfile.mkstemp/mkdtemp give with temp_prefix() and
# TEMP_SUFFIX, here and for AdapterStore's entry folders; nothing else this library writes looks like that.
_TEMP_NAME = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$")


def temp_prefix(path: Path) -> str:
    """The prefix of a temp file or folder that will be renamed to `path`: hidden, and named after it."""
    return f".{path.name}."


def is_temp_name(name: str) -> bool:
    return bool(_TEMP_NAME.match(name))


def remove_stale_temp_files(root: str | os.PathLike) -> list[Path]:
    """Delete the temp files and folders under `root` that writers killed mid-write (SIGKILL, power cut) left
    behind; returns them. Only safe while nobody writes under `root`, e.g. while holding the runner lock."""
    removed: list[Path] = []
    for directory, folders, files in os.walk(root):
        for name in [n for n in folders if is_temp_name(n)]:
            shutil.rmtree(Path(directory, name), ignore_errors=True)
            folders.remove(name)
            removed.append(Path(directory, name))
        for name in filter(is_temp_name, files):
            Path(directory, name).unlink(missing_ok=True)
            removed.append(Path(directory, name))
    return removed


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=temp_prefix(path), suffix=TEMP_SUFFIX, dir=path.parent)
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
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def replace_folder(final: str | os.PathLike, write: Callable[[Path], object]) -> Path:
    """Fill a new temp folder beside `final` with `write(tmp)`, then rename it to `final`, replacing an old one: a
    crash leaves the old folder or the new one, never a mix (plus a temp folder, which the next writer removes)."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    for stale in final.parent.glob(f"{temp_prefix(final)}*"):  # left by a writer of `final` that was killed
        if is_temp_name(stale.name):
            shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=temp_prefix(final), suffix=TEMP_SUFFIX, dir=final.parent))
    try:
        write(tmp)
        if final.exists():
            old = tmp.with_name(f"{temp_prefix(final)}{os.urandom(4).hex()}{TEMP_SUFFIX}")
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


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
