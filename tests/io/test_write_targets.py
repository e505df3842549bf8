"""What a write finds at its target and leaves there when it fails: an old folder that a failed replacement must not
lose, a write-protected file, a folder that appears while a new setup or a prune output is built, a folder path that
is a symlink, an AdapterHub export interrupted between its renames (which a retry may replace, unlike weights that
no config claims)."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

import adapterfusion as af
from adapterfusion import pruning
from adapterfusion.interop import export_adapterhub
from adapterfusion.io import atomic
from adapterfusion.io.paths import check_writable_file, check_writable_folder
from adapterfusion.serialization import setup_save as saved_setups
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


@pytest.mark.parametrize("replace", [True, False])
def test_a_folder_path_that_is_a_symlink_is_refused_and_its_target_left_alone(tmp_path, replace):
    """The link was renamed aside, the marker of our temp folders written into the folder it points to, and our
    folder put in the link's place: the user's link was gone and their folder marked as ours to remove."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("mine")
    (tmp_path / "entry").symlink_to(mine)
    with pytest.raises(af.ConfigError, match="is a symbolic link .to .*mine.*give the path of the folder itself"):
        atomic.replace_folder(tmp_path / "entry", lambda tmp: (tmp / "weights").write_text("new"), replace=replace)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["entry", "mine"]
    assert os.readlink(tmp_path / "entry") == str(mine)
    assert _tree(mine) == {"thesis.tex": b"mine"}


def _fused_model() -> af.AdaptedModel:
    model = _model()
    model.add_adapter("b", af.AdapterConfig.pfeiffer(reduction_factor=4))
    model.add_fusion("f", ["a", "b"])
    model.add_head("h", af.ClassificationHead(num_labels=2))
    return model


def _racing_prune(monkeypatch, meanwhile) -> None:
    """Run `meanwhile()` once, as prune writes its record into the temp folder (minutes after --output was checked)."""
    real, done = pruning.atomic_write_json, []

    def racing(path, data):
        if not done:
            done.append(meanwhile())
        return real(path, data)

    monkeypatch.setattr(pruning, "atomic_write_json", racing)


def test_a_prune_output_that_appears_while_the_prune_runs_is_kept(tmp_path, monkeypatch):
    """prune checked --output (new), evaluated for minutes, then renamed its output over whatever was there by then."""
    output, incoming = tmp_path / "pruned", tmp_path / "incoming"
    incoming.mkdir()
    (incoming / "thesis.tex").write_text("mine")
    _racing_prune(monkeypatch, lambda: incoming.rename(output))
    with pytest.raises(af.ConfigError, match="did not exist, or was empty, when the prune began.*nothing was saved"):
        pruning._write_output(output, tmp_path / "run", False, _fused_model(), "h", {"after": {"fusion": "f"}})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pruned"]
    assert _tree(output) == {"thesis.tex": b"mine"}


def test_an_earlier_prune_output_is_checked_again_before_it_is_replaced(tmp_path, monkeypatch):
    """An earlier prune output of this run is replaced whole: a file put into it while the prune ran is kept."""
    run, output = tmp_path / "run", tmp_path / "pruned"
    output.mkdir()
    record = {"before": {}, "after": {"fusion": "f"}, "kept": [], "dropped": [], "source_run": str(run.resolve())}
    (output / "pruning.json").write_text(json.dumps(record))
    _racing_prune(monkeypatch, lambda: (output / "notes.txt").write_text("mine"))
    with pytest.raises(af.ConfigError, match="also holds 'notes.txt', which prune did not write"):
        pruning._write_output(output, run, True, _fused_model(), "h", record)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pruned"]
    assert _tree(output) == {"notes.txt": b"mine", "pruning.json": json.dumps(record).encode()}


