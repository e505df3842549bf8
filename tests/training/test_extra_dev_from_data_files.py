"""A task of the user's own files scores the extra dev split its data_files name (before, only a data folder or the
Hub could give one, and such a task's extra dev sets were left out with a note)."""

from __future__ import annotations

import json

import pytest

from adapterfusion.tasks import TaskSpec
from adapterfusion.training import train
from task_data import write_jsonl


def test_an_extra_dev_split_named_in_data_files_is_scored_as_the_dev_set(tmp_path, tiny_encoder_dir) -> None:
    rows = [{"text": f"review number {i} was {'good' if i % 2 else 'bad'}", "label": i % 2} for i in range(12)]
    files = {}
    for key in ("train", "validation", "other_domain"):  # the extra dev set holds the dev set's rows
        files[key] = str(tmp_path / f"{key}.jsonl")
        write_jsonl(tmp_path / f"{key}.jsonl", rows)
    spec = TaskSpec(
        name="reviews",
        kind="single",
        text_fields=("text",),
        label_names=("bad", "good"),
        data_files=files,
        extra_dev_splits=("other_domain",),
    )
    settings = {"max_steps": 2, "batch_size": 4, "max_length": 32, "patience": None}
    result = train(spec, "st-a", encoder=tiny_encoder_dir, output_dir=tmp_path / "runs", training_config=settings)
    extra = json.loads((result.run_dir / "metrics.json").read_text())["extra_dev"]
    assert set(extra) == {"other_domain"}
    for metric in ("loss", "accuracy"):  # the best checkpoint's weights, on the same rows
        assert extra["other_domain"][metric] == pytest.approx(result.metrics[metric], rel=1e-5)
