"""Whole setups in one folder: save_pretrained / AdaptedModel.from_pretrained restore every piece and the active
setup exactly (float64, torch.equal), on a passed encoder or one loaded from its folder; partial saves, the
index's checks, and which strings name a local folder, a Hub id or an error (with no network access)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from transformers import AutoModel

import adapterfusion as af
from adapterfusion.errors import BaseModelMismatchWarning
from adapterfusion.injection.site import AdapterSite
from adapterfusion.io import atomic
from adapterfusion.io.hub import HubRef, locate
from adapterfusion.io.paths import as_path
from adapterfusion.piece import SETUP_FILE
from adapterfusion.serialization.setup_index import ActiveSetup
from setup_fixtures import assert_same_model, build_setup, fail_call
from tiny_decoders import tiny_decoder
from tiny_models import tiny_encoder


def test_whole_setup_round_trip_restores_an_equal_model(tmp_path):
    saved = build_setup()
    assert saved.save_pretrained(tmp_path / "setup") == tmp_path / "setup"
    index = json.loads((tmp_path / "setup" / SETUP_FILE).read_text())
    assert index["format_version"] == 1 and index["base_model"]["model_type"] == "bert"
    assert [(p["kind"], p["name"]) for p in index["pieces"]] == [
        ("adapter", "a"),
        ("adapter", "b"),
        ("adapter", "c"),
        ("fusion", "f"),
        ("head", "cls"),
        ("head", "reg"),
    ]
    assert index["active"] == {
        "adapter": None,
        "fusion": "f",
        "head": "cls",
        "skip_layers": [1],
        "fusion_masks": {"f": ["b"]},
        "fusion_step": 137,
        "fusion_implementation": "fast",
    }

    restored = af.AdaptedModel.from_pretrained(tiny_encoder().double(), tmp_path / "setup")
    assert isinstance(restored, af.AdaptedModel) and not restored.training
    assert_same_model(restored, saved)


def test_base_loaded_from_its_folder(tmp_path):
    tiny_encoder().save_pretrained(tmp_path / "encoder")
    saved = build_setup(torch.float32, AutoModel.from_pretrained(tmp_path / "encoder"))  # same attention kernels
    saved.save_pretrained(tmp_path / "setup")
    restored = af.AdaptedModel.from_pretrained(str(tmp_path / "encoder"), str(tmp_path / "setup"))
    assert_same_model(restored, saved)


def test_partial_save_takes_the_fusions_adapters_and_restricts_the_active_setup(tmp_path):
    saved = build_setup()
    saved.save_pretrained(tmp_path / "part", fusions="f", heads=["reg"])
    restored = af.AdaptedModel.from_pretrained(tiny_encoder().double(), tmp_path / "part")
    assert (restored.adapter_names, restored.fusion_names, restored.head_names) == (["a", "b"], ["f"], ["reg"])
    active = ActiveSetup.of(restored)
    assert (active.fusion, active.head, active.skip_layers, active.fusion_masks) == ("f", None, (1,), {"f": ("b",)})
    with pytest.raises(af.NameNotFoundError, match="no head named \\['nope'\\]"):
        saved.save_pretrained(tmp_path / "bad", heads="nope")
    with pytest.raises(af.ConfigError, match="provenance is given for \\['c'\\]"):
        saved.save_pretrained(tmp_path / "bad", adapters="a", provenance={"c": tmp_path})
    # a tensor in a dict, a list, a non-mapping: json's, pathlib's and an AttributeError's tracebacks before
    for provenance, message in (
        ({"a": {"dev": torch.ones(1)}}, "must hold JSON values only"),
        ({"a": [1, 2]}, "is neither a folder"),
        (["a"], "provenance must map piece names"),
    ):
        with pytest.raises(af.ConfigError, match=message):
            saved.save_pretrained(tmp_path / "bad", adapters="a", provenance=provenance)
    assert not (tmp_path / "bad").exists()


def test_saving_replaces_a_saved_setup_but_not_another_folder(tmp_path):
    build_setup().save_pretrained(tmp_path / "setup")
    small = af.wrap(tiny_encoder().double())
    small.add_adapter("only", "pfeiffer")
    small.save_pretrained(tmp_path / "setup", overwrite=True)
    assert sorted(p.name for p in (tmp_path / "setup").iterdir()) == ["adapterfusion_setup.json", "adapters"]
    assert [p.name for p in (tmp_path / "setup" / "adapters").iterdir()] == ["only"]
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(af.ConfigError, match="not a saved setup"):
        small.save_pretrained(tmp_path / "other")
    assert [p.name for p in (tmp_path / "other").iterdir()] == ["notes.txt"]


def test_a_setup_that_does_not_fit_leaves_the_passed_encoder_unwrapped(tmp_path):
    build_setup().save_pretrained(tmp_path / "setup")
    wide = tiny_encoder(hidden_size=48).double()
    with pytest.raises(af.IncompatibleModelError, match="hidden_size=32"):
        af.AdaptedModel.from_pretrained(wide, tmp_path / "setup")
    assert not any(isinstance(m, AdapterSite) for m in wide.modules())
    with pytest.warns(BaseModelMismatchWarning, match="weights differ"):
        af.AdaptedModel.from_pretrained(tiny_encoder(seed=1).double(), tmp_path / "setup")
    with pytest.raises(af.ConfigError, match="already an AdaptedModel"):
        af.AdaptedModel.from_pretrained(af.wrap(tiny_encoder()), tmp_path / "setup")


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda index: index.update(format_version=9), "format_version 9"),
        (lambda index: index.update(pieces=[{"kind": "adapter", "name": "../x"}]), "invalid saved adapter name"),
        (lambda index: index.update(pieces="a"), "'pieces' list"),
        (lambda index: index["active"].update(colour="red"), "unknown key"),
        (lambda index: index["active"].update(skip_layers=1), "must be lists"),
    ],
)
def test_a_damaged_index_is_a_clear_error(tmp_path, damage, message):
    build_setup().save_pretrained(tmp_path / "setup")
    path = tmp_path / "setup" / SETUP_FILE
    index = json.loads(path.read_text())
    damage(index)
    path.write_text(json.dumps(index))
    with pytest.raises(af.AdapterFusionError, match=message):
        af.AdaptedModel.from_pretrained(tiny_encoder().double(), tmp_path / "setup")
    with pytest.raises(af.SerializationError, match="is not a setup saved by save_pretrained"):
        af.AdaptedModel.from_pretrained(tiny_encoder().double(), tmp_path / "setup" / "adapters")


def test_load_a_piece_from_a_setup_folder(tmp_path):
    saved = build_setup()
    saved.save_pretrained(tmp_path / "setup")
    saved.save_pretrained(tmp_path / "one", adapters="c")
    model = af.wrap(tiny_encoder().double())
    assert model.load_adapter(tmp_path / "one") == "c"  # a setup with one adapter
    assert model.load_head(tmp_path / "setup" / "heads" / "reg") == "reg"  # a piece's own folder in a setup
    with pytest.raises(af.ConfigError, match="holds 3 adapters; load one of .*adapters/a"):
        model.load_adapter(tmp_path / "setup")
    with pytest.raises(af.NameNotFoundError, match="holds no head"):
        model.load_head(tmp_path / "one")


def test_which_strings_are_folders_hub_ids_or_errors(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "org" / "name").mkdir(parents=True)
    assert locate("org/name", "x") == Path("org/name")  # an existing local folder wins
    assert locate("org/other", "x") == HubRef("org/other")
    assert locate("org/other/adapters/rte@v1.0", "x") == HubRef("org/other", "adapters/rte", "v1.0")
    assert locate("missing", "x") == HubRef("missing")  # a canonical Hub id such as bert-base-uncased
    assert str(HubRef("org/other", "adapters/rte", "v1.0")) == "org/other/adapters/rte@v1.0"
    for path_like in (
        "./org/missing",
        str(tmp_path / "missing"),
        "../org/name",
        "org/../name",
        "C:\\models\\rte",
        "~/models/rte",
        Path("org/other"),
    ):
        with pytest.raises(af.SerializationError, match="is not a directory .*, nor a Hub id"):
            locate(path_like, "adapter folder")
    (tmp_path / "file.json").write_text("{}")
    with pytest.raises(af.SerializationError, match="is a file"):
        locate("file.json", "adapter folder")


def test_saving_onto_a_saved_setup_keeps_what_the_user_put_there(tmp_path):
    """#21: save_pretrained onto our own setup updates our files in place; a file the user added (at the top, or in
    a piece folder we no longer save) and a piece folder our index never listed stay, byte for byte."""
    setup = tmp_path / "setup"
    build_setup().save_pretrained(setup)
    (setup / "notes.txt").write_text("mine")
    (setup / "adapters" / "b" / "why.txt").write_text("b was the best")
    (setup / "adapters" / "mine").mkdir()
    (setup / "adapters" / "mine" / "adapter.safetensors").write_bytes(b"not ours")
    small = af.wrap(tiny_encoder().double())
    small.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4))
    small.add_adapter("only", "pfeiffer")
    small.save_pretrained(setup, overwrite=True)  # it leaves out b, f and the heads
    assert (setup / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in (setup / "adapters").iterdir()) == ["a", "b", "mine", "only"]
    assert [p.name for p in (setup / "adapters" / "b").iterdir()] == ["why.txt"]  # our files of b are gone
    assert (setup / "adapters" / "mine" / "adapter.safetensors").read_bytes() == b"not ours"
    assert not (setup / "fusions").exists() and not (setup / "heads").exists()
    restored = af.AdaptedModel.from_pretrained(tiny_encoder().double(), setup)
    assert restored.adapter_names == ["a", "only"] and restored.head_names == []
    mine, theirs = restored.state_dict(), small.state_dict()
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)


def test_a_save_that_leaves_out_saved_pieces_needs_overwrite(tmp_path):
    """Updating one piece of a setup (save_pretrained(folder, adapters="b")) deleted the others without a word, and
    a setup of another model saved into the folder replaced it whole. Now both are refused, the folder unchanged,
    naming what would go; overwrite=True replaces the setup, and saving the same pieces again needs no flag."""
    setup = tmp_path / "setup"
    model = build_setup()
    model.save_pretrained(setup)
    before = _tree(setup)
    with pytest.raises(af.ConfigError, match="holds the adapter 'a'.*leaves out.*overwrite=True.*adapters=\\[...\\]"):
        model.save_pretrained(setup, adapters="b")
    other = af.wrap(tiny_decoder("llama"))
    other.add_adapter("b")
    with pytest.raises(af.ConfigError, match="fusion 'f'.*head 'reg'.*overwrite=True"):
        other.save_pretrained(setup)
    with pytest.raises(af.ConfigError, match="overwrite"):
        model.save_pretrained(setup, adapters="b", overwrite="yes")
    assert _tree(setup) == before
    model.save_pretrained(setup)  # the same pieces again: an update
    model.save_pretrained(setup, adapters="b", overwrite=True)
    assert af.AdaptedModel.from_pretrained(tiny_encoder().double(), setup).adapter_names == ["b"]


def test_overwrite_removes_only_the_dropped_pieces_files_we_wrote(tmp_path):
    """save_pretrained(overwrite=True) dropping adapter b deleted whatever b's folder held under our two file names:
    here the user's own AdapterHub export put there since, and a config of ours the user edited since the save."""
    from adapterfusion.interop import export_adapterhub

    setup = tmp_path / "setup"
    model = af.wrap(tiny_encoder())
    for name in ("a", "b", "c"):
        model.add_adapter(name, "pfeiffer")
    model.save_pretrained(setup)
    theirs = setup / "adapters" / "b"
    for path in theirs.iterdir():
        path.unlink()
    for path in export_adapterhub(model, "adapter", "b", tmp_path / "export").iterdir():  # refused into a setup
        (theirs / path.name).write_bytes(path.read_bytes())  # the user's files, AdapterHub's names, copied there
    edited = setup / "adapters" / "c" / "adapter_config.json"
    edited.write_text(edited.read_text() + "\n")  # still our format, but not the bytes the index recorded
    kept = {**_tree(theirs), **{str(edited): edited.read_bytes()}}
    model.save_pretrained(setup, adapters="a", overwrite=True)
    assert {**_tree(theirs), **{str(edited): edited.read_bytes()}} == kept
    assert (setup / "adapters" / "c" / "adapter.safetensors").is_file()
    assert af.AdaptedModel.from_pretrained(tiny_encoder(), setup).adapter_names == ["a"]
    with pytest.raises(af.ConfigError, match="which we did not write"):  # b's folder is the user's now
        model.save_pretrained(setup, overwrite=True)


