"""The metric that selects a run's best checkpoint is checked before the work it would waste: a misspelt
metric_for_best before any data is loaded, a validation split on which it is constant (or NaN) before training."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from adapterfusion.tasks import TaskSpec
from adapterfusion.training import TrainingError, train
from task_data import write_jsonl

FAST = {"max_steps": 1, "batch_size": 4, "max_length": 32, "patience": None, "logging_steps": 1}


def own_task(folder: Path, dev_labels: list[Any], **spec: Any) -> TaskSpec:
    """A single-text task of eight varied train rows and dev rows of `dev_labels`, written into `folder`."""
    labels = [float(i) for i in range(8)] if spec.get("regression") else [i % 2 for i in range(8)]
    train_rows = [{"text": f"good thing {i}", "label": label} for i, label in enumerate(labels)]
    dev_rows = [{"text": f"other thing {i}", "label": label} for i, label in enumerate(dev_labels)]
    files = {
        "train": write_jsonl(folder / "train.jsonl", train_rows),
        "validation": write_jsonl(folder / "dev.jsonl", dev_rows),
    }
    names = () if spec.get("regression") else ("neg", "pos")
    options = {"name": "own", "kind": "single", "text_fields": ("text",), "label_names": names, **spec}
    return TaskSpec(**options, data_files={role: str(path) for role, path in files.items()})


def test_misspelt_metric_for_best_is_refused_before_the_data_loads(tmp_path, tiny_encoder_dir):
    """It was refused once the data was loaded and encoded (minutes for MNLI), with no suggestion."""
    task = own_task(tmp_path, [0, 1])
    (tmp_path / "train.jsonl").unlink()  # the data is never read: its absence would be said otherwise
    with pytest.raises(TrainingError, match="metric_for_best='acuracy'.*Did you mean 'accuracy'"):
        train(
            task,
            "head",
            encoder=tiny_encoder_dir,
            output_dir=tmp_path / "runs",
            training_config={"metric_for_best": "acuracy"},
        )
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("dev_labels", "spec", "message"),
    [
        (
            [2.0],
            {"regression": True},
            "it has 1 example(s), and a correlation needs 2 or more",
        ),  # failed after an epoch
        ([2.0, 2.0, 2.0], {"regression": True}, "a correlation with a constant is NaN"),  # selected on NaN silently
        ([0, 0, 0], {"metrics": ("f1", "accuracy")}, "set metric_for_best to 'accuracy'"),  # F1 0 at every epoch
        ([1, 1], {"metrics": ("matthews_correlation",)}, "add 'accuracy' to the task's metrics"),
    ],
)
def test_dev_split_on_which_the_selecting_metric_is_constant_is_refused(
    tmp_path, tiny_encoder_dir, dev_labels, spec, message
):
    task = own_task(tmp_path, dev_labels, **spec)
    with pytest.raises(TrainingError, match="the validation split cannot select a checkpoint") as info:
        train(task, "head", encoder=tiny_encoder_dir, output_dir=tmp_path / "runs", training_config=FAST)
    assert message in str(info.value)
    assert not list((tmp_path / "runs").rglob("checkpoint-*"))  # refused before any training step


def test_a_varied_dev_split_still_trains(tmp_path, tiny_encoder_dir):
    task = own_task(tmp_path, [0.5, 2.0, 1.0], regression=True)
    result = train(task, "head", encoder=tiny_encoder_dir, output_dir=tmp_path / "runs", training_config=FAST)
    assert set(result.metrics) >= {"spearman", "pearson"}
