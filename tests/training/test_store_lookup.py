"""How a store entry is found again: by its folder, and then checked against what its entry.json records (the
encoder folder, task, setup and seed it was stored for, and the sha256 of its adapter and head files), so that an
entry copied, renamed or overwritten by hand is refused instead of handed back as the one asked for."""

from __future__ import annotations

import json
import shutil

import pytest

import adapterfusion as af
from adapterfusion.errors import RunFileError
from adapterfusion.serialization.pieces import piece_digest
from adapterfusion.training import AdapterStore, TrainingError
from adapterfusion.training.store import ENTRY_FILE, resolve_zoo
from tiny_models import tiny_encoder


def _store(tmp_path) -> AdapterStore:
    """Entries of encoder 'org/enc', setup st-a, seed 1: rte (adapter a, head h) and cb (adapter b, head g)."""
    model = af.wrap(tiny_encoder("bert"))
    for name in ("a", "b"):
        model.add_adapter(name, af.AdapterConfig.pfeiffer(reduction_factor=4))
    for name in ("h", "g"):
        model.add_head(name, af.ClassificationHead(num_labels=2))
    store = AdapterStore(tmp_path / "store")
    store.put_model(model, "a", "h", "org/enc", "rte", "st-a", 1)
    store.put_model(model, "b", "g", "org/enc", "cb", "st-a", 1)
    return store


def _load(store: AdapterStore, task: str, seed: int = 1, encoder: str = "org/enc", head: bool = False) -> str:
    return store.load_into(af.wrap(tiny_encoder("bert")), task, "st-a", seed, encoder=encoder, head=head)


def test_an_entry_records_the_digests_of_its_files(tmp_path):
    entry = _store(tmp_path).path("org/enc", "rte", "st-a", 1)
    recorded = json.loads((entry / ENTRY_FILE).read_text())
    assert recorded["adapter_sha256"] == piece_digest(entry / "adapter")
    assert recorded["head_sha256"] == piece_digest(entry / "head")


@pytest.mark.parametrize(
    ("task", "seed", "encoder", "differs"),
    [("rte", 2, "org/enc", "seed=1"), ("cb", 1, "org/enc", "task='rte'"), ("rte", 1, "org/other", "encoder_key")],
)
def test_an_entry_copied_by_hand_to_another_folder_is_refused(tmp_path, task, seed, encoder, differs):
    store = _store(tmp_path)
    copy = store.path(encoder, task, "st-a", seed)
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(store.path("org/enc", "rte", "st-a", 1), copy)
    with pytest.raises(TrainingError, match=f"is not the one its folder names: its entry.json records {differs}"):
        _load(store, task, seed, encoder)
    assert _load(store, "rte") == "rte"  # the original is found as before


def test_files_replaced_by_hand_are_refused_and_the_head_only_when_it_loads(tmp_path):
    store = _store(tmp_path)
    rte, cb = store.path("org/enc", "rte", "st-a", 1), store.path("org/enc", "cb", "st-a", 1)
    shutil.rmtree(rte / "head")
    shutil.copytree(cb / "head", rte / "head")
    assert _load(store, "rte") == "rte"  # the adapter alone is still the one stored
    with pytest.raises(TrainingError, match="head files in .* are not those this store entry was stored with"):
        _load(store, "rte", head=True)
    shutil.rmtree(rte / "adapter")
    shutil.copytree(cb / "adapter", rte / "adapter")
    with pytest.raises(TrainingError, match="adapter files in .* are not those .* adapter_sha256"):
        _load(store, "rte")


def test_an_entry_stored_before_the_records_loads_by_its_folder_as_before(tmp_path):
    store = _store(tmp_path)
    path = store.path("org/enc", "rte", "st-a", 1) / ENTRY_FILE
    path.write_text(json.dumps({"encoder": "org/enc", "source": "model"}))
    assert _load(store, "rte", head=True) == "rte"


def test_a_digest_that_is_not_a_string_is_a_damaged_entry(tmp_path):
    store = _store(tmp_path)
    path = store.path("org/enc", "rte", "st-a", 1) / ENTRY_FILE
    path.write_text(json.dumps({**json.loads(path.read_text()), "adapter_sha256": 5}))
    with pytest.raises(RunFileError, match="adapter_sha256=5 is not a sha256"):
        _load(store, "rte")


def test_an_encoder_spelt_otherwise_is_pointed_to_the_folder_that_holds_it(tmp_path):
    store = _store(tmp_path)
    with pytest.raises(TrainingError, match=r"holds that entry for the encoder folder\(s\) \['org--enc'\]"):
        _load(store, "rte", encoder="enc")
    with pytest.raises(TrainingError, match=r"train it first: train\('mnli', 'st-a', seed=1, store=...\)$"):
        _load(store, "mnli", encoder="enc")  # no entry of that task anywhere: nothing to point to


def test_a_zoo_may_be_given_as_the_store_itself(tmp_path):
    store = _store(tmp_path)
    assert resolve_zoo(store).root == store.root
    assert resolve_zoo(store.root).root == store.root


def test_a_missing_entry_says_how_its_setup_trains_one(tmp_path):
    """An MT-A entry comes from train_multitask: train() refuses 'mt-a', so the hint names train_multitask."""
    store = _store(tmp_path)
    model = af.wrap(tiny_encoder("bert"))
    with pytest.raises(TrainingError, match=r"train it first: train_multitask\(\['sst2', <its other tasks>\], seed=1"):
        store.load_into(model, "sst2", "mt-a", 1, encoder="org/enc")
    with pytest.raises(TrainingError, match=r"train it first: train\('sst2', 'st-a', seed=1, store=\.\.\.\)"):
        store.load_into(model, "sst2", "st-a", 1, encoder="org/enc")