def test_a_temp_folder_another_writer_is_still_filling_is_not_removed_as_a_killed_ones(tmp_path):
    """Each replace_folder of a path removed every marked temp folder beside it as a killed writer's: a second
    process saving the same path removed the first one's folder while it was being filled, and the first failed with
    a raw FileNotFoundError. The marker names its writer; only one that no longer runs has its folder removed."""
    final = tmp_path / "setup"
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    here = atomic._writer()
    writers = {
        "running": here,
        "killed": {**here, "pid": int(finished.stdout)},
        "rebooted": {**here, "boot": "another boot", "pid": os.getpid()},
        "elsewhere": {**here, "host": "another-host"},
        "unnamed": None,  # a marker written before markers named their writer
    }
    for name, writer in writers.items():
        folder = tmp_path / f".setup.{name[:8]:_<8}.tmp"
        folder.mkdir()
        (folder / "adapter.safetensors").write_text("half")
        (folder / atomic.WRITING_MARKER).write_text("" if writer is None else json.dumps(writer))

    def second_writer(tmp: Path) -> None:
        (tmp / "adapter.safetensors").write_text("whole")

    atomic.replace_folder(final, second_writer)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".setup.elsewher.tmp", ".setup.running_.tmp", "setup"]

    def first_writer(tmp: Path) -> None:  # another writer of the path comes and goes while this one fills its folder
        (tmp / "a").write_text("1")
        atomic.replace_folder(final, second_writer)
        (tmp / "b").write_text("2")

    atomic.replace_folder(final, first_writer)
    assert _tree(final) == {"a": b"1", "b": b"2"}


def test_a_place_that_takes_no_new_folder_is_refused_up_front_and_the_probe_leaves_nothing(tmp_path, monkeypatch):
    """os.access answers from permission bits (for root: always yes), so /proc and /sys, which refuse any new entry,
    passed the check and the save failed half-way with a raw OSError. The check asks the file system itself, by
    creating and removing an empty temp folder."""
    assert check_writable_folder(tmp_path / "new" / "setup", "the folder") == tmp_path / "new" / "setup"
    assert list(tmp_path.iterdir()) == []  # the probe is gone

    def refuse(path, *args, **kwargs):
        raise PermissionError(errno.EPERM, "Operation not permitted", str(path))

    monkeypatch.setattr(os, "mkdir", refuse)
    with pytest.raises(af.ConfigError, match=r"the folder '.*/new/setup' cannot be written: the file system refuses"):
        check_writable_folder(tmp_path / "new" / "setup", "the folder")
    with pytest.raises(af.ConfigError, match=r"save_adapter: the adapter folder .* \(Operation not permitted, EPERM\)"):
        _model().save_adapter("a", tmp_path / "a")


def test_a_full_disk_found_by_the_probe_is_left_to_the_writer(tmp_path, monkeypatch):
    """Its StorageFullError says what became of the earlier save; the check says nothing of it."""

    def full(path, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(os, "mkdir", full)
    assert check_writable_folder(tmp_path, "the folder") == tmp_path


@pytest.mark.parametrize("place", ["/proc/af-probe-x", "/sys/af-probe-x/y"])
def test_kernel_file_systems_are_refused_as_places_to_save(tmp_path, place):
    if not os.path.isdir("/" + place.split("/")[1]):
        pytest.skip("no such kernel file system here")
    with pytest.raises(af.ConfigError, match=f"save_pretrained: the folder '{place}'"):
        _model().save_pretrained(place)


def test_a_write_the_os_refuses_after_the_checks_names_the_target_and_keeps_the_earlier_save(tmp_path, monkeypatch):
    """An immutable folder, a security module or a permission changed since the check: the OS's PermissionError
    named a temp file of ours. It is now our error (still an OSError), naming the target; the earlier save stays."""
    model = _model()
    saved = model.save_adapter("a", tmp_path / "a")
    before = _tree(saved)
    real_open = os.open

    def refusing(path, flags, *args, **kwargs):
        if flags & os.O_CREAT and os.fsdecode(path).startswith(str(saved)):
            raise PermissionError(errno.EPERM, "Operation not permitted", os.fsdecode(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing)
    with pytest.raises(atomic.UnwritableTargetError, match=r"/a/adapter_config.json' failed: the OS refused") as caught:
        model.save_adapter("a", saved)
    assert isinstance(caught.value, OSError) and caught.value.errno == errno.EPERM
    assert _tree(saved) == before and sorted(p.name for p in saved.iterdir()) == sorted(before)


def test_an_error_reading_a_source_while_writing_is_not_said_to_be_the_targets(tmp_path):
    """Only an error about the place written becomes UnwritableTargetError; a source that cannot be read stays the
    OS's error about that source."""

    def read_elsewhere(tmp):
        raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path.parent / "source"))

    with pytest.raises(PermissionError) as caught:
        atomic.replace_folder(tmp_path / "out", read_elsewhere)
    assert not isinstance(caught.value, atomic.UnwritableTargetError)
    assert list(tmp_path.iterdir()) == []
