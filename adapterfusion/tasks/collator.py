"""Dynamic padding for encoded task batches: pad to the longest sequence in the batch, not to max_length.

Single/pair examples give [batch, seq] tensors; multiple-choice examples give [batch, num_choices, seq]. A generation
task's per-token labels are padded with -100, which the loss skips. Examples are checked as they are padded: every
example with the keys of the first, each per-token value (mask, segment ids, per-token labels) as long as its
input_ids, so that a hand-made batch is refused by its example and key rather than padded out of line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from adapterfusion._validation import is_finite_number, short_repr
from adapterfusion.tasks.errors import TaskError
from adapterfusion.tasks.instruction import IGNORE_INDEX

_SEQUENCE_KEYS = ("input_ids", "attention_mask", "token_type_ids")
_SEQUENCE_TYPES = (list, tuple, np.ndarray, torch.Tensor)
_LABEL_KEYS = ("labels", "label")
_PADDING_SIDES = ("left", "right")


def _is_sequence(value: Any) -> bool:
    """A list of values (not a scalar, nor a 0-d array or tensor)."""
    return isinstance(value, _SEQUENCE_TYPES) and getattr(value, "ndim", 1) > 0


def _flat_sequences(value: Sequence) -> tuple[list[Sequence[int]], int | None]:
    """An example's sequences and its choice count (None for a single sequence)."""
    if len(value) and _is_sequence(value[0]):
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

    def __post_init__(self) -> None:
        # any other padding_side ("Left", "middle") padded on the right without a word
        if self.padding_side is not None and self.padding_side not in _PADDING_SIDES:
            raise TaskError(
                f"padding_side={short_repr(self.padding_side)} is not a padding side; pass 'left', 'right' or None "
                "(the tokenizer's own)"
            )
        if not hasattr(self.tokenizer, "pad_token_id"):  # None or a model's name: an AttributeError at the first batch
            raise TaskError(
                f"tokenizer={short_repr(self.tokenizer)} is not a tokenizer; pass one, e.g. "
                "transformers.AutoTokenizer.from_pretrained(<the model's folder>)"
            )
        m = self.pad_to_multiple_of
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
            raise TaskError(
                f"pad_to_multiple_of={short_repr(m)} must be a positive integer (e.g. 8), or None to pad to the "
                "longest example"
            )

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
        _check_features(features)
        per_example = [_flat_sequences(f["input_ids"]) for f in features]
        choices = {c for _, c in per_example}
        if len(choices) != 1:
            raise TaskError(f"a batch mixes examples with different numbers of choices {sorted(map(str, choices))}.")
        n_choices = choices.pop()
        seq_len = self._padded_length(max(len(s) for seqs, _ in per_example for s in seqs))
        side = self.padding_side or getattr(self.tokenizer, "padding_side", "right")
        if side not in _PADDING_SIDES:  # a tokenizer's "Left" padded on the right without a word
            raise TaskError(
                f"the tokenizer's padding_side is {short_repr(side)}, not a padding side; set tokenizer.padding_side "
                "to 'left' or 'right', or pass TaskCollator(..., padding_side='left' or 'right')"
            )
        left = side == "left"
        shape = (len(features), n_choices, seq_len) if n_choices else (len(features), seq_len)
        batch: dict[str, torch.Tensor] = {}
        for key in _SEQUENCE_KEYS:
            if key in features[0]:
                rows = [s for f in features for s in _flat_sequences(f[key])[0]]
            elif key == "attention_mask":
                rows = [[1] * len(s) for seqs, _ in per_example for s in seqs]
            else:
                continue
            batch[key] = _padded(rows, seq_len, self._pad_value(key), left, key).reshape(shape)
        label_key = "labels" if "labels" in features[0] else "label" if "label" in features[0] else None
        per_token = label_key is not None and _is_sequence(features[0][label_key])
        if label_key is not None and not per_token:  # one label per example: a class id, or a regression score
            batch["labels"] = _example_labels([f[label_key] for f in features], label_key)
        elif label_key is not None:  # one label per token
            batch["labels"] = _padded([f[label_key] for f in features], seq_len, IGNORE_INDEX, left, label_key)
        if "start_positions" in features[0]:  # extractive QA: one (start, end) token pair per example
            batch["labels"] = _span_labels(features)
        return batch


