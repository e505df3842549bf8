"""Saving and loading adapters, heads and fusions: exact round trips, the recorded encoder fingerprint,
clear errors for incompatible encoders and damaged files, and atomic writes."""

from __future__ import annotations

import json
import os

import pytest
import torch

import adapterfusion as af
from adapterfusion.io import atomic
from setup_fixtures import fail_call
from tiny_models import randomise, tiny_encoder, tiny_inputs

PRESETS = {
    "pfeiffer": af.AdapterConfig.pfeiffer(reduction_factor=4),
    "houlsby": af.AdapterConfig.houlsby(reduction_factor=4),
}


def _with_adapter(name: str = "a", preset: str = "pfeiffer", **encoder_overrides) -> af.AdaptedModel:
    model = af.wrap(tiny_encoder("bert", **encoder_overrides))
    model.add_adapter(name, PRESETS[preset])
    for site in model.sites_with_adapter(name):
        randomise(site.adapters[name], std=0.2)
    return model


def _output(model: af.AdaptedModel) -> torch.Tensor:
    model.eval()  # a new head starts in training mode: its dropout would make outputs random
    with torch.no_grad():
        out = model(**tiny_inputs())
    return out.logits if out.logits is not None else out.last_hidden_state


def _site_names(model: af.AdaptedModel) -> set[str]:
    return {name for site in model.sites for name in (*site.adapters, *site.fusions)}


# ---- round trips ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_adapter_round_trip(tmp_path, preset):
    source = _with_adapter("a", preset)
    source.activate(adapter="a")
    source.save_adapter("a", tmp_path / "a")
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["adapter.safetensors", "adapter_config.json"]

    document = json.loads((tmp_path / "a" / "adapter_config.json").read_text())
    assert document["library_version"] == af.__version__
    assert document["name"] == "a"
    assert document["base_model"]["model_type"] == "bert"
    assert document["base_model"]["hidden_size"] == 32
    assert document["base_model"]["num_layers"] == 2
    assert af.AdapterConfig.from_dict(document["config"]) == PRESETS[preset]

    target = af.wrap(tiny_encoder("bert"))
    assert target.load_adapter(tmp_path / "a") == "a"
    target.activate(adapter="a")
    assert torch.equal(_output(target), _output(source))
    assert target.load_adapter(tmp_path / "a", name="copy") == "copy"
    target.activate(adapter="copy")
    assert torch.equal(_output(target), _output(source))


def test_head_and_fusion_round_trip(tmp_path):
    source = _with_adapter("a")
    source.add_adapter("b", PRESETS["pfeiffer"])
    for site in source.sites_with_adapter("b"):
        randomise(site.adapters["b"], std=0.2)
    source.add_fusion("f", ["a", "b"])
    for site in source.sites_with_fusion("f"):
        randomise(site.fusions["f"], std=0.2)
    source.add_head("h", af.ClassificationHead(num_labels=3))
    randomise(source.heads["h"], std=0.2)
    source.activate(fusion="f", head="h")
    for kind, name in (("adapter", "a"), ("adapter", "b"), ("fusion", "f"), ("head", "h")):
        getattr(source, f"save_{kind}")(name, tmp_path / name)
    fusion_document = json.loads((tmp_path / "f" / "fusion_config.json").read_text())
    assert fusion_document["adapters"] == ["a", "b"]
    assert (tmp_path / "h" / "head.safetensors").is_file()

    target = af.wrap(tiny_encoder("bert"))
    for name in ("a", "b"):
        target.load_adapter(tmp_path / name)
    assert target.load_fusion(tmp_path / "f") == "f"
    assert target.load_head(tmp_path / "h") == "h"
    target.activate(fusion="f", head="h")
    assert torch.equal(_output(target), _output(source))
    assert target.heads["h"].config == source.heads["h"].config


# ---- incompatible encoders ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("model_type", "overrides", "field"),
    [
        ("bert", {"hidden_size": 48}, "hidden_size"),
        ("bert", {"num_hidden_layers": 3}, "num_layers"),
        ("roberta", {}, "model_type"),
    ],
)
def test_incompatible_encoder_is_named(tmp_path, model_type, overrides, field):
    source = _with_adapter("a")
    source.save_adapter("a", tmp_path / "a")
    target = af.wrap(tiny_encoder(model_type, **overrides))
    with pytest.raises(af.IncompatibleModelError, match=field):
        target.load_adapter(tmp_path / "a")
    assert target.adapter_names == [] and _site_names(target) == set()


def test_float64_head_keeps_its_precision(tmp_path):
    """A head is built in the encoder's dtype before its weights are loaded, not rounded through float32."""
    source = af.wrap(tiny_encoder("bert").double())
    source.add_head("h", af.ClassificationHead(num_labels=3))
    randomise(source.heads["h"], std=0.2)
    source.save_head("h", tmp_path / "h")
    target = af.wrap(tiny_encoder("bert").double())
    target.load_head(tmp_path / "h")
    saved, loaded = source.heads["h"].state_dict(), target.heads["h"].state_dict()
    assert all(loaded[k].dtype == torch.float64 and torch.equal(loaded[k], saved[k]) for k in saved)


