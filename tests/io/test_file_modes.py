"""What the library writes gets the modes the user's umask gives any new file and folder (it was 0600 / 0700
whatever the umask, so a colleague or a server running as another user could not read a saved setup)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

import adapterfusion as af
from tiny_models import tiny_encoder


@pytest.fixture()
def umask_022() -> Iterator[None]:
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def test_saved_files_and_folders_follow_the_umask(tmp_path: Path, umask_022: None) -> None:
    model = af.wrap(tiny_encoder("bert"))
    model.add_adapter("a")
    model.add_head("h", af.ClassificationHead())
    model.save_adapter("a", tmp_path / "adapter")
    model.save_pretrained(tmp_path / "setup")
    written = [path for path in tmp_path.rglob("*")]
    assert written
    for path in written:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o755 if path.is_dir() else 0o644), (path, oct(mode))
