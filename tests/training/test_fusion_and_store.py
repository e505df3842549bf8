"""Stage 2 reuses stored stage-1 adapters untouched; the fusion's V is regularised and never weight-decayed."""

import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import TrainingArguments

import adapterfusion as af
from adapterfusion.errors import ConfigError, IncompatibleModelError
from adapterfusion.tasks import CarveOut, TaskError
from adapterfusion.tasks.registry import resolve_task
from adapterfusion.training import AdaptedTrainer, AdapterStore, TrainingError, fusion_value_parameters, train
from adapterfusion.training.api import check_carve_matches_adapter
from adapterfusion.training.checkpoints import TRAINABLE_FILE
from tiny_decoders import tiny_decoder
from tolerances import assert_close
from training_helpers import encoder_state, fresh_model

FAST = dict(max_steps=3, batch_size=16, max_length=64, learning_rate=1e-2, logging_steps=1, patience=None)
SLICE = {"train": 48, "validation": 32}


@pytest.fixture(scope="module")
def stage_one(tmp_path_factory, tiny_encoder_dir, demo_data_dir):
    root = tmp_path_factory.mktemp("stage1")
    store = AdapterStore(root / "store")
    for task in ("rte", "sst2"):
        train(
            task,
            "st-a",
            seed=1,
            encoder=tiny_encoder_dir,
            data_dir=demo_data_dir,
            output_dir=root / "runs",
            store=store,
            training_config=FAST,
            max_examples=SLICE,
        )
    return store


@pytest.mark.slow
def test_store_layout_and_isolation(stage_one, tiny_encoder_dir, tmp_path):
    store = stage_one
    rte = store.path(str(tiny_encoder_dir), "rte", "st-a", 1)
    assert store.has(str(tiny_encoder_dir), "rte", "st-a", 1) and not store.has(str(tiny_encoder_dir), "rte", "st-a", 2)
    assert rte.relative_to(store.root).parts[1:] == ("rte", "st-a", "seed-1")
    assert (rte / "adapter" / "adapter.safetensors").is_file() and (rte / "head" / "head.safetensors").is_file()
    before = {p: p.read_bytes() for p in rte.rglob("*") if p.is_file()}

    model = fresh_model(tiny_encoder_dir)
    model.add_adapter("cb", "pfeiffer")
    model.add_head("cb", af.ClassificationHead(num_labels=3))
    store.put_model(model, "cb", "cb", str(tiny_encoder_dir), "cb", "st-a", 1)
    with pytest.raises(TrainingError, match="overwrite"):
        store.put_model(model, "cb", "cb", str(tiny_encoder_dir), "cb", "st-a", 1)
    assert {p: p.read_bytes() for p in rte.rglob("*") if p.is_file()} == before
    assert not [p for p in store.root.rglob("*.tmp")]
    assert store.load_into(fresh_model(tiny_encoder_dir), "cb", "st-a", 1, head=True) == "cb"
    rte_labels = resolve_task("rte").label_names
    assert store.load_into(fresh_model(tiny_encoder_dir), "rte", "st-a", 1, head=True, labels=rte_labels) == "rte"
    model = fresh_model(tiny_encoder_dir)
    with pytest.raises(IncompatibleModelError, match="labels"):
        store.load_into(model, "rte", "st-a", 1, head=True, labels=("entailment", "neutral", "contradiction"))
    assert model.adapter_names == []  # all or nothing: the adapter alone stayed, and a retry was refused for it
    model.add_head("rte", af.ClassificationHead(num_labels=2))
    with pytest.raises(af.PieceExistsError, match="already has a head 'rte'.*overwrite=True"):
        store.load_into(model, "rte", "st-a", 1, head=True)
    assert model.adapter_names == []
    assert store.load_into(model, "rte", "st-a", 1, head=True, overwrite=True) == "rte"
    with torch.no_grad():
        model.adapter_parameters("rte")[0].add_(1.0)  # the loaded adapter, changed: a replacement must put it back
        kept = {k: v.clone() for k, v in model.export_piece("adapter", "rte").tensors.items()}
    with pytest.raises(IncompatibleModelError, match="labels"):  # overwrite=True: the adapter is replaced first
        store.load_into(model, "rte", "st-a", 1, head=True, overwrite=True, labels=("a", "b", "c"))
    assert all(torch.equal(v, kept[k]) for k, v in model.export_piece("adapter", "rte").tensors.items())
    with pytest.raises(TrainingError, match="train it first"):
        store.load_into(fresh_model(tiny_encoder_dir), "mnli", "st-a", 1)


