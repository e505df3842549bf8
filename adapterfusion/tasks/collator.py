"""Dynamic padding for encoded task batches: pad to the longest sequence in the batch, not to max_length.

Single/pair examples give [batch, seq] tensors; multiple-choice examples give [batch, num_choices, seq].
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from adapterfusion.tasks.errors import TaskError

_SEQUENCE_KEYS = ("input_ids", "attention_mask", "token_type_ids")


def _flat_sequences(value: Sequence) -> tuple[list[Sequence[int]], int | None]:
    """An example's sequences and its choice count (None for a single sequence)."""
    if len(value) and isinstance(value[0], (list, tuple, np.ndarray, torch.Tensor)):
        return list(value), len(value)
    return [value], None


@dataclass
class TaskCollator:
    """Collate `encode_task` examples into padded tensors; "label"/"labels" becomes a `labels` LongTensor."""

    tokenizer: Any
    pad_to_multiple_of: int | None = None

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
        left = getattr(self.tokenizer, "padding_side", "right") == "left"
        batch: dict[str, torch.Tensor] = {}
        for key in _SEQUENCE_KEYS:
            if key in features[0]:
                rows = [s for f in features for s in _flat_sequences(f[key])[0]]
            elif key == "attention_mask":
                rows = [[1] * len(s) for seqs, _ in per_example for s in seqs]
            else:
                continue
            out = np.full((len(rows), seq_len), self._pad_value(key), dtype=np.int64)
            for i, row in enumerate(rows):
                if left:
                    out[i, seq_len - len(row) :] = row
                else:
                    out[i, : len(row)] = row
            shape = (len(features), n_choices, seq_len) if n_choices else (len(features), seq_len)
            batch[key] = torch.from_numpy(out.reshape(shape))
        label_key = "labels" if "labels" in features[0] else "label" if "label" in features[0] else None
        if label_key is not None:
            batch["labels"] = torch.tensor([int(f[label_key]) for f in features], dtype=torch.long)
        return batch
