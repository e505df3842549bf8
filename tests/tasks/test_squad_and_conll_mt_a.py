"""MT-A over the two span tasks and a classification task of the demo pack: one encoder, an adapter and head per
task, each task's dev set scored with its own metrics (QA answers decoded from their windows)."""

from __future__ import annotations

import shutil

import pytest

from adapterfusion.training import train_multitask
from span_task_data import conll_sentences, squad_examples, write_conll, write_squad_json


def test_mt_a_trains_squad_conll2003_and_rte_together(tiny_encoder_dir, demo_data_dir, tmp_path):
    data = tmp_path / "data"
    write_squad_json(data / "squad" / "train.json", squad_examples(24))
    write_squad_json(data / "squad" / "validation.json", squad_examples(9, start=24, several_answers=True))
    write_conll(data / "conll2003" / "train.txt", conll_sentences(24))
    write_conll(data / "conll2003" / "validation.txt", conll_sentences(8, start=24))
    shutil.copytree(demo_data_dir / "rte", data / "rte")
    result = train_multitask(
        ["squad", "conll2003", "rte"],
        seed=1,
        encoder=tiny_encoder_dir,
        data_dir=data,
        output_dir=tmp_path / "runs",
        training_config={"epochs": 1, "batch_size": 8, "max_length": 48},
        max_examples={"train": 24, "validation": 16},
    )
    best = result.metrics
    assert {"f1", "exact_match"} <= set(best["squad"]) and {"f1", "precision", "recall"} <= set(best["conll2003"])
    assert 0.0 <= best["squad"]["exact_match"] <= best["squad"]["f1"] <= 1.0
    mean = (best["squad"]["f1"] + best["conll2003"]["f1"] + best["rte"]["accuracy"]) / 3
    assert result.mean_metric == pytest.approx(mean)