def test_head_ignores_layer_count_but_not_hidden_size(tmp_path):
    source = af.wrap(tiny_encoder("bert"))
    source.add_head("h", af.RegressionHead())
    source.save_head("h", tmp_path / "h")
    af.wrap(tiny_encoder("bert", num_hidden_layers=3)).load_head(tmp_path / "h")
    wider = af.wrap(tiny_encoder("bert", hidden_size=48))
    with pytest.raises(af.IncompatibleModelError, match="hidden_size"):
        wider.load_head(tmp_path / "h")
    assert wider.head_names == []


# ---- damaged files ------------------------------------------------------------------------------------
def test_truncated_weights(tmp_path):
    _with_adapter("a").save_adapter("a", tmp_path / "a")
    weights = tmp_path / "a" / "adapter.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    target = af.wrap(tiny_encoder("bert"))
    with pytest.raises(af.SerializationError, match="adapter.safetensors"):
        target.load_adapter(tmp_path / "a")
    assert target.adapter_names == [] and _site_names(target) == set()


def test_corrupt_json(tmp_path):
    _with_adapter("a").save_adapter("a", tmp_path / "a")
    config = tmp_path / "a" / "adapter_config.json"
    config.write_text(config.read_text()[:40])
    target = af.wrap(tiny_encoder("bert"))
    with pytest.raises(af.SerializationError, match="JSON"):
        target.load_adapter(tmp_path / "a")
    assert target.adapter_names == [] and _site_names(target) == set()


def test_weights_that_do_not_fit_the_config_leave_nothing_behind(tmp_path):
    """Valid files that disagree (rf 4 weights, rf 8 config) fail after the adapter was created: it must go."""
    _with_adapter("a").save_adapter("a", tmp_path / "a")
    config = tmp_path / "a" / "adapter_config.json"
    document = json.loads(config.read_text())
    document["config"]["reduction_factor"] = 8.0
    config.write_text(json.dumps(document))
    target = af.wrap(tiny_encoder("bert"))
    with pytest.raises(af.SerializationError, match="wrong shapes"):
        target.load_adapter(tmp_path / "a")
    assert target.adapter_names == [] and _site_names(target) == set()


def test_missing_folder_and_wrong_kind(tmp_path):
    target = af.wrap(tiny_encoder("bert"))
    with pytest.raises(af.SerializationError, match="not a directory"):
        target.load_adapter(tmp_path / "nowhere")
    source = af.wrap(tiny_encoder("bert"))
    source.add_head("h", af.ClassificationHead())
    source.save_head("h", tmp_path / "h")
    with pytest.raises(af.SerializationError, match="adapter_config.json is missing"):
        target.load_adapter(tmp_path / "h")


def test_fusion_before_its_adapters(tmp_path):
    source = _with_adapter("a")
    source.add_adapter("b", PRESETS["pfeiffer"])
    source.add_adapter("c", PRESETS["pfeiffer"])
    source.add_fusion("f", ["a", "b", "c"])
    source.save_adapter("b", tmp_path / "b")
    source.save_fusion("f", tmp_path / "f")
    target = af.wrap(tiny_encoder("bert"))
    target.load_adapter(tmp_path / "b")
    with pytest.raises(af.NameNotFoundError, match=r"\['a', 'c'\] are not loaded"):
        target.load_fusion(tmp_path / "f")
    assert target.fusion_names == [] and _site_names(target) == {"b"}


# ---- atomic writes ------------------------------------------------------------------------------------
def test_atomic_write_leaves_no_temp_file(tmp_path):
    path = tmp_path / "sub" / "file.bin"
    atomic.atomic_write_bytes(path, b"first")
    atomic.atomic_write_bytes(path, b"second")
    assert path.read_bytes() == b"second"
    assert [p.name for p in path.parent.iterdir()] == ["file.bin"]
    atomic.atomic_write_json(tmp_path / "x.json", {"b": 1, "a": [1, 2]})
    assert json.loads((tmp_path / "x.json").read_text()) == {"a": [1, 2], "b": 1}


def test_failed_write_keeps_the_old_content(tmp_path, monkeypatch):
    path = tmp_path / "file.bin"
    atomic.atomic_write_bytes(path, b"old content")

    def crash(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        atomic.atomic_write_bytes(path, b"new content that never lands")
    monkeypatch.undo()
    assert path.read_bytes() == b"old content"
    assert [p.name for p in tmp_path.iterdir()] == ["file.bin"]


def test_failed_save_keeps_the_previous_adapter(tmp_path, monkeypatch):
    first = _with_adapter("a")
    first.save_adapter("a", tmp_path / "a")
    before = {p.name: p.read_bytes() for p in (tmp_path / "a").iterdir()}
    second = _with_adapter("a")
    for site in second.sites_with_adapter("a"):
        randomise(site.adapters["a"], std=0.5)

    def crash(src, dst):
        raise OSError("power cut")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="power cut"):
        second.save_adapter("a", tmp_path / "a")
    monkeypatch.undo()
    assert {p.name: p.read_bytes() for p in (tmp_path / "a").iterdir()} == before


