"""`evaluate` scores a run as training scored its dev set: a fusion under its temperature schedule at the step its
best checkpoint was scored at (it ran at step 0, T = T0 = 50: 5.09 dev loss against the 0.76 recorded), and a run
trained under bf16 autocast under it (it scored in float32)."""

import json

from adapterfusion.evaluation import evaluate_run
from adapterfusion.training import train
from adapterfusion.training.api import scored_fusion_step


def test_evaluate_scores_a_temperature_fusion_as_training_did(tmp_path, tiny_encoder_dir, demo_data_dir):
    common = dict(
        seed=1, data_dir=demo_data_dir, output_dir=tmp_path, store=tmp_path / "store", encoder=tiny_encoder_dir
    )
    slice_ = {"train": 24, "validation": 20}
    for task in ("rte", "sst2"):
        settings = dict(epochs=1, batch_size=8, max_length=32, learning_rate=0.5, patience=None)
        train(task, "st-a", **common, max_examples=slice_, training_config=settings)
    fused = train(
        "rte",
        "fusion-st-a",
        **common,
        max_examples=slice_,
        training_config=dict(epochs=3, batch_size=8, max_length=32, learning_rate=0.3, patience=None),
        setup_options={"sources": ["sst2"], "fusion_config": {"temperature": True, "temperature_steps": 4}},
    )
    metrics = json.loads(fused.metrics_path.read_text())
    assert metrics["fusion_step"] >= 1  # past the schedule's start
    evaluated = evaluate_run(fused.run_dir)
    assert abs(evaluated["metrics"]["loss"] - metrics["best"]["loss"]) < 1e-5, (evaluated, metrics["best"])


def test_the_scored_step_is_the_one_before_the_checkpoints():
    assert scored_fusion_step("/r/checkpoints/checkpoint-12", 30) == 11
    assert scored_fusion_step(None, 30) == 30 and scored_fusion_step("/r/weird", 7) == 7


def test_evaluate_scores_a_bf16_run_under_bf16(tmp_path, tiny_encoder_dir, demo_data_dir):
    settings = dict(epochs=1, batch_size=8, max_length=32, learning_rate=0.5, patience=None, bf16=True)
    run = train("rte", "st-a", seed=1, data_dir=demo_data_dir, output_dir=tmp_path, encoder=tiny_encoder_dir,
                max_examples={"train": 16, "validation": 16}, training_config=settings)  # fmt: skip
    recorded = json.loads(run.metrics_path.read_text())["best"]["loss"]
    assert abs(evaluate_run(run.run_dir)["metrics"]["loss"] - recorded) < 1e-6


def test_prune_scores_a_bf16_fusion_as_training_did(tmp_path, tiny_encoder_dir, demo_data_dir):
    """prune's full-fusion metrics are the run's recorded ones: under bf16 autocast for a run trained with it."""
    from adapterfusion.pruning import prune_fusion

    common = dict(
        seed=1, data_dir=demo_data_dir, output_dir=tmp_path, store=tmp_path / "store", encoder=tiny_encoder_dir
    )
    slice_ = {"train": 16, "validation": 16}
    settings = dict(epochs=1, batch_size=8, max_length=32, learning_rate=0.5, patience=None, bf16=True)
    for task in ("rte", "sst2"):
        train(task, "st-a", **common, max_examples=slice_, training_config=settings)
    fused = train("rte", "fusion-st-a", **common, max_examples=slice_, training_config=settings,
                  setup_options={"sources": ["sst2"]})  # fmt: skip
    recorded = json.loads(fused.metrics_path.read_text())["best"]["loss"]
    pruned = prune_fusion(fused.run_dir, keep=1, repeats=1, timing_batches=1)
    assert abs(pruned.before.metrics["loss"] - recorded) < 1e-6


def test_a_run_recorded_with_a_no_op_fusion_option_still_rebuilds(tmp_path, tiny_encoder_dir, demo_data_dir):
    """A fusion run finished before no-op options were refused (temperature_steps without temperature) trained
    without that option's effect: it rebuilds and scores as recorded, though a new run with it is refused."""
    common = dict(
        seed=1, data_dir=demo_data_dir, output_dir=tmp_path, store=tmp_path / "store", encoder=tiny_encoder_dir
    )
    settings = dict(epochs=1, batch_size=8, max_length=32, learning_rate=0.5, patience=None)
    slice_ = {"train": 16, "validation": 16}
    for task in ("rte", "sst2"):
        train(task, "st-a", **common, max_examples=slice_, training_config=settings)
    fused = train("rte", "fusion-st-a", **common, max_examples=slice_, training_config=settings,
                  setup_options={"sources": ["sst2"], "fusion_config": {"value_init_noise": 0.001}})  # fmt: skip
    config_path = fused.run_dir / "config.json"
    config = json.loads(config_path.read_text())
    config["setup_options"]["fusion_config"]["temperature_steps"] = 20  # as an older version wrote it
    config_path.write_text(json.dumps(config))
    recorded = json.loads(fused.metrics_path.read_text())["best"]["loss"]
    assert abs(evaluate_run(fused.run_dir)["metrics"]["loss"] - recorded) < 1e-6