# ---- a setup is saved as a whole, and only what we wrote inside it is removed (#F5, #F6, #F9) --------------------
def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _other_setup() -> af.AdaptedModel:
    """build_setup's pieces, with other weights of the same shapes: a mix of the two would load without a word."""
    model = build_setup()
    torch.manual_seed(7)
    for module in [
        *model.heads.values(),
        *(m for s in model.sites for m in (*s.adapters.values(), *s.fusions.values())),
    ]:
        for parameter in module.parameters():
            parameter.data.normal_(0.0, 0.3)
    return model


@pytest.mark.parametrize("fail_at", [1, 3, 7])
def test_a_failed_save_over_a_setup_leaves_the_earlier_setup_whole(tmp_path, monkeypatch, fail_at):
    """#F5: a write failing part-way used to leave the first pieces new and the rest (and the index) old."""
    earlier = build_setup()
    earlier.save_pretrained(tmp_path / "setup")
    before = _tree(tmp_path / "setup")
    fail_call(monkeypatch, atomic, "create_temp_file", fail_at, OSError(28, "No space left on device"))
    with pytest.raises(OSError, match="No space left"):
        _other_setup().save_pretrained(tmp_path / "setup")
    monkeypatch.undo()
    assert _tree(tmp_path / "setup") == before
    assert_same_model(af.AdaptedModel.from_pretrained(tiny_encoder().double(), tmp_path / "setup"), build_setup())


