"""Token classification (tagging) on top of `TokenClassificationHead`'s [batch, seq, num_labels] logits: the loss
over labelled tokens, the check of the labels, and how word-level tags become token labels.

A word the tokenizer splits into several sub-tokens is labelled on its first sub-token only; the others, the special
tokens and the padding get IGNORE_INDEX (-100), which the loss skips and the metrics never read (the convention of
BERT's CoNLL-2003 recipe and of AdapterHub's TaggingHead).
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from adapterfusion._validation import is_finite_number, short_repr
from adapterfusion.errors import ConfigError
from adapterfusion.heads.question_answering import whole_values

IGNORE_INDEX = -100


def tagging_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the tokens whose label is not IGNORE_INDEX."""
    return F.cross_entropy(logits.flatten(0, -2), labels.long().reshape(-1), ignore_index=IGNORE_INDEX)


def check_tagging_labels(labels: torch.Tensor, name: str, num_labels: int, shape: torch.Size) -> None:
    """[batch, seq] integer tags in 0..num_labels-1 or IGNORE_INDEX, with at least one labelled token in the batch
    (else the loss is NaN); a ConfigError naming what to pass otherwise."""
    if labels.shape != shape:
        raise ConfigError(
            f"head {name!r} (token classification): labels of shape {tuple(labels.shape)} must be one per token, "
            f"{tuple(shape)} like input_ids, with {IGNORE_INDEX} on tokens that carry no tag "
            "(af.word_labels_to_tokens aligns word tags to the tokenizer's output)"
        )
    if not whole_values(labels):
        raise ConfigError(f"head {name!r}: tags must be integer ids, got fractional or non-finite values")
    if not bool((labels != IGNORE_INDEX).any()):
        raise ConfigError(
            f"head {name!r}: every label of the batch is {IGNORE_INDEX}, so there is nothing to learn from (the loss "
            "would be NaN); check the alignment of word tags to tokens"
        )
    bad = ids_outside(labels, num_labels)
    if bad:
        raise ConfigError(
            f"head {name!r} (num_labels={num_labels}): tags {bad} are not ids in 0..{num_labels - 1} or "
            f"{IGNORE_INDEX}; check the task's label names"
        )


def ids_outside(labels: torch.Tensor, count: int) -> list[int]:
    """The first five values of `labels` (sorted) that are neither ids in 0..count-1 nor IGNORE_INDEX: what a
    cross-entropy over `count` classes would fail on deep in torch (an IndexError, a device-side assert on CUDA)."""
    wrong = (labels != IGNORE_INDEX) & ((labels < 0) | (labels >= count))
    return sorted({int(value) for value in labels[wrong].tolist()})[:5] if bool(wrong.any()) else []


def word_labels_to_tokens(word_ids: Sequence[int | None], word_labels: Sequence[int]) -> list[int]:
    """One label per token from one label per word: the word's tag on its first sub-token, IGNORE_INDEX on the
    other sub-tokens and on tokens of no word (special tokens). `word_ids` is a fast tokenizer's
    `encoding.word_ids(i)`; a word cut off by truncation simply has no token."""
    tags = _word_tags(word_labels)
    if isinstance(word_ids, (str, bytes)) or not isinstance(word_ids, Iterable):
        raise ConfigError(
            f"word_labels_to_tokens: word_ids={short_repr(word_ids)} must be the word index of each token (None for "
            "special tokens): a fast tokenizer's encoding.word_ids(i)"
        )
    labels, previous = [], None
    for word in word_ids:
        if word is not None and not (isinstance(word, numbers.Integral) and is_whole(word) and 0 <= word < len(tags)):
            raise ConfigError(
                f"word_labels_to_tokens: a token belongs to word {short_repr(word)}, but there are tags for words "
                f"0..{len(tags) - 1} only ({len(tags)} tags); give one tag per word of the text that was tokenised "
                "(word_ids from the same encoding)"
            )
        labels.append(IGNORE_INDEX if word is None or word == previous else tags[int(word)])
        previous = word
    return labels


def _word_tags(word_labels: Sequence[int]) -> list[int]:
    """`word_labels` (a list, tensor or array) as tag ids; a ConfigError for a tag name, a fraction or NaN, which
    int() would turn into a ValueError or silently into another tag."""
    if isinstance(word_labels, (torch.Tensor, np.ndarray)):
        values = word_labels.reshape(-1).tolist()
    elif isinstance(word_labels, Sequence) and not isinstance(word_labels, (str, bytes)):
        values = list(word_labels)
    else:
        raise ConfigError(
            f"word_labels_to_tokens: word_labels={short_repr(word_labels)} must be a list of tag ids, one per word"
        )
    wrong = [v for v in values if not is_whole(v)]
    if wrong:
        raise ConfigError(
            f"word_labels_to_tokens: tag {short_repr(wrong[0])} is not a tag id; map tag names to their ids first "
            "(the task's label_names, in order)"
        )
    return [int(v) for v in values]


def is_whole(value: object) -> bool:
    """An integer (not a bool), or a float or numpy number with a whole, finite value: an id int() keeps as is."""
    if isinstance(value, numbers.Integral):
        return not isinstance(value, bool)
    return is_finite_number(value) and float(value).is_integer()  # type: ignore[arg-type]
