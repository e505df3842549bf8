"""Which encoder a stored adapter belongs to: the store folder is keyed by the encoder path's last two parts, so an
entry records the encoder's identity (sizes and weights digest, adapterfusion/encoder_identity.py) and the store
loads it only into an encoder with those weights; entries written before that (the shipped zoo) load by the key
alone."""

from __future__ import annotations

import json

import pytest
import torch

import adapterfusion as af
from adapterfusion.encoder_identity import encoder_digest
from adapterfusion.errors import TrainingError
from adapterfusion.training import AdapterStore
from adapterfusion.training.store import ENTRY_FILE, ENTRY_FILES
from tiny_models import tiny_encoder


def _stored(tmp_path) -> tuple[AdapterStore, af.AdaptedModel]:
    trained = af.wrap(tiny_encoder("bert", seed=0))
    trained.add_adapter("rte", af.AdapterConfig.pfeiffer(reduction_factor=4))
    store = AdapterStore(tmp_path / "store")
    store.put_model(trained, "rte", None, "/a/x/model", "rte", "st-a", 1)
    return store, trained


def test_an_entry_loads_into_the_same_weights_under_any_path_and_refuses_other_weights(tmp_path):
    store, trained = _stored(tmp_path)
    entry = json.loads((store.path("/a/x/model", "rte", "st-a", 1) / ENTRY_FILE).read_text())
    assert entry["encoder_identity"]["weights_sha256"] == encoder_digest(trained)
    same = af.wrap(tiny_encoder("bert", seed=0))  # the same weights, loaded again from elsewhere
    assert store.load_into(same, "rte", "st-a", 1, encoder="/b/x/model") == "rte"
    with pytest.raises(af.IncompatibleModelError, match="trained on the encoder .* other weights"):
        store.load_into(af.wrap(tiny_encoder("bert", seed=1)), "rte", "st-a", 1, encoder="/b/x/model")


def test_an_entry_without_a_recorded_identity_loads_by_its_key_as_before(tmp_path):
    store, _ = _stored(tmp_path)
    path = store.path("/a/x/model", "rte", "st-a", 1) / ENTRY_FILE
    path.write_text(json.dumps({k: v for k, v in json.loads(path.read_text()).items() if k != "encoder_identity"}))
    assert store.load_into(af.wrap(tiny_encoder("bert", seed=1)), "rte", "st-a", 1, encoder="/b/x/model") == "rte"


def test_the_shipped_zoo_still_loads(tmp_path):
    from transformers import AutoModel

    from adapterfusion.zoo import load_zoo_adapter

    model = af.wrap(AutoModel.from_pretrained(af.default_encoder_path()))
    assert load_zoo_adapter(model, "rte", head=True) == "rte"


def test_the_digest_is_remembered_until_a_weight_changes():
    model = af.wrap(tiny_encoder("bert"))
    first = encoder_digest(model)
    assert encoder_digest(model) == first
    with torch.no_grad():
        model.model.embeddings.word_embeddings.weight[0, 0] += 1.0
    assert encoder_digest(model) != first
    second = encoder_digest(model)
    model.model.encoder.layer[0].intermediate.dense.weight.data.mul_(1.5)  # a write `_version` does not see
    third = encoder_digest(model)
    assert third != second and encoder_digest(model) == third


def test_an_entry_stored_by_another_run_meanwhile_is_kept(tmp_path, monkeypatch):
    """Two runs of one task, setup and seed into one store: both passed the start's check, and the one that finished
    last replaced the other's entry without overwrite. The rename now refuses an entry that appeared meanwhile."""
    from adapterfusion.training import store as store_module

    real = store_module.replace_folder

    def racing(final, write, replace=True):
        real(final, lambda tmp: (tmp / ENTRY_FILE).write_text('{"other": true}'))  # the other run, finishing first
        return real(final, write, replace)

    model = af.wrap(tiny_encoder("bert", seed=0))
    model.add_adapter("rte", af.AdapterConfig.pfeiffer(reduction_factor=4))
    store = AdapterStore(tmp_path / "store")
    monkeypatch.setattr(store_module, "replace_folder", racing)
    with pytest.raises(TrainingError, match="another run stored that entry while this one ran"):
        store.put_model(model, "rte", None, "/a/x/model", "rte", "st-a", 1)
    entry = store.path("/a/x/model", "rte", "st-a", 1)
    assert json.loads((entry / ENTRY_FILE).read_text()) == {"other": True}
    assert [p.name for p in entry.parent.iterdir()] == [entry.name]  # no temp folder left


def _run_folder(tmp_path) -> tuple[af.AdaptedModel, object]:
    """A finished st-a run's folder as train() leaves it, with the user's notes inside its adapter/ and head/."""
    model = af.wrap(tiny_encoder("bert", seed=0))
    model.add_adapter("rte", af.AdapterConfig.pfeiffer(reduction_factor=4))
    model.add_head("rte", af.ClassificationHead(num_labels=2))
    run = tmp_path / "runs" / "rte" / "st-a" / "seed-1"
    model.save_adapter("rte", run / "adapter")
    model.save_head("rte", run / "head")
    (run / "config.json").write_text(json.dumps({"encoder": "/a/x/model", "task": "rte", "setup": "st-a", "seed": 1}))
    for kind in ("adapter", "head"):
        (run / kind / "notes.md").write_text(f"why this {kind} is the good one")
    return model, run


