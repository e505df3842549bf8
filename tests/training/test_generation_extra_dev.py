"""A generation task's further dev sets (TaskSpec.extra_dev_splits) are scored like its main dev set: they were left
out without a note, so a run asked for a second dev number recorded none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import transformers

import adapterfusion as af
from adapterfusion.tasks import instruction_task
from adapterfusion.training import train
from task_data import write_jsonl
from tiny_decoders import tiny_decoder

FAST = {"max_steps": 1, "batch_size": 4, "max_length": 32, "patience": None, "logging_steps": 1}


def _tiny_llama(folder: Path) -> Path:
    """A tiny random Llama saved with the shipped tokenizer (its answers end with [SEP])."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(af.default_encoder_path())
    tiny_decoder("llama", vocab_size=tokenizer.vocab_size).save_pretrained(folder / "llama")
    tokenizer.save_pretrained(folder / "llama")
    return folder / "llama"


def test_a_generation_tasks_extra_dev_split_is_scored_as_its_dev_set(tmp_path) -> None:
    rows = [{"prompt": f"what colour is thing {i} ?", "answer": "blue"} for i in range(4)]
    data = tmp_path / "data" / "answers"
    for split in ("train", "validation", "validation_b"):  # the extra dev set holds the dev set's rows
        write_jsonl(data / f"{split}.jsonl", rows)
    spec = instruction_task("answers", extra_dev_splits=("validation_b",))
    result = train(
        spec,
        "st-a",
        encoder=_tiny_llama(tmp_path),
        data_dir=tmp_path / "data",
        output_dir=tmp_path / "runs",
        training_config=FAST,
    )
    extra = json.loads((result.run_dir / "metrics.json").read_text())["extra_dev"]
    assert set(extra) == {"validation_b"}
    assert set(extra["validation_b"]) == {"answer_loss", "perplexity", "token_accuracy"}
    for metric in ("answer_loss", "token_accuracy"):  # the best checkpoint's weights, on the same rows
        assert extra["validation_b"][metric] == pytest.approx(result.metrics[metric], rel=1e-5)
