"""MT-A: annealed task sampling, one joint run over several tasks, and Fusion w/ MT-A on top of it."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from safetensors.torch import load_file

import adapterfusion as af
from adapterfusion.evaluation import evaluate_run
from adapterfusion.tasks.collator import TaskCollator
from adapterfusion.tasks.encoding import encode_task
from adapterfusion.tasks.errors import TaskError
from adapterfusion.tasks.loading import load_task_data
from adapterfusion.tasks.spec import TaskSpec
from adapterfusion.training import (
    AdapterStore,
    AnnealedSchedule,
    TaskSampler,
    TrainingError,
    annealed_alpha,
    sampling_probabilities,
    train,
    train_multitask,
)
from tolerances import assert_close
from training_helpers import encoder_state, fresh_model

TASKS = ["sst2", "rte", "cb"]
FAST = dict(
    max_steps=36, batch_size=8, max_length=48, learning_rate=5e-3, warmup_ratio=0.0, logging_steps=1, patience=None
)
SLICE = {"train": 16, "validation": 16}


# ---- sampling ------------------------------------------------------------------------------------------------
def test_sampling_probabilities_proportional_uniform_and_normalised():
    sizes = [100, 300, 600]
    np.testing.assert_allclose(sampling_probabilities(sizes, 1.0), [0.1, 0.3, 0.6], rtol=1e-12)
    np.testing.assert_allclose(sampling_probabilities(sizes, 0.0), [1 / 3] * 3, rtol=1e-12)
    half = np.sqrt(sizes) / np.sqrt(sizes).sum()  # independent: N^0.5 / sum N^0.5
    np.testing.assert_allclose(sampling_probabilities(sizes, 0.5), half, rtol=1e-12)
    for alpha in (0.0, 0.2, 0.7, 1.0, 3.0):
        assert sampling_probabilities([392702, 2490, 250], alpha).sum() == pytest.approx(1.0, abs=1e-12)
    with pytest.raises(TrainingError, match="positive"):
        sampling_probabilities([10, 0], 1.0)


@pytest.mark.parametrize("alpha", [float("nan"), float("inf"), 10**400, True, "1"])
def test_a_sampling_exponent_that_is_no_finite_number_is_refused(alpha):
    """10**400 raised numpy's TypeError from np.isfinite, which takes no int beyond a float."""
    with pytest.raises(TrainingError, match="alpha=.* must be a finite number"):
        sampling_probabilities([10, 20], alpha)
    with pytest.raises(TrainingError, match="annealed sampling: end=.* must be a finite number"):
        AnnealedSchedule(end=alpha)


@pytest.mark.parametrize("alpha", [-1e308, -50.0, 50.0, 1e308])
def test_extreme_exponents_give_a_distribution_in_the_limit(alpha):
    """p_i ∝ N_i^alpha tends to all mass on the smallest task as alpha -> -inf and on the largest as alpha -> +inf;
    alpha = -1e308 was [nan, 0] (inf / inf), which numpy's choice refused as the steps were drawn."""
    sizes = [3, 5, 4]
    probabilities = sampling_probabilities(sizes, alpha)
    assert np.isfinite(probabilities).all() and probabilities.sum() == pytest.approx(1.0, abs=1e-12)
    assert int(np.argmax(probabilities)) == (0 if alpha < 0 else 1)
    if abs(alpha) == 50:  # N^alpha itself is a float here: the formula as written, independent of the log space
        expected = np.array(sizes, dtype=np.float64) ** alpha
        np.testing.assert_allclose(probabilities, expected / expected.sum(), rtol=1e-9)


def test_task_sizes_must_be_counts_and_may_be_past_any_float():
    assert sampling_probabilities([10**400, 5], 1.0).tolist() == [1.0, 0.0]  # was an OverflowError
    for sizes in ([3.7, 5], ["3", 5], [True, 5], [], "35"):
        with pytest.raises(TrainingError, match="positive example counts"):
            TaskSampler(sizes, 2, 2, seed=0)


def test_sampler_refuses_a_schedule_or_seed_it_cannot_use():
    with pytest.raises(TrainingError, match="expected an AnnealedSchedule"):
        TaskSampler([3, 5], 2, 2, seed=0, schedule={"start": 1.0})  # type: ignore[arg-type]
    with pytest.raises(TrainingError, match="seed=-1 must be an integer"):
        TaskSampler([3, 5], 2, 2, seed=-1)
    with pytest.raises(TrainingError, match="too far apart"):
        AnnealedSchedule(start=1e308, end=-1e308)
    schedule = AnnealedSchedule(start=np.float32(0.5))  # type: ignore[arg-type]
    assert type(schedule.start) is float and schedule.to_dict()["start"] == 0.5