def test_put_copies_the_pieces_files_only_and_can_replace_the_entry_again(tmp_path):
    """The user's notes stay in the run folder: copied into the entry, they would make it one that no later
    put(overwrite=True), nor a re-run of its experiment, may replace."""
    _, run = _run_folder(tmp_path)
    store = AdapterStore(tmp_path / "store")
    entry = store.put(run)
    assert sorted(p.relative_to(entry).as_posix() for p in entry.rglob("*") if p.is_file()) == sorted(ENTRY_FILES)
    assert store.put(run, overwrite=True) == entry
    assert (run / "adapter" / "notes.md").read_text() == "why this adapter is the good one"


def test_put_of_a_run_whose_adapter_file_is_missing_is_refused(tmp_path):
    _, run = _run_folder(tmp_path)
    (run / "adapter" / "adapter_config.json").unlink()
    with pytest.raises(TrainingError, match="adapter_config.json is missing; the run saved no adapter there"):
        AdapterStore(tmp_path / "store").put(run)
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").rglob("*.json"))


def test_another_encoder_whose_path_ends_alike_never_replaces_an_entry(tmp_path):
    """/a/x/model and /b/x/model share the entry folder x--model: the second's adapter is refused, even with
    overwrite=True (before: "pass overwrite=True", which then replaced the first encoder's adapter)."""
    store, _ = _stored(tmp_path)
    entry = store.path("/a/x/model", "rte", "st-a", 1)
    before = {p: p.read_bytes() for p in entry.rglob("*") if p.is_file()}
    other = af.wrap(tiny_encoder("bert", seed=1))
    other.add_adapter("rte", af.AdapterConfig.pfeiffer(reduction_factor=4))
    for overwrite in (False, True):
        with pytest.raises(TrainingError, match="holds the adapter of another encoder, '/a/x/model'.*store of their"):
            store.put_model(other, "rte", None, "/b/x/model", "rte", "st-a", 1, overwrite=overwrite)
    assert {p: p.read_bytes() for p in entry.rglob("*") if p.is_file()} == before


def test_the_same_encoder_replaces_its_entry_at_its_place_or_with_its_weights(tmp_path):
    """overwrite=True still replaces an entry of the same encoder: retrained at the same place (new weights there),
    or the same weights from another place (the folder moved)."""
    store, _ = _stored(tmp_path)
    retrained = af.wrap(tiny_encoder("bert", seed=1))
    retrained.add_adapter("rte", af.AdapterConfig.pfeiffer(reduction_factor=4))
    store.put_model(retrained, "rte", None, "/a/x/model", "rte", "st-a", 1, overwrite=True)
    moved = af.wrap(tiny_encoder("bert", seed=1))
    moved.add_adapter("rte", af.AdapterConfig.pfeiffer(reduction_factor=4))
    entry = store.put_model(moved, "rte", None, "/c/x/model", "rte", "st-a", 1, overwrite=True)
    assert json.loads((entry / ENTRY_FILE).read_text())["encoder"] == "/c/x/model"


def test_a_run_folders_own_entry_is_replaced_whatever_encoder_it_is_retrained_on(tmp_path):
    """train(overwrite=True) replaces a run and its store entry: the same run folder retrained on another encoder
    (the experiment runner re-running a job whose encoder changed under --force) replaces the entry it stored; another
    run folder of an encoder whose path ends alike does not."""
    import shutil

    _, run = _run_folder(tmp_path)
    store = AdapterStore(tmp_path / "store")
    entry = store.put(run)
    edit = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**edit, "encoder": "/b/x/model"}))
    assert store.put(run, overwrite=True) == entry
    other = shutil.copytree(run, tmp_path / "elsewhere" / "seed-1")
    (other / "config.json").write_text(json.dumps({**edit, "encoder": "/c/x/model"}))
    with pytest.raises(TrainingError, match="holds the adapter of another encoder, '/b/x/model'"):
        store.put(other, overwrite=True)
    assert json.loads((entry / ENTRY_FILE).read_text())["source"] == str(run)


def test_an_entry_records_its_run_folder_as_an_absolute_path(tmp_path, monkeypatch):
    """put('runs/...') from the working dir: the entry says which run folder it came from wherever it is read, so a
    later put of that run folder (retrained on another encoder) is known as its own entry."""
    _, run = _run_folder(tmp_path)
    monkeypatch.chdir(tmp_path)
    entry = AdapterStore("store").put(run.relative_to(tmp_path))
    assert json.loads((entry / ENTRY_FILE).read_text())["source"] == str(run)
    edit = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**edit, "encoder": "/b/x/model"}))
    assert AdapterStore("store").put(run.relative_to(tmp_path), overwrite=True) == entry
