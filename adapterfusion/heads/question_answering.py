"""Extractive question answering on top of `QuestionAnsweringHead`'s [batch, seq, 2] logits: the training loss from
start and end positions, and the decoding of the best valid answer span back to characters of the context.

Labels are one row per example, `[start_position, end_position]` (token indices): the model takes one `labels`
tensor, so `qa_labels(start_positions, end_positions)` stacks the two the way HuggingFace passes them. A window of a
long context that does not hold the answer points both at token 0 ([CLS]), as BERT's SQuAD recipe does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from adapterfusion._validation import check_int, short_repr
from adapterfusion.errors import ConfigError

MAX_ANSWER_TOKENS = 30  # BERT's run_squad default: longer predicted spans are never taken
NOT_CONTEXT = -1  # the offset of a token that is not part of the context (question, special tokens, padding)


def qa_labels(start_positions: torch.Tensor, end_positions: torch.Tensor) -> torch.Tensor:
    """The model's `labels` for a QuestionAnsweringHead: [batch, 2] of start and end token positions. Refuses what
    would pair the wrong start with an end (counts that differ) or change a position on the way (.long() truncates
    1.5 and turns NaN into a huge number)."""
    starts = _positions(start_positions, "start_positions")
    ends = _positions(end_positions, "end_positions")
    if len(starts) != len(ends):
        raise ConfigError(
            f"qa_labels: {len(starts)} start_positions but {len(ends)} end_positions; give one start and one end per "
            "example (or per window of a long context)"
        )
    return torch.stack([starts, ends], dim=-1)


def _positions(values: object, name: str) -> torch.Tensor:
    """`values` (a tensor, array or list of token indices) as a flat long tensor; a ConfigError for anything else."""
    try:
        tensor = values if isinstance(values, torch.Tensor) else torch.as_tensor(values)
    except (TypeError, ValueError, RuntimeError) as error:
        raise ConfigError(
            f"qa_labels: {name}={short_repr(values)} are not token indices ({error}); pass a tensor or list of ints"
        ) from None
    tensor = tensor.reshape(-1)
    if tensor.dtype == torch.bool or tensor.is_complex() or not whole_values(tensor):
        raise ConfigError(
            f"qa_labels: {name} must be whole token indices, got {short_repr(tensor.tolist())} ({tensor.dtype})"
        )
    return tensor.long()


def whole_values(tensor: torch.Tensor) -> bool:
    """Whether every value is a whole, finite number: what .long() keeps as is (it truncates 1.5, and turns NaN and
    infinity into -2**63, which int() of the value cannot even convert)."""
    return not tensor.is_floating_point() or bool((torch.isfinite(tensor) & (tensor == tensor.round())).all())


def qa_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean of the start and end cross-entropies over the tokens of each row (BERT's SQuAD loss)."""
    start_logits, end_logits = logits.unbind(dim=-1)
    labels = labels.long()
    return (F.cross_entropy(start_logits, labels[:, 0]) + F.cross_entropy(end_logits, labels[:, 1])) / 2


def check_qa_labels(labels: torch.Tensor, name: str, shape: torch.Size) -> None:
    """[batch, 2] integer positions inside the sequence, start <= end; else a ConfigError that says what to pass.
    Reads the values (a forward with labels computes a loss the caller reads anyway)."""
    batch, length = shape[0], shape[-1]
    if labels.dim() != 2 or labels.shape != (batch, 2):
        raise ConfigError(
            f"head {name!r} (question answering): labels of shape {tuple(labels.shape)} must be [batch, 2] = "
            f"[{batch}, 2], each row (start_position, end_position); build them with af.qa_labels(start, end)"
        )
    if not whole_values(labels):
        raise ConfigError(f"head {name!r}: start/end positions must be whole token indices, got {labels.tolist()[:3]}")
    low, high = torch.aminmax(labels)
    if float(low) < 0 or float(high) >= length:
        raise ConfigError(
            f"head {name!r}: start/end positions must be token indices in 0..{length - 1} (this batch's length); "
            f"got values from {int(low)} to {int(high)}. Point an answer outside the window at 0 ([CLS])"
        )
    if bool((labels[:, 1] < labels[:, 0]).any()):
        row = int((labels[:, 1] < labels[:, 0]).nonzero()[0, 0])
        raise ConfigError(
            f"head {name!r}: row {row} ends its answer (token {int(labels[row, 1])}) before it starts "
            f"(token {int(labels[row, 0])}); end_position must be >= start_position"
        )


@dataclass(frozen=True)
class Span:
    """A decoded answer: its token indices in one feature, its score (start logit + end logit) and its characters
    [char_start, char_end) in the context."""

    score: float
    start: int
    end: int
    char_start: int
    char_end: int


def best_span(
    start_logits: np.ndarray, end_logits: np.ndarray, offsets: np.ndarray, max_answer_tokens: int = MAX_ANSWER_TOKENS
) -> Span | None:
    """The highest-scoring span of one feature with start <= end, at most `max_answer_tokens` tokens, start and end
    both context tokens (offsets[i] != NOT_CONTEXT); exact over all such spans, not a top-n shortlist. Ties go to
    the earliest start, then the shortest span. None when the feature has no context token.

    offsets: [seq, 2] character offsets of each token in the context, NOT_CONTEXT for the others (and padding).
    """
    check_int(max_answer_tokens, "max_answer_tokens", minimum=1)
    start_logits, end_logits = np.asarray(start_logits, np.float64), np.asarray(end_logits, np.float64)
    if start_logits.ndim != 1 or end_logits.ndim != 1:
        raise ConfigError(
            f"best_span: start and end logits of shapes {list(start_logits.shape)} and {list(end_logits.shape)} "
            "must be one value per token of one feature, [seq] each"
        )
    offsets = np.asarray(offsets).reshape(-1, 2)
    length = min(len(start_logits), len(end_logits), len(offsets))
    context = offsets[:length, 0] != NOT_CONTEXT
    if not context.any():
        return None
    width = min(int(max_answer_tokens), length)  # a longer span cannot fit: 10**9 allocated [seq, 10**9] scores
    starts = np.arange(length)[:, None]
    ends = starts + np.arange(width)[None, :]
    inside = ends < length
    ends = np.minimum(ends, length - 1)
    valid = inside & context[starts] & context[ends]
    scores = np.where(valid, start_logits[starts] + end_logits[:length][ends], -np.inf)
    best = int(np.argmax(scores))
    start, extra = divmod(best, width)
    end = start + extra
    return Span(float(scores.flat[best]), start, end, int(offsets[start, 0]), int(offsets[end, 1]))