def test_a_save_over_a_setup_cut_off_between_its_renames_is_refused_on_load(tmp_path, monkeypatch):
    """The renames come after every write; cut off among them, the index's digests refuse the mix of two saves."""
    build_setup().save_pretrained(tmp_path / "setup")
    newer = _other_setup()
    fail_call(monkeypatch, os, "replace", 3, OSError(5, "Input/output error"))
    with pytest.raises(OSError):
        newer.save_pretrained(tmp_path / "setup")
    monkeypatch.undo()
    with pytest.raises(af.SerializationError, match="cut off"):
        af.AdaptedModel.from_pretrained(tiny_encoder().double(), tmp_path / "setup")
    newer.save_pretrained(tmp_path / "setup")  # the retry
    assert_same_model(af.AdaptedModel.from_pretrained(tiny_encoder().double(), tmp_path / "setup"), newer)


def test_an_interrupted_first_save_leaves_nothing_in_the_way_of_its_retry(tmp_path, monkeypatch):
    """#F9: the retry used to find a folder holding 'adapters' but no index, and refuse it as not a saved setup."""
    model = build_setup()
    fail_call(monkeypatch, atomic, "create_temp_file", 4, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        model.save_pretrained(tmp_path / "setup")
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []
    model.save_pretrained(tmp_path / "setup")
    assert_same_model(af.AdaptedModel.from_pretrained(tiny_encoder().double(), tmp_path / "setup"), model)


def test_dropping_a_piece_never_removes_files_through_a_symlink(tmp_path):
    """#F6: the user shares adapter b from their own library through a symlink in the setup; saving the setup
    without b used to delete the library's files. The link and the library stay; b is no longer listed."""
    model = af.wrap(tiny_encoder())
    for name in ("a", "b"):
        model.add_adapter(name, "pfeiffer")
    library = tmp_path / "library" / "b"
    model.save_adapter("b", library)
    kept = _tree(library)
    model.save_pretrained(tmp_path / "setup")
    link = tmp_path / "setup" / "adapters" / "b"
    for path in link.iterdir():
        path.unlink()
    link.rmdir()
    link.symlink_to(library)
    model.save_pretrained(tmp_path / "setup", adapters="a", overwrite=True)
    assert _tree(library) == kept and link.is_symlink()
    assert af.AdaptedModel.from_pretrained(tiny_encoder(), tmp_path / "setup").adapter_names == ["a"]
    (tmp_path / "setup" / "adapters").rename(tmp_path / "elsewhere")  # the whole adapters/ a link, files inside
    (tmp_path / "setup" / "adapters").symlink_to(tmp_path / "elsewhere")
    af.wrap(tiny_encoder()).save_pretrained(tmp_path / "setup", overwrite=True)
    assert sorted(p.name for p in (tmp_path / "elsewhere").iterdir()) == ["a", "b"]
    assert (tmp_path / "elsewhere" / "a" / "adapter.safetensors").is_file()


def test_a_setup_over_a_base_of_another_model_type_is_refused_before_loading(tmp_path: Path) -> None:
    """A Llama setup given a BERT folder as its base (serve's default base is MiniLM): transformers would load the
    BERT weights into LlamaForCausalLM with every weight missing, and the error came later, blaming the layout."""
    decoder = af.wrap(tiny_decoder("llama"))
    decoder.add_adapter("a")
    decoder.save_pretrained(tmp_path / "setup")
    tiny_encoder("bert").save_pretrained(tmp_path / "bert")
    with pytest.raises(af.IncompatibleModelError, match="saved on a 'llama' model.*is a 'bert' model"):
        af.AdaptedModel.from_pretrained(tmp_path / "bert", tmp_path / "setup")


def test_a_fusion_mask_saved_as_a_string_is_refused_not_split_into_characters(tmp_path: Path) -> None:
    """'ab' was read as the mask ('a', 'b'): with adapters a, b and ab that silently kept two other adapters."""
    model = af.wrap(tiny_encoder().double())
    for name in ("a", "b", "ab"):
        model.add_adapter(name, "pfeiffer")
    model.add_fusion("f", ["a", "b", "ab"])
    model.set_fusion_mask("f", ["ab"])
    model.save_pretrained(tmp_path / "setup")
    index_path = tmp_path / "setup" / "adapterfusion_setup.json"
    index = json.loads(index_path.read_text())
    assert index["active"]["fusion_masks"] == {"f": ["ab"]}
    index["active"]["fusion_masks"] = {"f": "ab"}
    index_path.write_text(json.dumps(index))
    with pytest.raises(af.SerializationError, match="each fusion mask must be lists"):
        af.AdaptedModel.from_pretrained(tiny_encoder().double(), tmp_path / "setup")


def test_a_path_from_home_is_the_same_folder_to_save_and_to_load(tmp_path, monkeypatch):
    """save_adapter('~/x') wrote a folder named '~' in the current folder, and load_adapter('~/x') then read the
    home folder's x, which did not exist."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    model = build_setup()
    model.save_adapter("a", "~/pieces/a")
    model.save_pretrained("~/setup")
    assert (tmp_path / "home" / "pieces" / "a").is_dir() and not (tmp_path / "~").exists()
    restored = af.wrap(tiny_encoder().double())
    assert restored.load_adapter("~/pieces/a") == "a"
    assert_same_model(af.AdaptedModel.from_pretrained(tiny_encoder().double(), "~/setup"), model)


def test_a_path_of_another_users_home_that_does_not_exist_stays_as_written():
    """Path.expanduser raised a bare RuntimeError for '~name' of no such user."""
    assert as_path("~no-such-user-af/x", "folder") == Path("~no-such-user-af/x")