def _check_features(features: list[Any]) -> None:
    """Refuse a batch whose examples the padding would misalign: an example that is not a mapping with input_ids,
    one without a key the first has (or with one it lacks), per-token values of another length than the
    example's input_ids, per-token labels beside per-example ones."""
    keys = set()
    for i, feature in enumerate(features):
        if not isinstance(feature, Mapping) or not _is_sequence(feature.get("input_ids")):
            held = (
                f"has input_ids={short_repr(feature['input_ids'])}"
                if isinstance(feature, Mapping) and "input_ids" in feature
                else f"has no input_ids (its keys: {sorted(map(str, feature))})"
                if isinstance(feature, Mapping)
                else f"is a {type(feature).__name__}"
            )
            raise TaskError(
                f"example {i} of the batch {held}; the collator takes encode_task's examples, mappings whose "
                "input_ids are a list of token ids"
            )
        padded = {key for key in (*_SEQUENCE_KEYS, *_LABEL_KEYS) if key in feature}
        if i == 0:
            keys = padded
        elif padded != keys:
            missing, extra = sorted(keys - padded), sorted(padded - keys)
            raise TaskError(
                f"example {i} of the batch "
                + (f"lacks {missing}, which example 0 has" if missing else f"has {extra}, which example 0 lacks")
                + "; collate examples encoded alike (one encode_task of one task)"
            )
        per_token = [key for key in padded if key != "input_ids" and _is_sequence(feature[key])]
        if i and ("labels" in per_token) != _is_sequence(features[0].get("labels")):
            kinds = ("a label per token", "one label") if "labels" in per_token else ("one label", "a label per token")
            raise TaskError(
                f"example {i} of the batch has {kinds[0]}, example 0 {kinds[1]}; collate examples of one task"
            )
        lengths = [len(s) for s in _flat_sequences(feature["input_ids"])[0]]
        for key in per_token:
            got = [len(s) if _is_sequence(s) else None for s in _flat_sequences(feature[key])[0]]
            if got != lengths:
                raise TaskError(
                    f"example {i} of the batch: {key} has {got if len(got) > 1 else got[0]} values but input_ids "
                    f"{lengths if len(lengths) > 1 else lengths[0]} tokens; give one value per token, or the padding "
                    "puts them out of line with the tokens"
                )


def _example_labels(labels: list[Any], key: str) -> torch.Tensor:
    """One label per example: class ids as a LongTensor, a regression task's float scores as a FloatTensor."""
    labels = [label.item() if isinstance(label, (np.ndarray, torch.Tensor)) else label for label in labels]  # 0-d
    score = isinstance(labels[0], (float, np.floating))
    for i, label in enumerate(labels):
        number = isinstance(label, (int, float, np.integer, np.floating)) and not isinstance(label, bool)
        # an int beyond int64 (2**70) was a TypeError from np.isfinite; a float's finiteness is checked first
        if (
            not number
            or not is_finite_number(label)
            or (not score and float(label) != int(label))
            or (not score and not -(2**63) <= int(label) < 2**63)
        ):
            raise TaskError(
                f"example {i} of the batch has {key}={short_repr(label)}; a label is a class id (an integer) or, for "
                "a regression task, a finite score (a float): load the data with load_task_data, which converts "
                "label names to ids"
            )
    if score:
        return torch.tensor([float(label) for label in labels], dtype=torch.float32)
    return torch.tensor([int(label) for label in labels], dtype=torch.long)


def _span_labels(features: list[dict[str, Any]]) -> torch.Tensor:
    """Extractive QA's labels [batch, 2]: each example's answer start and end token, whole indices >= 0 (0, the
    first token, where the window holds no answer); None, text or a fraction was a TypeError or truncated."""
    spans = []
    for i, feature in enumerate(features):
        pair: list[Any] = [feature.get(key) for key in ("start_positions", "end_positions")]
        pair = [
            value.item() if isinstance(value, (np.ndarray, torch.Tensor)) and value.ndim == 0 else value
            for value in pair
        ]
        if not all(
            isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= 0 for value in pair
        ):
            raise TaskError(
                f"example {i} of the batch has start_positions={short_repr(pair[0])}, end_positions="
                f"{short_repr(pair[1])}; an extractive QA example's answer is its start and end token, whole indices "
                ">= 0 (0 where the window holds no answer): encode the examples with encode_task"
            )
        spans.append([int(value) for value in pair])
    return torch.tensor(spans, dtype=torch.long)


def _padded(rows: list[Sequence[int]], length: int, value: int, left: bool, key: str) -> torch.Tensor:
    """`rows` as one [len(rows), length] LongTensor, each padded with `value` on its left or right."""
    out = np.full((len(rows), length), value, dtype=np.int64)
    for i, row in enumerate(rows):
        try:
            values = np.asarray(row.cpu() if isinstance(row, torch.Tensor) else row)
            if values.dtype.kind == "f" and not bool((np.isfinite(values) & (values == np.round(values))).all()):
                raise TypeError("fractional or non-finite values")  # 1.5 was truncated to 1 without a word
            if values.dtype.kind in "USO":  # numpy parses '7' as 7 silently
                raise TypeError(f"values of dtype {values.dtype}, not integer ids")
            if values.dtype.kind == "b" and key != "attention_mask":  # True, False were the token ids 1, 0
                raise TypeError("values of dtype bool, not integer ids")
            if values.ndim != 1:  # a [1, seq] row (return_tensors="pt" per example) failed to broadcast, unnamed
                raise ValueError(
                    f"values of shape {list(values.shape)}, where one flat list of one value per token belongs (a "
                    "tokenizer's return_tensors='pt' gives [1, seq] per example: take its row [0])"
                )
            if left:
                out[i, length - len(row) :] = values
            else:
                out[i, : len(row)] = values
        except (TypeError, ValueError, OverflowError) as error:  # text or None where token ids belong
            raise TaskError(
                f"{key} of row {i} of the batch ({short_repr(row)}) are not integers, one per token "
                f"({type(error).__name__}: {error}); encode the examples with encode_task"
            ) from None
    return torch.from_numpy(out)