def test_annealed_alpha_follows_stickland_and_murray_per_epoch():
    # alpha = 1 - 0.8 (e - 1) / (E - 1) for epoch e = 1..E (Stickland & Murray 2019, annealed sampling)
    assert [annealed_alpha(e, 5) for e in range(1, 6)] == pytest.approx([1.0, 0.8, 0.6, 0.4, 0.2], abs=1e-12)
    assert annealed_alpha(1, 101) == 1.0 and annealed_alpha(101, 101) == pytest.approx(0.2, abs=1e-12)
    assert annealed_alpha(51, 101) == pytest.approx(0.6, abs=1e-12)
    assert annealed_alpha(500, 101) == pytest.approx(0.2, abs=1e-12)  # past the plan: stays at the end value
    assert annealed_alpha(1, 1) == 1.0  # a one-epoch plan samples in proportion to size
    assert annealed_alpha(10, 10, start=0.5, end=0.0) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(TrainingError, match="epochs=0"):
        annealed_alpha(1, 0)
    with pytest.raises(TrainingError, match="epoch=0"):
        annealed_alpha(0, 3)


def test_schedule_is_constant_within_an_epoch_and_steps_through_the_planned_epochs():
    schedule, steps_per_epoch, epochs = AnnealedSchedule(), 7, 3
    alphas = [schedule.alpha(step, steps_per_epoch, epochs) for step in range(steps_per_epoch * epochs + 2)]
    expected = [1.0] * 7 + [0.6] * 7 + [0.2] * 7 + [0.2] * 2  # steps past the plan stay at 0.2
    np.testing.assert_allclose(alphas, expected, rtol=0, atol=1e-12)
    sampler = TaskSampler([10, 20], steps_per_epoch, epochs, seed=0)
    assert [sampler.alpha(step) for step in range(21)] == alphas[:21]


def test_seeded_sampler_matches_the_annealed_proportions():
    sizes, steps_per_epoch, epochs = [1000, 100, 10], 3000, 10
    total = steps_per_epoch * epochs
    first = TaskSampler(sizes, steps_per_epoch, epochs, seed=5)
    second = TaskSampler(sizes, steps_per_epoch, epochs, seed=5)
    draws = np.array([first.draw(step) for step in range(total)])
    assert [second.draw(step) for step in range(200)] == draws[:200].tolist()  # same seed, same order
    assert first.counts == np.bincount(draws, minlength=3).tolist()
    # Chi-square per epoch against the expected counts under p(alpha(e)) computed independently.
    for epoch, part in enumerate(np.array_split(np.arange(total), epochs), start=1):
        alpha = 1.0 - 0.8 * (epoch - 1) / (epochs - 1)
        weights = np.array(sizes, dtype=float) ** alpha
        expected = len(part) * weights / weights.sum()
        observed = np.bincount(draws[part], minlength=3)
        chi2 = ((observed - expected) ** 2 / expected).sum()
        assert chi2 < 13.8, (epoch, observed, expected)  # df=2, p=0.001
    early, late = np.bincount(draws[:3000], minlength=3), np.bincount(draws[-3000:], minlength=3)
    assert early[2] < late[2] and early[0] > late[0]  # the small task gains share as alpha anneals


# ---- a tiny MT-A run -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mt_a(tmp_path_factory, tiny_encoder_dir, demo_data_dir):
    root = tmp_path_factory.mktemp("mt-a")
    store = AdapterStore(root / "store")
    # An ST-A entry of a task outside the run: the MT-A run must not touch it.
    outsider = fresh_model(tiny_encoder_dir)
    outsider.add_adapter("mrpc", "pfeiffer")
    outsider.add_head("mrpc", af.ClassificationHead(num_labels=2))
    store.put_model(outsider, "mrpc", "mrpc", str(tiny_encoder_dir), "mrpc", "st-a", 7)
    base_files = {p: p.read_bytes() for p in tiny_encoder_dir.rglob("*") if p.is_file()}
    outsider_files = {p: p.read_bytes() for p in store.root.rglob("*") if p.is_file()}
    initial = {}  # each piece's weights right after train_multitask created it
    add_adapter, add_head = af.AdaptedModel.add_adapter, af.AdaptedModel.add_head

    def recording_adapter(self, name, *args, **kwargs):
        config = add_adapter(self, name, *args, **kwargs)
        initial[("adapter", name)] = {k: v.detach().clone() for k, v in _adapter_state(self, name).items()}
        return config

    def recording_head(self, name, *args, **kwargs):
        head = add_head(self, name, *args, **kwargs)
        initial[("head", name)] = {k: v.detach().clone() for k, v in head.state_dict().items()}
        return head

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(af.AdaptedModel, "add_adapter", recording_adapter)
        patch.setattr(af.AdaptedModel, "add_head", recording_head)
        result = train_multitask(
            TASKS,
            seed=7,
            encoder=tiny_encoder_dir,
            data_dir=demo_data_dir,
            output_dir=root / "runs",
            store=store,
            training_config=FAST,
            max_examples=SLICE,
            reduction_factor=4,
        )
    return result, store, base_files, outsider_files, initial


