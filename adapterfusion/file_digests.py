"""sha256 of files on disk, remembered for the life of the process by path and stat (inode, size, modification and
change times). A run records the digests of the data files and encoder weights it read, and the experiment runner
compares them with the files now for every finished job at each start: 36 jobs on one encoder must not read its
weights 36 times. A file rewritten or replaced since gets another stat, so it is read again."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping

_CHUNK = 1 << 20  # read in pieces: an encoder's weights may be larger than the memory to spare
_known: dict[tuple[str, int, int, int, int], str] = {}


def file_sha256(path: str | os.PathLike) -> str:
    """The sha256 of the file's bytes; OSError if it cannot be read (gone, a folder, no permission)."""
    name = os.path.abspath(path)
    stat = os.stat(name)
    key = (name, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
    if key not in _known:
        _known[key] = _read_sha256(name)
    return _known[key]


def files_sha256(paths: Iterable[str | os.PathLike]) -> dict[str, str]:
    """{absolute path: sha256} of each file, as a run's config.json records the files it read."""
    return {os.path.abspath(path): file_sha256(path) for path in paths}


def first_changed(recorded: Mapping[str, object]) -> tuple[str, str] | None:
    """(path, sha256 now) of the first file of `recorded` ({path: sha256 then}) that holds other bytes now; a file
    that cannot be read (gone: an output dir copied to another machine) cannot be judged and is passed over."""
    for path, digest in recorded.items():
        try:
            now = file_sha256(path)
        except OSError:
            continue
        if now != digest:
            return path, now
    return None


def _read_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        while chunk := stream.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
