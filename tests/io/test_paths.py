"""Names read from files become folder names; none may lead outside the folder it is written to."""

from __future__ import annotations

import pytest

import adapterfusion as af
from adapterfusion.experiments.plan import Job
from adapterfusion.io.paths import path_part
from adapterfusion.training.run import run_dir_for
from adapterfusion.training.setups import Setup, register_setup
from adapterfusion.training.store import AdapterStore, encoder_key

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
    assert encoder_key("..") == encoder_key(".") == "encoder"
    assert AdapterStore(tmp_path).path("..", "rte", "st-a", 1).resolve().is_relative_to(tmp_path.resolve())
    with pytest.raises(af.ConfigError, match="setup"):
        register_setup(Setup("../evil", lambda model, context: None, {}, "escapes"))
