"""A run of a single optimizer step with a learning-rate warm-up trains nothing (the linear warm-up starts at 0); it
finished and reported the untrained model's dev scores without a word."""

from __future__ import annotations

import json
import warnings

import pytest

from adapterfusion.training import RunQualityWarning, train
from test_selecting_metric import FAST, own_task


@pytest.mark.parametrize(("warmup", "warned"), [(0.1, True), (0.0, False)])
def test_one_step_with_warm_up_is_reported_as_untrained(tmp_path, tiny_encoder_dir, warmup, warned):
    task = own_task(tmp_path, [0, 1, 1, 0])
    settings = {**FAST, "warmup_ratio": warmup, "learning_rate": 0.1}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = train(task, "head", encoder=tiny_encoder_dir, output_dir=tmp_path / "runs", training_config=settings)
    said = [
        str(w.message)
        for w in caught
        if issubclass(w.category, RunQualityWarning) and "nothing was trained" in str(w.message)
    ]
    recorded = json.loads(result.metrics_path.read_text())["warnings"]
    assert bool(said) is warned and any("nothing was trained" in w for w in recorded) is warned
    if warned:
        assert "set warmup_ratio=0" in said[0]


def test_an_mt_a_run_of_one_step_with_warm_up_is_reported_as_untrained(tmp_path, tiny_encoder_dir, demo_data_dir):
    from adapterfusion.training import train_multitask

    settings = {"max_steps": 1, "batch_size": 4, "max_length": 32, "patience": None, "warmup_ratio": 0.1}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = train_multitask(
            ["sst2", "rte"],
            seed=1,
            encoder=tiny_encoder_dir,
            data_dir=demo_data_dir,
            output_dir=tmp_path / "runs",
            training_config=settings,
            max_examples={"train": 8, "validation": 8},
            reduction_factor=4,
        )
    assert any(issubclass(w.category, RunQualityWarning) and "nothing was trained" in str(w.message) for w in caught)
    recorded = json.loads((result.run_dir / "metrics.json").read_text())["warnings"]
    assert any("nothing was trained" in w for w in recorded)
