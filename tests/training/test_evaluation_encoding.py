"""evaluate_run's check that a run's own split still encodes to the tokens it trained and was scored on: the digest
train() records (encoded_sha256) against the split encoded now. A run of an older version recorded none."""

from __future__ import annotations

import datasets
import pytest

from adapterfusion.errors import ConfigError
from adapterfusion.evaluation import check_same_encoding
from adapterfusion.tasks.encoding import encoded_sha256


def _encoded(ids: list[list[int]]) -> datasets.Dataset:
    return datasets.Dataset.from_dict({"input_ids": ids, "label": list(range(len(ids)))})


def test_a_split_that_encodes_to_other_tokens_is_refused_and_one_not_recorded_passes():
    then = _encoded([[101, 1996, 102], [101, 1037, 102]])
    now = _encoded([[101, 1037, 102], [101, 1996, 102]])  # "the" and "a" swapped in the vocabulary
    recorded = {"train": encoded_sha256(then), "validation": encoded_sha256(then)}
    check_same_encoding(recorded, "validation", then)
    with pytest.raises(ConfigError) as caught:
        check_same_encoding(recorded, "validation", now)
    message = str(caught.value)
    assert message.startswith("the run's validation split encodes to other tokens now than when it ran")
    assert f"{recorded['validation'][:12]} then, {encoded_sha256(now)[:12]} now" in message
    assert "restore the tokenizer files" in message and "--data-dir (data_dir=)" in message
    for unrecorded in (None, {}, {"train": encoded_sha256(then)}, ["x"], {"validation": 5}):
        check_same_encoding(unrecorded, "validation", now)  # an older run's record, or a test split: not checked