def test_failed_overwrite_keeps_the_existing_adapter(tmp_path):
    _with_adapter("a").save_adapter("a", tmp_path / "a")
    config = tmp_path / "a" / "adapter_config.json"
    document = json.loads(config.read_text())
    document["config"]["reduction_factor"] = 8.0
    config.write_text(json.dumps(document))
    target = _with_adapter("a")
    target.activate(adapter="a")
    expected = _output(target)
    with pytest.raises(af.SerializationError):
        target.load_adapter(tmp_path / "a", overwrite=True)
    assert target.adapter_names == ["a"]
    target.activate(adapter="a")
    assert torch.equal(_output(target), expected)


# ---- a piece's two files are saved as one (#F4, #F9) ------------------------------------------------------------
def _files(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("error", [OSError(28, "No space left on device"), KeyboardInterrupt()])
def test_a_save_that_fails_on_its_second_file_keeps_the_earlier_save_and_can_be_retried(tmp_path, monkeypatch, error):
    """#F4/#F9: the config's write failing after the weights' used to leave new weights beside the old config."""
    old = _with_adapter("a")
    old.save_adapter("a", tmp_path / "a")
    before = _files(tmp_path / "a")
    new = af.wrap(tiny_encoder("bert"))
    new.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=8))
    fail_call(monkeypatch, atomic, "create_temp_file", 2, error)
    with pytest.raises(type(error)):
        new.save_adapter("a", tmp_path / "a")
    monkeypatch.undo()
    assert _files(tmp_path / "a") == before  # no temp file left either
    target = af.wrap(tiny_encoder("bert"))
    target.load_adapter(tmp_path / "a")
    assert target.adapter_configs["a"] == old.adapter_configs["a"]
    new.save_adapter("a", tmp_path / "a")  # the retry
    assert af.wrap(tiny_encoder("bert")).load_adapter(tmp_path / "a") == "a"


@pytest.mark.parametrize("kind", ["adapter", "fusion", "head"])
def test_a_first_save_cut_off_leaves_nothing_in_the_way_of_its_retry(tmp_path, monkeypatch, kind):
    """#F9: an interrupted first save used to leave our weights file alone, and the retry called it not ours."""
    model = _with_adapter("a")
    model.add_adapter("b", PRESETS["pfeiffer"])
    model.add_fusion("f", ["a", "b"])
    model.add_head("h", af.ClassificationHead(num_labels=2))
    name = {"adapter": "a", "fusion": "f", "head": "h"}[kind]
    save = getattr(model, f"save_{kind}")
    fail_call(monkeypatch, atomic, "create_temp_file", 2, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        save(name, tmp_path / "out" / name)
    monkeypatch.undo()
    assert not (tmp_path / "out").exists()  # the folders it created went too
    save(name, tmp_path / "out" / name)
    assert sorted(_files(tmp_path / "out" / name)) == [f"{kind}.safetensors", f"{kind}_config.json"]


def test_a_save_cut_off_between_its_renames_is_refused_on_load_and_can_be_retried(tmp_path, monkeypatch):
    """The config is renamed into place first: cut off before the weights follow, the folder holds our config (so
    the retry may write there) beside weights its digest refuses, never a silent mix."""
    _with_adapter("a").save_adapter("a", tmp_path / "a")
    new = _with_adapter("a")  # same shapes: only the digest can tell the weights apart
    for site in new.sites_with_adapter("a"):
        randomise(site.adapters["a"], std=0.5)
    fail_call(monkeypatch, os, "replace", 2, OSError(5, "Input/output error"))
    with pytest.raises(OSError):
        new.save_adapter("a", tmp_path / "a")
    monkeypatch.undo()
    with pytest.raises(af.SerializationError, match="cut off between its two files"):
        af.wrap(tiny_encoder("bert")).load_adapter(tmp_path / "a")
    new.save_adapter("a", tmp_path / "a")
    target = af.wrap(tiny_encoder("bert"))
    target.load_adapter(tmp_path / "a")
    assert all(torch.equal(target.state_dict()[k], v) for k, v in new.state_dict().items())


def test_save_over_a_piece_of_another_name_needs_overwrite(tmp_path):
    """#F7: saving 'scratch' where 'trained' was saved is refused; the same name, or overwrite=True, replaces it."""
    model = _with_adapter("trained")
    model.add_adapter("scratch", PRESETS["houlsby"])
    model.save_adapter("trained", tmp_path / "a")
    before = _files(tmp_path / "a")
    with pytest.raises(af.ConfigError, match="already holds the adapter 'trained'.*overwrite=True"):
        model.save_adapter("scratch", tmp_path / "a")
    assert _files(tmp_path / "a") == before
    model.save_adapter("trained", tmp_path / "a")  # saving it again after more training
    model.save_adapter("scratch", tmp_path / "a", overwrite=True)
    assert af.wrap(tiny_encoder("bert")).load_adapter(tmp_path / "a") == "scratch"
