"""A write that runs out of room (a full disk, a quota, ulimit -f) fails with StorageFullError naming the path we
were writing, not the OS's error naming a temp file of ours, and leaves what was saved there before as it was."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

import adapterfusion as af
from adapterfusion.io import atomic
from tiny_models import tiny_encoder


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _out_of_room(monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    """Every fsync fails as the kernel reports delayed allocation running out of room (the write itself passed)."""

    def fsync(fd: int) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "fsync", fsync)


def _model(reduction_factor: int) -> af.AdaptedModel:
    model = af.wrap(tiny_encoder("bert"))
    model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=reduction_factor))
    model.add_head("h", af.ClassificationHead(num_labels=2))
    return model


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT, errno.EFBIG])
def test_a_save_that_runs_out_of_room_names_its_target_and_keeps_the_earlier_save(tmp_path, monkeypatch, code):
    _model(4).save_adapter("a", tmp_path / "a")
    _model(4).save_pretrained(tmp_path / "setup")
    atomic.atomic_write_json(tmp_path / "notes.json", {"kept": True})
    before = _tree(tmp_path)
    newer = _model(8)
    _out_of_room(monkeypatch, code)
    saves = {
        "a": lambda: newer.save_adapter("a", tmp_path / "a", overwrite=True),
        "setup": lambda: newer.save_pretrained(tmp_path / "setup"),
        "new-setup": lambda: newer.save_pretrained(tmp_path / "new-setup"),  # filled in a temp folder, then renamed
        "notes.json": lambda: atomic.atomic_write_json(tmp_path / "notes.json", {"kept": False}),
    }
    for target, save in saves.items():
        with pytest.raises(af.StorageFullError) as caught:
            save()
        message = str(caught.value)
        assert str(tmp_path / target) in message and ".tmp" not in message, message
        assert os.strerror(code) in message and "nothing there was changed" in message
        assert isinstance(caught.value, OSError) and caught.value.errno == code
    monkeypatch.undo()
    assert _tree(tmp_path) == before  # no temp file left either


def test_other_os_errors_stay_the_os_errors(tmp_path, monkeypatch):
    """Only running out of room is renamed: an I/O error is not said to have changed nothing."""

    def fsync(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(OSError) as caught:
        atomic.atomic_write_json(tmp_path / "x.json", {})
    assert not isinstance(caught.value, af.StorageFullError) and caught.value.errno == errno.EIO
