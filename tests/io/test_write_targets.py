"""What a write finds at its target and leaves there when it fails: an old folder that a failed replacement must not
lose, a write-protected file, a folder that appears while a new setup is built, an AdapterHub export interrupted
between its renames (which a retry may replace, unlike weights that no config claims)."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from unittest import mock

import pytest

import adapterfusion as af
from adapterfusion.interop import export_adapterhub
from adapterfusion.io import atomic
from adapterfusion.io.paths import check_writable_file
from adapterfusion.serialization import setup as saved_setups
from setup_fixtures import fail_call
from tiny_models import tiny_encoder


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _model() -> af.AdaptedModel:
    model = af.wrap(tiny_encoder("bert"))
    model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4))
    return model


@pytest.mark.parametrize("error", [OSError(errno.EIO, "Input/output error"), KeyboardInterrupt()])
def test_a_replacement_that_cannot_be_renamed_into_place_puts_the_old_folder_back(tmp_path, monkeypatch, error):
    """The old folder was renamed aside and marked as a temp folder of ours; the new one failing to take its place
    left neither at the final path, and the next writer removed the marked old one: the entry was lost."""
    final = tmp_path / "entry"
    final.mkdir()
    (final / "weights").write_text("trained")
    fail_call(monkeypatch, os, "replace", 2, error)  # 1: the old folder aside, 2: the new one into place
    with pytest.raises(type(error)):
        atomic.replace_folder(final, lambda tmp: (tmp / "weights").write_text("new"))
    monkeypatch.undo()
    assert [p.name for p in tmp_path.iterdir()] == ["entry"]
    assert _tree(final) == {"weights": b"trained"}


def test_a_write_protected_file_is_not_replaced(tmp_path):
    """A rename replaces a file whatever its mode: a report or result the user made read-only was overwritten."""
    path = tmp_path / "result.json"
    path.write_text("{}")
    real_access = os.access

    def access(where, mode, *args, **kwargs):  # root writes any file: answer as the kernel answers its owner
        return False if Path(where) == path and mode & os.W_OK else real_access(where, mode, *args, **kwargs)

    path.chmod(0o444)
    try:
        with mock.patch("os.access", access), pytest.raises(af.ConfigError, match="read-only .write-protected."):
            check_writable_file(path, "--json")
    finally:
        path.chmod(0o644)
    assert check_writable_file(path, "--json") == path  # writable again: replaced, as asked


def test_an_empty_folder_that_appears_while_a_new_setup_is_built_takes_the_setup(tmp_path):
    """Only a folder holding something is kept: an empty one holds nothing to lose, and the rename fills it."""
    target, real = tmp_path / "setup", saved_setups.atomic_write_files

    def racing(files, *args, **kwargs):
        target.mkdir(exist_ok=True)
        return real(files, *args, **kwargs)

    with mock.patch.object(saved_setups, "atomic_write_files", racing):
        _model().save_pretrained(target)
    assert af.AdaptedModel.from_pretrained(tiny_encoder("bert"), target).adapter_names == ["a"]


def test_an_export_cut_off_between_its_renames_is_replaced_by_its_retry(tmp_path, monkeypatch):
    """Weights without a config are refused as nobody's, except what an export of ours left: its pending file says
    so, and the retry with overwrite=True replaces them."""
    model, folder = _model(), tmp_path / "x"
    fail_call(monkeypatch, os, "replace", 3, OSError(errno.EIO, "Input/output error"))  # pending, weights, config
    with pytest.raises(OSError):
        export_adapterhub(model, "adapter", "a", folder)
    monkeypatch.undo()
    assert sorted(p.name for p in folder.iterdir()) == [".adapterfusion-adapter-export-pending", "adapter.safetensors"]
    with pytest.raises(af.ConfigError, match="whose export was interrupted"):
        export_adapterhub(model, "adapter", "a", folder)
    export_adapterhub(model, "adapter", "a", folder, overwrite=True)
    assert sorted(p.name for p in folder.iterdir()) == ["adapter.safetensors", "adapter_config.json"]
    assert af.wrap(tiny_encoder("bert")).load_adapter(folder) == "a"
