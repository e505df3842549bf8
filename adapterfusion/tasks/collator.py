"""Dynamic padding for encoded task batches: pad to the longest sequence in the batch, not to max_length.

Single/pair examples give [batch, seq] tensors; multiple-choice examples give [batch, num_choices, seq]. A generation
task's per-token labels are padded with -100, which the loss skips.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from adapterfusion.tasks.errors import TaskError
from adapterfusion.tasks.instruction import IGNORE_INDEX

_SEQUENCE_KEYS = ("input_ids", "attention_mask", "token_type_ids")
_SEQUENCE_TYPES = (list, tuple, np.ndarray, torch.Tensor)


def _flat_sequences(value: Sequence) -> tuple[list[Sequence[int]], int | None]:
    """An example's sequences and its choice count (None for a single sequence)."""
    if len(value) and isinstance(value[0], _SEQUENCE_TYPES):
        return list(value), len(value)
    return [value], None


@dataclass
class TaskCollator:
    """Collate `encode_task` examples into padded tensors; "label"/"labels" becomes a `labels` LongTensor (a
    regression task's float scores a FloatTensor).
    `padding_side` ("left" or "right") overrides the tokenizer's: a causal LM trains right-padded, so that each row's
    positions start at 0."""

    tokenizer: Any
    pad_to_multiple_of: int | None = None
    padding_side: str | None = None

    def _pad_value(self, key: str) -> int:
        if key == "input_ids":
            if self.tokenizer.pad_token_id is None:
                raise TaskError("the tokenizer has no pad token; set tokenizer.pad_token before collating.")
            return int(self.tokenizer.pad_token_id)
        if key == "token_type_ids":
            return int(getattr(self.tokenizer, "pad_token_type_id", 0) or 0)
        return 0

    def _padded_length(self, longest: int) -> int:
        m = self.pad_to_multiple_of
        return longest if not m else -(-longest // m) * m

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        if not features:
            raise TaskError("cannot collate an empty batch.")
        per_example = [_flat_sequences(f["input_ids"]) for f in features]
        choices = {c for _, c in per_example}
        if len(choices) != 1:
            raise TaskError(f"a batch mixes examples with different numbers of choices {sorted(map(str, choices))}.")
        n_choices = choices.pop()
        seq_len = self._padded_length(max(len(s) for seqs, _ in per_example for s in seqs))
        left = (self.padding_side or getattr(self.tokenizer, "padding_side", "right")) == "left"
        shape = (len(features), n_choices, seq_len) if n_choices else (len(features), seq_len)
        batch: dict[str, torch.Tensor] = {}
        for key in _SEQUENCE_KEYS:
            if key in features[0]:
                rows = [s for f in features for s in _flat_sequences(f[key])[0]]
            elif key == "attention_mask":
                rows = [[1] * len(s) for seqs, _ in per_example for s in seqs]
            else:
                continue
            batch[key] = _padded(rows, seq_len, self._pad_value(key), left).reshape(shape)
        label_key = "labels" if "labels" in features[0] else "label" if "label" in features[0] else None
        per_token = label_key is not None and isinstance(features[0][label_key], _SEQUENCE_TYPES)
        if label_key is not None and not per_token and isinstance(features[0][label_key], float):  # a score
            batch["labels"] = torch.tensor([float(f[label_key]) for f in features], dtype=torch.float32)
        elif label_key is not None and not per_token:  # one label per example
            batch["labels"] = torch.tensor([int(f[label_key]) for f in features], dtype=torch.long)
        elif label_key is not None:  # one label per token
            batch["labels"] = _padded([f[label_key] for f in features], seq_len, IGNORE_INDEX, left)
        if "start_positions" in features[0]:  # extractive QA: one (start, end) token pair per example
            spans = [[int(f["start_positions"]), int(f["end_positions"])] for f in features]
            batch["labels"] = torch.tensor(spans, dtype=torch.long)
        return batch


def _padded(rows: list[Sequence[int]], length: int, value: int, left: bool) -> torch.Tensor:
    """`rows` as one [len(rows), length] LongTensor, each padded with `value` on its left or right."""
    out = np.full((len(rows), length), value, dtype=np.int64)
    for i, row in enumerate(rows):
        if left:
            out[i, length - len(row) :] = row
        else:
            out[i, : len(row)] = row
    return torch.from_numpy(out)