def _adapter_state(model, name):
    return {
        f"{site.layer_index}.{site.position}.{k}": v
        for site in model.sites_with_adapter(name)
        for k, v in site.adapters[name].state_dict().items()
    }


@pytest.mark.slow
def test_mt_a_run_trains_every_task_and_writes_its_files(mt_a, tiny_encoder_dir):
    result, store, base_files, outsider_files, initial = mt_a
    assert result.run_dir.parts[-3:] == ("mt-a", "mt-a", "seed-7")
    config = json.loads(result.config_path.read_text())
    metrics = json.loads(result.metrics_path.read_text())
    assert config["tasks"] == TASKS and config["sizes"] == {"sst2": 16, "rte": 16, "cb": 16}
    assert config["sampling"]["start"] == 1.0 and config["sampling"]["end"] == 0.2
    assert config["sampling"]["steps_per_epoch"] == 6 and config["training"]["learning_rate"] == 5e-3
    # alpha steps down once per epoch over the 6 planned epochs (36 steps of 6), reaching 0.2 in the last one
    assert config["sampling"]["per"] == "epoch" and config["sampling"]["planned_epochs"] == 6
    np.testing.assert_allclose(
        [e["alpha"] for e in metrics["epochs"]], [1.0, 0.84, 0.68, 0.52, 0.36, 0.2], rtol=0, atol=1e-12
    )
    for entry in metrics["train_losses"]:  # logged every step: the alpha of the step's epoch
        epoch = (entry["step"] - 1) // 6
        assert entry["alpha"] == pytest.approx(1.0 - 0.8 * epoch / 5, abs=1e-12), entry
    assert sum(metrics["task_counts"].values()) == 36 and all(n > 0 for n in metrics["task_counts"].values())
    assert len(metrics["epochs"]) == 6 and set(metrics["best"]) == set(TASKS)
    # each task's best accuracy is a share of its 16 dev examples (the next test re-scores them by hand)
    for task in TASKS:
        assert metrics["best"][task]["accuracy"] * SLICE["validation"] == pytest.approx(
            round(metrics["best"][task]["accuracy"] * SLICE["validation"]), abs=1e-9
        )
    assert metrics["train_seconds"] > 0
    assert result.mean_metric == pytest.approx(np.mean([result.metrics[t]["accuracy"] for t in TASKS]))

    # Each task's training loss falls (tasks differ in loss scale, so compare a task with itself).
    assert len(metrics["train_losses"]) == 36
    per_task = {task: [e["loss"] for e in metrics["train_losses"] if e["task"] == task] for task in TASKS}
    first = sum(np.mean(losses[:3]) for losses in per_task.values())
    last = sum(np.mean(losses[-3:]) for losses in per_task.values())
    assert last < 0.9 * first, per_task

    # Every task's adapter and head moved away from its initialisation; the encoder changed too.
    model, init = result.model, fresh_model(tiny_encoder_dir)
    for task in TASKS:
        adapter = _adapter_state(model, task)
        assert adapter.keys() == initial[("adapter", task)].keys()
        assert all(not torch.equal(v.cpu(), initial[("adapter", task)][k]) for k, v in adapter.items()), task
        head = model.heads[task].state_dict()
        assert all(not torch.equal(v.cpu(), initial[("head", task)][k]) for k, v in head.items()), task
        saved = load_file(str(result.pieces[task]["head"] / "head.safetensors"))
        assert all(torch.equal(saved[k], v.cpu()) for k, v in head.items())
    before, after = encoder_state(init), encoder_state(model)
    assert sum(not torch.equal(before[n], after[n]) for n in before) > len(before) // 2

    # The saved encoder is the trained one; the base encoder folder and the outsider entry are untouched.
    reloaded = fresh_model(result.encoder_dir)
    assert all(torch.equal(after[n], v) for n, v in encoder_state(reloaded).items())
    assert {p: p.read_bytes() for p in tiny_encoder_dir.rglob("*") if p.is_file()} == base_files
    assert all(p.read_bytes() == data for p, data in outsider_files.items())
    mt_entries = sorted(e["task"] for e in store.entries() if e["setup"] == "mt-a")
    assert mt_entries == sorted(TASKS)
    assert all(e["encoder_key"] == af.training.encoder_key(str(tiny_encoder_dir)) for e in store.entries())