@pytest.mark.slow
def test_fusion_reuses_stored_adapters_bit_identically(stage_one, tiny_encoder_dir, demo_data_dir, tmp_path):
    before = encoder_state(fresh_model(tiny_encoder_dir))
    result = train(
        "rte",
        "fusion-st-a",
        seed=1,
        encoder=tiny_encoder_dir,
        data_dir=demo_data_dir,
        output_dir=tmp_path,
        store=stage_one,
        training_config=FAST,
        max_examples=SLICE,
        setup_options={"sources": ["sst2"]},
    )
    model = result.model
    assert model.fusion_setup("fusion_rte").adapters == ("sst2", "rte")  # the target's own adapter is fused too
    after = encoder_state(model)
    assert after.keys() == before.keys() and all(torch.equal(before[n], after[n]) for n in before)
    for task in ("sst2", "rte"):
        adapter_dir = stage_one.path(str(tiny_encoder_dir), task, "st-a", 1) / "adapter"
        stored = load_file(str(adapter_dir / "adapter.safetensors"))
        model.save_adapter(task, tmp_path / f"check-{task}")
        now = load_file(str(tmp_path / f"check-{task}" / "adapter.safetensors"))
        assert stored.keys() == now.keys() and all(torch.equal(stored[k], now[k]) for k in stored)
    eye = torch.eye(model.hidden_size)
    assert any(not torch.allclose(v, eye, atol=1e-4) for v in fusion_value_parameters(model))  # V trained
    assert (result.run_dir / "fusion" / "fusion.safetensors").is_file()
    metrics = json.loads(result.metrics_path.read_text())
    assert metrics["parameters"]["trainable"] == sum(p.numel() for p in model.fusion_parameters("fusion_rte")) + sum(
        p.numel() for p in model.heads["rte"].parameters()
    )

    # The V-regulariser is part of the training loss of the same step.
    model.train()
    batch = {"input_ids": torch.randint(1000, 2000, (2, 9)), "attention_mask": torch.ones(2, 9, dtype=torch.long)}
    out = model(**batch, labels=torch.tensor([0, 1]))
    assert out.fusion_regularization > 0
    assert_close(out.loss, out.task_loss + model.fusion_regularization("fusion_rte"))

    # V, biases and LayerNorm weights get no weight decay in the optimizer the trainer builds.
    trainer = AdaptedTrainer(
        model=model, args=TrainingArguments(output_dir=str(tmp_path / "t"), report_to=[], weight_decay=0.1)
    )
    groups = trainer.create_optimizer().param_groups
    decay = {id(p) for g in groups if g["weight_decay"] > 0 for p in g["params"]}
    no_decay = {id(p) for g in groups if g["weight_decay"] == 0 for p in g["params"]}
    values = {id(p) for p in fusion_value_parameters(model)}
    assert values and values <= no_decay and not values & decay
    assert decay and all(p.ndim == 2 for g in groups if g["weight_decay"] > 0 for p in g["params"])
    assert decay | no_decay == {id(p) for p in model.parameters() if p.requires_grad}


