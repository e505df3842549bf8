"""What a generation task needs of its decoder's tokenizer (an end token; with chat_template, a template) is refused
by train() once the tokenizer loads, before the task's data is read and encoded."""

from __future__ import annotations

from pathlib import Path

import pytest
import transformers

import adapterfusion as af
from adapterfusion.tasks import TaskError, instruction_task
from adapterfusion.training import train
from task_data import write_jsonl
from tiny_decoders import tiny_decoder


def _llama(folder: Path, **tokens: None) -> Path:
    """A tiny random Llama saved with the shipped tokenizer (no chat template), `tokens` set on it first."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(af.default_encoder_path())
    for name, value in tokens.items():
        setattr(tokenizer, name, value)
    tiny_decoder("llama", vocab_size=tokenizer.vocab_size).save_pretrained(folder / "llama")
    tokenizer.save_pretrained(folder / "llama")
    return folder / "llama"


@pytest.mark.parametrize(
    ("tokens", "options", "message"),
    [
        ({}, {"chat_template": True}, "has no chat template; set chat_template=False"),
        ({"sep_token": None}, {}, "has no eos or sep token to end an answer with"),
    ],
)
def test_generation_tokenizer_is_checked_before_the_data_loads(tmp_path, tokens, options, message):
    """Both were refused only as the first row was encoded, after the whole data set had loaded."""
    rows = [{"prompt": "what colour is the sky ?", "answer": "blue"}] * 4
    files = {
        "train": write_jsonl(tmp_path / "train.jsonl", rows),
        "validation": write_jsonl(tmp_path / "dev.jsonl", rows),
    }
    task = instruction_task("answers", data_files={role: str(path) for role, path in files.items()}, **options)
    llama = _llama(tmp_path, **tokens)
    files["train"].unlink()  # never read: its absence would be said otherwise
    with pytest.raises(TaskError, match=message):
        train(task, "st-a", encoder=llama, output_dir=tmp_path / "runs")