@pytest.mark.slow
def test_mt_a_recorded_dev_metrics_are_what_the_saved_run_scores(mt_a, demo_data_dir):
    """metrics.json's best epoch is what the saved encoder/, adapters and heads score on each task's dev set, loaded
    from the run folder and scored here by hand (a plain forward loop; accuracy, top-prediction share and the mean
    cross-entropy written out), not by the library's evaluation code that recorded them."""
    result = mt_a[0]
    config = json.loads(result.config_path.read_text())
    metrics = json.loads(result.metrics_path.read_text())
    best = next(epoch["tasks"] for epoch in metrics["epochs"] if epoch["epoch"] == metrics["best_epoch"])
    tokenizer = transformers.AutoTokenizer.from_pretrained(result.encoder_dir)
    model = fresh_model(result.encoder_dir)
    for task in TASKS:
        model.load_adapter(result.run_dir / "tasks" / task / "adapter", name=task)
        model.load_head(result.run_dir / "tasks" / task / "head", name=task)
    model.eval()
    training = config["training"]
    batch_size = training["eval_batch_size"] or training["batch_size"]
    collate = TaskCollator(tokenizer)
    for spec in map(TaskSpec.from_dict, config["task_specs"]):
        data, _ = load_task_data(spec, demo_data_dir, result.seed, max_examples=SLICE)
        dev = encode_task(spec, data, tokenizer, training["max_length"])[0]["validation"]
        model.activate(adapter=spec.name, head=spec.name)
        logits, labels = [], []
        with torch.no_grad():
            for start in range(0, len(dev), batch_size):
                batch = collate([dev[i] for i in range(start, min(start + batch_size, len(dev)))])
                labels.append(batch.pop("labels"))
                logits.append(model(**batch).logits.double())
        logits, labels = torch.cat(logits), torch.cat(labels)
        predicted = logits.argmax(-1)
        by_hand = {
            "accuracy": (predicted == labels).double().mean().item(),
            "top_prediction_share": predicted.bincount().max().item() / len(labels),
            "loss": -logits.log_softmax(-1)[torch.arange(len(labels)), labels].mean().item(),
        }
        recorded = {key: best[spec.name][key] for key in by_hand}
        assert_close(recorded, by_hand, dtype=torch.float32, label=spec.name)  # the run computed in float32
        assert {k: v for k, v in best[spec.name].items() if k != "loss"} == metrics["best"][spec.name]
        assert result.metrics[spec.name] == metrics["best"][spec.name]


@pytest.mark.slow
def test_fusion_mt_a_leaves_the_mt_a_adapters_and_encoder_bit_identical(mt_a, demo_data_dir, tmp_path):
    result, store = mt_a[0], mt_a[1]
    before = encoder_state(fresh_model(result.encoder_dir))
    fused = train(
        "rte",
        "fusion-mt-a",
        seed=7,
        encoder=result.encoder_dir,
        data_dir=demo_data_dir,
        output_dir=tmp_path,
        store=store,
        training_config=dict(FAST, max_steps=3),
        max_examples=SLICE,
        setup_options={"sources": ["sst2", "cb"]},
    )
    model = fused.model
    assert model.fusion_setup("fusion_rte").adapters == ("sst2", "cb", "rte")
    after = encoder_state(model)
    assert after.keys() == before.keys() and all(torch.equal(before[n], after[n]) for n in before)
    for task in ("sst2", "cb", "rte"):
        trained = load_file(str(result.pieces[task]["adapter"] / "adapter.safetensors"))
        model.save_adapter(task, tmp_path / f"check-{task}")
        now = load_file(str(tmp_path / f"check-{task}" / "adapter.safetensors"))
        assert trained.keys() == now.keys() and all(torch.equal(trained[k], now[k]) for k in trained)
    assert (fused.run_dir / "fusion" / "fusion.safetensors").is_file()


