"""A value this version refuses in a saved file is a SavedSettingError: still a ConfigError with the message
'<path>: <reason>', and also the file's name, the entry read and the reason as fields, so that a caller (the
server's POST /v1/pieces) need not parse the message."""

from __future__ import annotations

import json
import pickle

import pytest

import adapterfusion as af
from adapterfusion._validation import naming_file
from tiny_models import tiny_encoder


def _model() -> af.AdaptedModel:
    model = af.wrap(tiny_encoder("bert"))
    model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4))
    return model


def test_the_error_carries_the_files_name_the_entry_and_the_reason():
    error = af.SavedSettingError("/srv/p/adapter_config.json", "scaling='x: y' has type str", "config")
    assert isinstance(error, af.ConfigError) and isinstance(error, ValueError)
    assert str(error) == "/srv/p/adapter_config.json: scaling='x: y' has type str"
    assert (error.file, error.key, error.reason) == ("adapter_config.json", "config", "scaling='x: y' has type str")
    copy = pickle.loads(pickle.dumps(error))  # as it crosses to another process
    assert type(copy) is af.SavedSettingError and str(copy) == str(error)
    assert (copy.file, copy.key, copy.reason) == (error.file, error.key, error.reason)


@pytest.mark.parametrize(
    "edit, key, reason",
    [
        (lambda d: d["config"].update({"non_linearity": "nope"}), "config", "non_linearity='nope' is not allowed"),
        (lambda d: d.update({"name": "a b"}), "name", "invalid saved adapter name 'a b'"),
    ],
)
def test_a_refused_value_in_a_saved_adapter_is_a_saved_setting_error(tmp_path, edit, key, reason):
    saved = _model().save_adapter("a", tmp_path / "a")
    config_file = saved / "adapter_config.json"
    document = json.loads(config_file.read_text())
    edit(document)
    config_file.write_text(json.dumps(document))
    with pytest.raises(af.SavedSettingError) as refused:
        _model().load_adapter(saved, "n")
    error = refused.value
    assert str(error) == f"{config_file}: {error.reason}"  # the message as before: the path, then the reason
    assert error.file == "adapter_config.json" and error.key == key and error.reason.startswith(reason)
    assert str(tmp_path) not in error.reason


def test_naming_file_keeps_the_innermost_file_and_other_subclasses_types(tmp_path):
    inner, outer = tmp_path / "inner.json", tmp_path / "outer.json"
    with pytest.raises(af.SavedSettingError) as refused, naming_file(outer), naming_file(inner, "config"):
        raise af.ConfigError("x=1 must be 2")
    assert (refused.value.file, refused.value.key, str(refused.value)) == (
        "inner.json",
        "config",
        f"{inner}: x=1 must be 2",
    )
    with pytest.raises(af.PieceExistsError) as exists, naming_file(outer):
        raise af.PieceExistsError("adapter 'a' is loaded already", "a")
    assert str(exists.value) == "adapter 'a' is loaded already" and exists.value.name == "a"

    class Special(af.ConfigError):
        pass

    with pytest.raises(Special, match=f"^{outer}: odd$"), naming_file(outer):
        raise Special("odd")