def test_fusion_without_a_store_or_adapter_is_refused(tiny_encoder_dir, demo_data_dir, tmp_path):
    with pytest.raises(TrainingError, match="store"):
        train(
            "rte",
            "fusion-st-a",
            encoder=tiny_encoder_dir,
            data_dir=demo_data_dir,
            output_dir=tmp_path,
            training_config=FAST,
            max_examples=SLICE,
            setup_options={"sources": ["sst2"]},
        )
    with pytest.raises(TrainingError, match="train it first"):
        train(
            "rte",
            "fusion-st-a",
            seed=9,
            encoder=tiny_encoder_dir,
            data_dir=demo_data_dir,
            output_dir=tmp_path,
            store=AdapterStore(tmp_path / "empty"),
            training_config=FAST,
            max_examples=SLICE,
            setup_options={"sources": ["sst2"]},
        )


def test_non_finite_loss_stops_the_run(tiny_encoder_dir, tmp_path):
    model = fresh_model(tiny_encoder_dir)
    trainer = AdaptedTrainer(model=model, args=TrainingArguments(output_dir=str(tmp_path), report_to=[]))

    def broken(**inputs):
        return af.AdaptedModelOutput(loss=torch.tensor(float("nan")), task_loss=torch.tensor(float("nan")))

    with pytest.raises(TrainingError, match="nan"):
        trainer.compute_loss(broken, {"labels": torch.tensor([0])})


def test_checkpoint_holds_and_restores_the_trained_pieces(tiny_encoder_dir, tmp_path):
    """save_model writes the trainable parameters only; the Trainer's own loading path (load_state_dict of the model
    it trains) puts them back, and refuses a file that names parameters the model lacks."""
    model = fresh_model(tiny_encoder_dir)
    model.add_adapter("rte", "pfeiffer")
    model.add_head("rte", af.ClassificationHead(num_labels=2))
    model.train_adapter("rte")
    trainer = AdaptedTrainer(model=model, args=TrainingArguments(output_dir=str(tmp_path), report_to=[]))
    trainer.save_model(str(tmp_path / "ckpt"))
    saved = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    on_disk = load_file(str(tmp_path / "ckpt" / TRAINABLE_FILE))
    assert set(on_disk) == set(saved)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(1.0)
    result = trainer.model.load_state_dict(on_disk, False)  # as Trainer resume and load_best_model_at_end call it
    assert (result.missing_keys, result.unexpected_keys) == ([], [])
    assert all(torch.equal(p, saved[n]) for n, p in model.named_parameters() if p.requires_grad)
    with pytest.raises(TrainingError, match="lacks"):
        trainer.model.load_state_dict({**on_disk, "no.such.weight": torch.zeros(1)}, False)


def test_fusion_step_callback_drives_the_temperature_step(tiny_encoder_dir):
    from transformers import TrainerState

    from adapterfusion.training import FusionStepCallback

    model = fresh_model(tiny_encoder_dir)
    state = TrainerState()
    state.global_step = 17
    FusionStepCallback(model).on_step_begin(None, state, None)
    assert {site.state.fusion_step for site in model.sites} == {17}


def test_train_adapter_rerun_needs_overwrite_and_then_replaces_the_run(
    tmp_path, tiny_encoder_dir, demo_data_dir, capsys
):
    from adapterfusion.cli import main

    argv = [
        "train-adapter",
        "--task",
        "rte",
        "--seed",
        "3",
        "--encoder",
        str(tiny_encoder_dir),
        "--data-dir",
        str(demo_data_dir),
        "--output-dir",
        str(tmp_path / "runs"),
        "--store",
        str(tmp_path / "store"),
        "--max-steps",
        "1",
        "--batch-size",
        "8",
        "--max-examples",
        "16",
        "--max-length",
        "32",
    ]
    assert main(argv) == 0
    run_dir = tmp_path / "runs" / "rte" / "st-a" / "seed-3"
    first = {p.name: p.read_bytes() for p in run_dir.rglob("*.safetensors")}
    capsys.readouterr()
    assert main(argv) == 2  # refused before any work: the run and the store entry are untouched
    assert "was trained before" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in run_dir.rglob("*.safetensors")} == first
    assert main(argv + ["--overwrite", "--learning-rate", "0.5"]) == 0
    assert json.loads((run_dir / "config.json").read_text())["training"]["learning_rate"] == 0.5
    entry = AdapterStore(tmp_path / "store").path(str(tiny_encoder_dir), "rte", "st-a", 3)
    assert json.loads((entry / "entry.json").read_text())["source"] == str(run_dir)


