"""POST /v1/pieces' answer to a piece whose saved file holds a setting this version refuses: built from the
SavedSettingError's fields (the file's name, the reason), never by looking for '<kind>_config.json: ' in its message,
so a reworded message cannot change what a client is told, nor put a server path into the answer. Called as the
endpoint calls it (load_piece on the model's thread), on tiny models."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import adapterfusion as af
from adapterfusion.interop.adapterhub import export_adapterhub
from adapterfusion.serving.app import load_piece
from adapterfusion.serving.contract import parse_piece
from adapterfusion.serving.request_errors import RequestError
from tiny_models import tiny_encoder

FIX = "a hand-edited or damaged file, or one saved by another version of adapterfusion"


def _model() -> af.AdaptedModel:
    model = af.wrap(tiny_encoder("bert"))
    for name in ("a", "b"):
        model.add_adapter(name, af.AdapterConfig.pfeiffer(reduction_factor=4))
    return model


def _edit(path: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    document = json.loads(path.read_text())
    edit(document)
    path.write_text(json.dumps(document))


def _answer(model: af.AdaptedModel, kind: str, source: Path | str) -> str:
    with pytest.raises(RequestError) as refused:
        load_piece(model, parse_piece({"kind": kind, "source": str(source), "name": "n"}))
    assert refused.value.status == 422, refused.value.message
    return refused.value.message


def _raising(error: Exception) -> Callable[..., Any]:
    def load(*args: Any, **kwargs: Any) -> Any:
        raise error

    return load


def _saved_adapter(tmp_path: Path, key: str, value: object) -> Path:
    saved = _model().save_adapter("a", tmp_path / "a")
    _edit(saved / "adapter_config.json", lambda document: document["config"].update({key: value}))
    return saved


def test_a_reason_holding_a_colon_and_the_file_name_is_shown_whole(tmp_path):
    """The old reader cut the message after the first '<kind>_config.json: '; the reason is now a field."""
    saved = _saved_adapter(tmp_path, "non_linearity", "adapter_config.json: relu")
    message = _answer(_model(), "adapter", saved)
    said = "(non_linearity='adapter_config.json: relu' is not allowed; choose one of "
    assert f"refused for a setting in its adapter_config.json {said}" in message, message
    assert FIX in message and str(tmp_path) not in message.replace(str(saved), "")


def test_a_reason_holding_a_path_separator_is_left_out(tmp_path):
    """A saved value may be a server path: the answer names the file and the fix, not the value."""
    saved = _saved_adapter(tmp_path, "non_linearity", "/srv/private/relu")
    message = _answer(_model(), "adapter", saved)
    assert "refused for a setting in its adapter_config.json: a hand-edited" in message, message
    assert "/srv/private" not in message


def test_an_adapterhub_fusion_is_answered_with_its_own_file_name(tmp_path):
    """AdapterHub's fusion file is adapter_fusion_config.json: the answer was built from '<kind>_config.json' and
    named 'fusion_config.json', a file the folder does not hold."""
    source = _model()
    source.add_fusion("f", ["a", "b"])
    exported = export_adapterhub(source, "fusion", "f", tmp_path / "f")
    _edit(exported / "adapter_fusion_config.json", lambda document: document["config"].update({"dropout_prob": 7}))
    message = _answer(_model(), "fusion", exported)
    assert "refused for a setting in its adapter_fusion_config.json (AdapterHub fusion option dropout_prob=7" in message
    assert str(tmp_path) not in message.replace(str(exported), "")


def test_the_answer_comes_from_the_errors_fields_not_its_message(monkeypatch):
    """A message reworded any way (here: no file name, no colon) is answered as before."""
    model = _model()
    error = af.SavedSettingError(
        "/srv/private/h/head_config.json", "head dropout=2 must be a number in [0, 1)", "config"
    )
    error.args = ("reworded: the saved head is refused",)
    monkeypatch.setattr(model, "load_head", _raising(error))
    message = _answer(model, "head", "org/name")
    assert "refused for a setting in its head_config.json (head dropout=2 must be a number in [0, 1)): " in message
    assert "/srv" not in message and "reworded" not in message


def test_a_config_error_that_only_mentions_the_file_is_not_taken_for_a_setting(monkeypatch):
    """Text shaped like a saved setting's message ('<kind>_config.json: ...') in a ConfigError of another kind was
    shown to the client as the reason; only a SavedSettingError is."""
    model = _model()
    error = af.ConfigError("adapter_config.json: the server's cache at C:secret is full")
    monkeypatch.setattr(model, "load_adapter", _raising(error))
    message = _answer(model, "adapter", "org/name")
    assert message == "the adapter in 'org/name' was refused; the reason is in the server's log"
