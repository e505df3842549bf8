"""Names read from files become folder names; none may lead outside the folder it is written to, or be longer than
the file system takes. The judge of file and folder targets (io/paths.py) says what is at a path in words."""

from __future__ import annotations

import os

import pytest

import adapterfusion as af
from adapterfusion.experiments.plan import Job
from adapterfusion.io.paths import (
    TEMP_NAME_EXTRA,
    check_replaceable,
    check_writable_file,
    check_writable_folder,
    describe,
    foreign_files,
    name_max,
    path_part,
)
from adapterfusion.training.run import run_dir_for
from adapterfusion.training.setups import Setup, register_setup
from adapterfusion.training.store import AdapterStore, encoder_key
from tiny_models import tiny_encoder

ESCAPES = ["..", ".", "", " ", "../x", "a/../../b", "/abs", "a\\..\\b", "C:x", "x\0y", None, 3]


@pytest.mark.parametrize("name", ["rte", "anli.r1", "st-a-rf16", "seed-1", "..a", "a.."])
def test_plain_names_pass(name):
    assert path_part(name, "task") == name


@pytest.mark.parametrize("name", ESCAPES)
def test_names_that_would_leave_their_folder_are_refused(name, tmp_path):
    with pytest.raises(af.ConfigError, match="cannot be a folder name"):
        path_part(name, "task")
    if isinstance(name, str):
        with pytest.raises(af.ConfigError):
            run_dir_for(tmp_path, name, "st-a", 1)
        with pytest.raises(af.ConfigError):
            AdapterStore(tmp_path).path("enc", "rte", name, 1)
        with pytest.raises(af.ConfigError):
            Job("j", name, "head", "rte", 1).variant_dir(tmp_path)


def test_encoder_keys_and_setup_names_stay_single_folder_names(tmp_path):
    assert encoder_key("/") == "encoder" and "." not in (encoder_key(".."), encoder_key("."))
    assert AdapterStore(tmp_path).path("..", "rte", "st-a", 1).resolve().is_relative_to(tmp_path.resolve())
    with pytest.raises(af.ConfigError, match="setup"):
        register_setup(Setup("../evil", lambda model, context: None, {}, "escapes"))


def test_resaving_a_piece_keeps_the_users_files_beside_it(tmp_path):
    """#21: save_adapter onto its own earlier save rewrites our two files; a file the user put beside them stays."""
    model = af.wrap(tiny_encoder("bert"))
    model.add_adapter("a", "pfeiffer")
    folder = model.save_adapter("a", tmp_path / "a")
    (folder / "notes.txt").write_text("mine")
    assert model.save_adapter("a", folder) == folder
    assert sorted(p.name for p in folder.iterdir()) == ["adapter.safetensors", "adapter_config.json", "notes.txt"]
    assert (folder / "notes.txt").read_text() == "mine"


def test_names_up_to_the_file_systems_limit_are_taken(tmp_path):
    """A folder name may use all of NAME_MAX; a file we write keeps room for its temp name."""
    limit = name_max(tmp_path)
    assert path_part("n" * limit, "task") == "n" * limit
    assert check_writable_folder(tmp_path / ("n" * limit), "out") == tmp_path / ("n" * limit)
    check_writable_file(tmp_path / ("n" * (limit - TEMP_NAME_EXTRA)), "--json")
    with pytest.raises(af.ConfigError, match=f"{limit + 1} bytes long; .* at most {limit} bytes"):
        path_part("n" * (limit + 1), "task")
    with pytest.raises(af.ConfigError, match="first written under a temp name"):
        check_writable_file(tmp_path / ("n" * (limit - TEMP_NAME_EXTRA + 1)), "--json")


def test_what_is_at_a_path_is_said_in_words(tmp_path):
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    (tmp_path / "null").symlink_to("/dev/null")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "file").write_text("x")
    assert describe(tmp_path) == "a folder" and describe(tmp_path / "file") == "a file"
    assert describe(tmp_path / "nothing") == describe(tmp_path / "file" / "under") == "nothing"
    assert describe(tmp_path / "loop").startswith("a symlink loop")
    assert describe(tmp_path / "dangling") == f"a symlink to {str(tmp_path / 'gone')!r}, which does not exist"
    assert describe(tmp_path / "null") == "a character device (a symlink to '/dev/null')"
    assert describe(tmp_path / "fifo") == "a FIFO (named pipe)"


def test_replacing_a_folder_is_refused_only_for_what_we_did_not_write(tmp_path):
    (tmp_path / "entry" / "adapter").mkdir(parents=True)
    (tmp_path / "entry" / "adapter" / "adapter.safetensors").write_bytes(b"")
    (tmp_path / "entry" / "empty").mkdir()
    ours = {"adapter/adapter.safetensors"}.__contains__
    assert foreign_files(tmp_path / "entry", ours) == ["empty"]
    check_replaceable(tmp_path / "missing", "entry", ours)
    with pytest.raises(af.ConfigError, match="holds 'empty', which we did not write"):
        check_replaceable(tmp_path / "entry", "entry", ours)