def test_a_fusion_refuses_a_target_adapter_trained_on_another_seeds_carve():
    """fuse --seed 2 --adapter-seed 1 on MNLI (carved per seed from one split) scored the fusion on 491 of 600
    validation rows its target adapter had trained on."""

    def info(carve_seed):
        carve = CarveOut("validation_matched", 3000, 0.2, carve_seed, 2400, 600, ("train", "validation"))
        return type("Info", (), {"task": "mnli", "carve_out": carve})()

    with pytest.raises(TrainingError, match="adapter_seed=1: task 'mnli' has no separate validation split"):
        check_carve_matches_adapter(info(2), {"adapter_seed": 1}, seed=2)
    check_carve_matches_adapter(info(2), {"adapter_seed": 2}, seed=2)  # the same seed's carve
    check_carve_matches_adapter(info(2), {"adapter_seed": None}, seed=2)  # the run's seed
    check_carve_matches_adapter(info(0), {"adapter_seed": 1}, seed=2)  # a carve that does not follow the seed
    no_carve = type("Info", (), {"task": "rte", "carve_out": None})()
    check_carve_matches_adapter(no_carve, {"adapter_seed": 1}, seed=2)


def test_the_trainer_leaves_the_wrapped_models_use_cache_as_it_was(tmp_path):
    """transformers.Trainer sets model.config.use_cache to its argument (False) on any model with a config; an
    AdaptedModel has one (its wrapped model's), so training would have turned the wrapped decoder's cache off."""
    model = af.wrap(tiny_decoder("llama"))
    model.add_adapter("a")
    model.train_adapter("a")
    assert model.model.config.use_cache is True
    AdaptedTrainer(model=model, args=TrainingArguments(output_dir=str(tmp_path / "t"), report_to=[]))
    assert model.model.config.use_cache is True


@pytest.mark.parametrize("seed", [1.5, True, None, "1", -1])
def test_store_entry_seed_must_be_an_integer(tmp_path, seed):
    """seed 1.5 or True named the entry of seed 1 (another run's adapter was loaded); None failed with a TypeError."""
    store = AdapterStore(tmp_path / "store")
    with pytest.raises(ConfigError, match=r"^seed="):
        store.path("some-org/some-encoder", "rte", "st-a", seed)
    with pytest.raises(ConfigError, match=r"^seed="):
        store.has("some-org/some-encoder", "rte", "st-a", seed)
    assert not (tmp_path / "store").exists()


def test_unregistered_own_task_as_fusion_source_says_how_to_name_it(tmp_path):
    """A TaskSpec of the user's own named as a source got 'unknown task' and the built-in list, not the fix."""
    with pytest.raises(TaskError, match=r"unknown task 'own2'.*register_task\(spec\)"):
        train("rte", "fusion-st-a", output_dir=tmp_path / "runs", setup_options={"sources": ["own2"]})
    assert not (tmp_path / "runs").exists()


def test_store_load_with_head_of_an_entry_stored_without_one(tmp_path):
    """load_into(head=True) of an entry stored with put_model(head=None) said 'head folder ... nor a Hub id'."""
    from tiny_models import tiny_encoder

    model = af.wrap(tiny_encoder("bert"))
    model.add_adapter("rte", "pfeiffer")
    store = AdapterStore(tmp_path / "store")
    store.put_model(model, "rte", None, "some-org/some-encoder", "rte", "st-a", 1)
    fresh = af.wrap(tiny_encoder("bert"))
    with pytest.raises(TrainingError, match=r"holds no head .*head=False"):
        store.load_into(fresh, "rte", "st-a", 1, encoder="some-org/some-encoder", head=True)
    assert fresh.adapter_names == [] and fresh.head_names == []  # nothing half loaded
