"""A tagging word the tokenizer gives no token (zero-width, blank): refused when it is tagged as part of an entity,
whose tag would be neither trained on nor scored; passed when tagged 'O', which carries no entity (a real corpus
with one such word must still load)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import AutoTokenizer

import adapterfusion as af
from adapterfusion.tasks import TaskError, TaskSpec, encode_task, load_task_data
from span_task_data import PERSON_TAGGER


def _encode(folder: Path, tag: int) -> None:
    rows = [
        {"tokens": ["the", "town"], "ner_tags": [0, 0]},
        {"tokens": ["Ada", "\u200b", "Brook"], "ner_tags": [1, tag, 2]},
    ]
    path = folder / "train.jsonl"
    path.write_text("\n".join(json.dumps(row) for row in rows * 3) + "\n")
    spec = TaskSpec.from_dict({**PERSON_TAGGER.to_dict(), "data_files": {"train": str(path)}})
    tokenizer = AutoTokenizer.from_pretrained(af.default_encoder_path())
    encode_task(spec, load_task_data(spec).splits, tokenizer, 32)


def test_an_entity_word_without_tokens_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match=r"word 1 \('\\u200b'\) has no token"):
        _encode(tmp_path, tag=1)


def test_an_outside_word_without_tokens_passes(tmp_path: Path) -> None:
    _encode(tmp_path, tag=0)