@pytest.mark.slow
def test_fusion_mt_a_and_mt_a_refuse_misuse(mt_a, tiny_encoder_dir, demo_data_dir, tmp_path):
    result, store = mt_a[0], mt_a[1]
    common = dict(
        seed=7,
        data_dir=demo_data_dir,
        output_dir=tmp_path,
        store=store,
        training_config=dict(FAST, max_steps=1),
        max_examples=SLICE,
    )
    with pytest.raises(TrainingError, match="mt_a.json"):  # the plain encoder is not an MT-A encoder
        train("rte", "fusion-mt-a", encoder=tiny_encoder_dir, **common)
    with pytest.raises(TrainingError, match="not \\['mrpc'\\]"):
        train("rte", "fusion-mt-a", encoder=result.encoder_dir, setup_options={"sources": ["mrpc"]}, **common)
    with pytest.raises(TrainingError, match="train_multitask"):
        train("rte", "mt-a", encoder=tiny_encoder_dir, **common)
    with pytest.raises(TrainingError, match="twice"):
        train_multitask(["rte", "rte"], encoder=tiny_encoder_dir, data_dir=demo_data_dir, output_dir=tmp_path)


def test_mt_a_refuses_one_task_and_a_reduction_factor_without_bottleneck_before_any_folder(
    tiny_encoder_dir, demo_data_dir, tmp_path
):
    """MT-A over one task is no multi-task training (the paper's MT-A fine-tunes the encoder on several): st-a is
    the setup of one task. A reduction factor the hidden size (32) leaves nothing of had been refused once both
    tasks' data had loaded, leaving the run's empty folders."""
    common = dict(encoder=tiny_encoder_dir, data_dir=demo_data_dir, output_dir=tmp_path / "runs")
    with pytest.raises(TrainingError, match=r"several tasks jointly.*\['rte'\] names one: for one task use st-a"):
        train_multitask(["rte"], **common)
    with pytest.raises(TrainingError, match=r"leaves no bottleneck for hidden size 32.*\(encoder"):
        train_multitask(["rte", "cb"], reduction_factor=64, **common)
    assert not (tmp_path / "runs").exists()


def _own_files_task(folder: Path) -> TaskSpec:
    """A two-class task from the user's own CSV files (no folder of its name in any data_dir)."""
    rows = "".join(f"{'good' if i % 2 else 'bad'} example {i},{'pos' if i % 2 else 'neg'}\n" for i in range(12))
    for split in ("train", "validation"):
        (folder / f"{split}.csv").write_text("text,label\n" + rows)
    return TaskSpec(
        name="own",
        kind="single",
        text_fields=("text",),
        label_names=("neg", "pos"),
        data_files={split: str(folder / f"{split}.csv") for split in ("train", "validation")},  # type: ignore[arg-type]
    )


def test_mt_a_takes_a_data_folder_per_task(tiny_encoder_dir, demo_data_dir, tmp_path):
    """One data_dir for all would send the own-files task to demo_data_dir/own (which does not exist); a mapping
    gives rte its folder and leaves `own` to its files. Keys that are not tasks are refused before any run folder."""
    own = _own_files_task(tmp_path)
    common = dict(encoder=tiny_encoder_dir, training_config=dict(FAST, max_steps=1), max_examples=SLICE)
    with pytest.raises(TaskError, match="own"):
        train_multitask(["rte", own], data_dir=demo_data_dir, output_dir=tmp_path / "all", **common)
    with pytest.raises(TrainingError, match=r"\['rtee'\].*not among the tasks"):
        train_multitask(["rte", own], data_dir={"rtee": demo_data_dir}, output_dir=tmp_path / "typo", **common)
    with pytest.raises(TrainingError, match=r"data_dir\['rte'\]=3 must be a folder path"):
        train_multitask(["rte", own], data_dir={"rte": 3}, output_dir=tmp_path / "typo", **common)
    assert not (tmp_path / "typo").exists()
    result = train_multitask(["rte", own], data_dir={"rte": demo_data_dir}, output_dir=tmp_path / "runs", **common)
    config = json.loads((Path(result.run_dir) / "config.json").read_text())
    sources = {entry["task"]: (entry["source"], entry["location"]) for entry in config["data"]}
    assert sources == {"rte": ("local", str(demo_data_dir)), "own": ("files", "data_files")}


def test_an_mt_a_run_and_each_of_its_task_folders_are_refused_for_rebuilding_with_what_to_do(mt_a):
    """`evaluate` on an MT-A run or on one of its tasks/<task> folders (no config.json of their own): both name
    the MT-A run and what to rebuild instead, rather than calling the task folder no run or an unfinished one."""
    result = mt_a[0]
    with pytest.raises(TrainingError, match="is an MT-A run .*rebuild the fusion-mt-a runs built on it"):
        evaluate_run(result.run_dir)
    task_dir = result.run_dir / "tasks" / TASKS[0]
    assert task_dir.is_dir()
    with pytest.raises(TrainingError, match=f"is one task of the MT-A run {result.run_dir}; rebuild the fusion-mt-a"):
        evaluate_run(task_dir)
