"""The labels of a call: for a head of ours one class id or target per example (per token for question answering
and tagging heads); for the wrapped HF task model's own loss, token ids of a language model or class ids.

cross_entropy would fail deep in torch on a bad class id (a device-side assert on CUDA that ends the process),
truncate a float one, or average over no token into a NaN loss. So unlike the token inputs' values, labels are read
on every device: a forward with labels computes a loss the caller reads anyway."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from adapterfusion.errors import ConfigError
from adapterfusion.forward_inputs.encoder_decoder import is_seq2seq
from adapterfusion.forward_inputs.keywords import accepted_keywords
from adapterfusion.forward_inputs.limits import Limits, check_length
from adapterfusion.forward_inputs.tokens import INTEGER_DTYPES
from adapterfusion.heads.config import HeadConfig
from adapterfusion.heads.question_answering import check_qa_labels
from adapterfusion.heads.token_classification import IGNORE_INDEX as _IGNORED  # the label the losses skip
from adapterfusion.heads.token_classification import check_tagging_labels, ids_outside

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel


def check_head_labels(
    labels: Any,
    config: HeadConfig,
    name: str,
    shape: torch.Size,
    mask: torch.Tensor | None = None,
    rows: torch.Tensor | None = None,
) -> None:
    """One class id (or target) per example, inside the head's classes; a per-token head's own layout
    (heads/question_answering.py, heads/token_classification.py), on tokens the attention `mask` keeps. `rows`: the
    batch row of each of these labels' rows, where they are a routed head's share of a batch."""
    labels = _labels_tensor(labels, shape[0], f"head {name!r}")
    if config.kind == "question_answering":
        check_qa_labels(labels, name, shape)
        _check_on_real_tokens(name, mask, labels.long().clamp(min=0), "an answer's start or end", rows)
        return
    if config.kind == "token_classification":
        check_tagging_labels(labels, name, config.num_labels, shape)
        if mask is not None and mask.shape == labels.shape:
            _refuse_on_padding(name, (labels != _IGNORED) & (mask.to(labels.device) == 0), "a tag", rows)
        return
    if labels.dim() != 1:
        raise ConfigError(f"head {name!r}: labels of shape {tuple(labels.shape)} must be [batch], one per example")
    if config.kind == "multiple_choice":
        _check_class_ids(labels, shape[1], f"head {name!r} ({shape[1]} choices per example)", "the task's label ids")
    elif config.kind == "classification":
        owner = f"head {name!r} (num_labels={config.num_labels})"
        _check_class_ids(labels, config.num_labels, owner, "the task's label ids or the head's num_labels")
    elif not bool(torch.isfinite(labels).all()):
        bad = sorted({str(value) for value in labels[~torch.isfinite(labels)].tolist()})
        raise ConfigError(
            f"head {name!r}: regression labels hold {bad}; the loss would be {bad[0]}: drop those examples or fix "
            "their targets"
        )


def _check_on_real_tokens(
    name: str, mask: torch.Tensor | None, positions: torch.Tensor, what: str, rows: torch.Tensor | None
) -> None:
    """_refuse_on_padding for [batch, k] token `positions` (a QA row's start and end) into `mask`'s rows; 0, where an
    answer outside the window points (its [CLS]), is taken as it is."""
    if mask is not None and mask.dim() == 2 and mask.shape[0] == positions.shape[0]:
        positions = positions.to(mask.device)
        dropped = (mask.gather(1, positions) == 0) & (positions != 0)
        _refuse_on_padding(name, dropped, what, rows, positions)


def _refuse_on_padding(
    name: str, dropped: torch.Tensor, what: str, rows: torch.Tensor | None, positions: torch.Tensor | None = None
) -> None:
    """Refuse labels at the places `dropped` marks, tokens the attention mask drops (padding): the head's loss would
    train on them as on text. `rows`: each row's batch row; `positions`: the token index of each place where
    `dropped` is not itself by token."""
    if not bool(dropped.any()):
        return
    row, column = (int(i) for i in dropped.nonzero()[0])
    token = column if positions is None else int(positions[row, column])
    row = row if rows is None else int(rows[row])
    raise ConfigError(
        f"head {name!r}: {what} of row {row} is at token {token}, which the attention_mask marks as padding; put "
        f"labels on real tokens only ({_IGNORED} on padding for tags)"
    )


def passed_labels(
    model: AdaptedModel, labels: Any, shape: torch.Size, decoder: torch.Size | None, limits: Limits
) -> torch.Tensor:
    """Labels for the wrapped HF task model's own loss, when no head of ours is active and it takes labels, as
    torch.long (an int32 label would fail in its cross-entropy); `decoder`: the shape of an encoder-decoder's own
    decoder inputs."""
    task_model = model.model
    name = type(task_model).__name__
    accepted = accepted_keywords(task_model)
    # Whether its forward takes labels decides; a model that is its own base (T5ForConditionalGeneration) may.
    has_own_loss = "labels" in accepted if accepted is not None else task_model is not task_model.base_model
    if not has_own_loss and accepted is not None and "start_positions" in accepted:  # *ForQuestionAnswering
        raise ConfigError(
            f"labels were given, but the wrapped {name} computes its own loss from start_positions and "
            "end_positions (each answer's first and last token); pass those instead of labels"
        )
    if not has_own_loss:
        loaded = list(model.heads)
        fix = (
            f"activate(head=...) one of the loaded heads {loaded} or add_head() one first"
            if loaded
            else "add_head(name, af.ClassificationHead(...)) and activate(head=name)"
        )
        raise ConfigError(
            f"labels were given but no head is active and the wrapped {name} has no task head of its own, so "
            f"nothing computes a loss; {fix}"
        )
    kind = _language_model_kind(task_model)
    labels = _labels_tensor(labels, shape[0], name, token_ids=kind is not None)
    config: Any = task_model.config
    if kind is not None:
        expected = decoder if kind == "seq2seq" else shape
        if kind == "seq2seq" and decoder is None and labels.dim() == 2:
            check_length(labels.shape[-1], limits, "the labels (the decoder's inputs, shifted)")
            expected = labels.shape
        _check_token_labels(labels, kind, expected, _output_vocabulary(task_model), name)
    elif name.endswith("ForMultipleChoice"):
        _check_class_ids(labels, shape[1], f"{name} ({shape[1]} choices per example)", "the task's label ids")
    elif name.endswith("ForTokenClassification"):
        _check_tag_labels(labels, shape[:2], config.num_labels, name)
    elif name.endswith("ForSequenceClassification") and config.num_labels > 1:
        _check_label_kind(labels, config.num_labels, config.problem_type, name)
        if labels.dtype in INTEGER_DTYPES:  # transformers computes a cross-entropy over num_labels classes
            if labels.dim() == 2 and labels.shape[1] == 1:  # as BERT's own loss reads them (DeBERTa's view fails)
                labels = labels.reshape(-1)
            if labels.dim() != 1:
                raise ConfigError(
                    f"{name}: integer labels of shape {tuple(labels.shape)}; class ids are one per example, [batch] "
                    f"(for multi-label targets pass floats, [batch, num_labels={config.num_labels}])"
                )
            owner = f"{name} (num_labels={config.num_labels})"
            _check_class_ids(labels, config.num_labels, owner, "the task's label ids or the model config's num_labels")
    if labels.dtype in INTEGER_DTYPES and labels.dtype != torch.long:
        labels = labels.long()  # transformers' cross-entropy losses take ids as torch.long only, as our heads cast them
    return labels


def check_span_positions(model: AdaptedModel, given: Mapping[str, Any]) -> None:
    """A wrapped *ForQuestionAnswering computes its loss only from both start_positions and end_positions: one
    alone gave loss=None without a word."""
    present = [key for key in ("start_positions", "end_positions") if given.get(key) is not None]
    if len(present) == 1:
        other = "end_positions" if present[0] == "start_positions" else "start_positions"
        raise ConfigError(
            f"{present[0]} was given without {other}: the wrapped {type(model.model).__name__} computes its loss only "
            f"from both, and would return none; pass {other} too"
        )


def _language_model_kind(model: nn.Module) -> str | None:
    """'causal', 'seq2seq' or 'masked' for a wrapped language model, whose labels are token ids, one per token;
    None for other task models."""
    if type(model).__name__.endswith("ForMaskedLM"):
        return "masked"
    can_generate = getattr(model, "can_generate", None)
    if not callable(can_generate) or not can_generate():
        return None
    return "seq2seq" if is_seq2seq(model) else "causal"


def _output_vocabulary(model: nn.Module) -> int:
    """How many tokens the language-model head scores (the rows of its output embeddings)."""
    output = cast(Any, model).get_output_embeddings()
    weight = getattr(output, "weight", None)
    return int(weight.shape[0]) if isinstance(weight, torch.Tensor) else int(cast(Any, model).config.vocab_size)


def _check_token_labels(
    labels: torch.Tensor, kind: str, expected: torch.Size | None, vocabulary: int, name: str
) -> None:
    """A language model's labels: integer token ids in its vocabulary or -100, one per (decoder) token, at least
    one counted. Otherwise cross_entropy fails deep in torch, reads a [batch, seq, 1] tensor as other positions, or
    averages over no token at all: a NaN loss (0/0), silently. Read on every device, as _check_class_ids is."""
    if labels.dtype not in INTEGER_DTYPES or labels.dtype == torch.uint8:
        unsigned = " (which uint8 cannot hold)" if labels.dtype == torch.uint8 else ""
        raise ConfigError(
            f"{name}: labels have dtype {labels.dtype}; a language model's labels are token ids, a signed integer "
            f"tensor (torch.long, or int32) with {_IGNORED}{unsigned} where no loss is counted, e.g. "
            "labels = input_ids.clone()"
        )
    like = "decoder_input_ids" if kind == "seq2seq" else "input_ids"
    if labels.shape != expected if expected is not None else labels.dim() != 2:  # GPT2DoubleHeadsModel's are 3-D
        raise ConfigError(
            f"{name}: labels of shape {tuple(labels.shape)} must be shaped like the {like}"
            f"{'' if expected is None else ' ' + str(tuple(expected))}: one token id per token, [batch, seq] "
            f"({_IGNORED} where no loss is counted{'; transformers shifts them itself' if kind == 'causal' else ''})"
        )
    values = ids_outside(labels, vocabulary)
    if values:
        raise ConfigError(
            f"{name}: labels hold {values}, which are not token ids of its vocabulary of {vocabulary}: labels "
            f"must be in 0..{vocabulary - 1}, or {_IGNORED} (not -1) where no loss is counted"
        )
    counted = labels[:, 1:] if kind == "causal" else labels
    if not bool((counted != _IGNORED).any()):
        first = " (a causal LM predicts token i from those before it, so labels[:, 0] is never counted)"
        raise ConfigError(
            f"{name}: no label token is counted: every label is {_IGNORED}"
            f"{first if kind == 'causal' else ''}, so the loss would be NaN (0/0); label at least one token of "
            "the batch, or skip batches with nothing to learn"
        )


def _check_tag_labels(labels: torch.Tensor, expected: torch.Size, tags: int, name: str) -> None:
    """A token classifier's labels: integer tag ids in 0..tags-1 or -100, one per token, at least one counted
    (else a NaN loss, 0/0, silently; other values fail deep in torch)."""
    if labels.dtype not in INTEGER_DTYPES or labels.dtype == torch.uint8 or labels.shape != expected:
        raise ConfigError(
            f"{name}: labels of dtype {labels.dtype} and shape {tuple(labels.shape)}; a token classifier's labels are "
            f"tag ids, a signed integer tensor shaped like input_ids {tuple(expected)}, with {_IGNORED} where no loss "
            "is counted (sub-tokens after a word's first, padding)"
        )
    values = ids_outside(labels, tags)
    if values:
        raise ConfigError(
            f"{name}: labels hold {values}, which are not tag ids of its num_labels={tags}: labels must be in "
            f"0..{tags - 1}, or {_IGNORED} where no loss is counted; check the task's tags or the config's num_labels"
        )
    if not bool((labels != _IGNORED).any()):
        raise ConfigError(
            f"{name}: no label is counted: every label is {_IGNORED}, so the loss would be NaN (0/0); label at "
            "least one token of the batch, or skip batches with nothing to learn"
        )


def _check_label_kind(labels: torch.Tensor, classes: int, problem_type: str | None, name: str) -> None:
    """Float labels are multi-label targets, [batch, num_labels] (transformers picks a binary cross-entropy for
    them, and keeps that problem_type from then on); integer ones class ids. A mix fails deep in torch."""
    multi_label = labels.is_floating_point() and problem_type in (None, "multi_label_classification")
    if multi_label and labels.shape != (labels.shape[0], classes):
        raise ConfigError(
            f"{name}: float labels of shape {tuple(labels.shape)} are read as multi-label targets, which are "
            f"[batch, num_labels={classes}] (one 0/1 per class); for one class id per example pass integer labels"
        )
    if not multi_label and (labels.is_floating_point() or problem_type == "multi_label_classification"):
        wanted = (
            f"float multi-label targets [batch, num_labels={classes}]"
            if problem_type == "multi_label_classification"
            else "integer class ids"
        )
        raise ConfigError(
            f"{name} computes a {problem_type} loss (transformers fixed the config's problem_type at its first call "
            f"with labels), but the labels are of dtype {labels.dtype}; pass {wanted}"
        )


def _labels_tensor(labels: Any, batch: int, owner: str, token_ids: bool = False) -> torch.Tensor:
    """`labels` as a tensor of one row per example, or a ConfigError saying what to pass; `token_ids`: a language
    model's, one token id per (decoder) token."""
    if not isinstance(labels, torch.Tensor):
        preview = labels[:5] if isinstance(labels, (list, tuple)) else labels
        what = (
            "the token ids as a tensor shaped like the (decoder) input ids, e.g. labels = input_ids.clone()"
            if token_ids
            else "the class ids (or regression targets) as torch.tensor([...]), one per example (map label names "
            "to their ids first)"
        )
        raise ConfigError(f"labels are a {type(labels).__name__} ({preview!r}), not a torch.Tensor; pass {what}")
    if labels.is_complex() or labels.dim() == 0 or labels.shape[0] != batch:
        count = labels.shape[0] if labels.dim() else "a single value as"
        what = (
            "one row of token ids per example, shape [batch, seq]"
            if token_ids
            else "one real label per example, shape [batch]"
        )
        noun = "label rows" if token_ids and labels.dim() else "labels"
        raise ConfigError(f"{owner}: {count} {noun} for a batch of {batch} examples; pass {what}")
    return labels


def _check_class_ids(labels: torch.Tensor, count: int, owner: str, fix: str) -> None:
    """Class ids must index `count` outputs. Otherwise cross_entropy fails deep in torch (an IndexError on CPU, a
    device-side assert on CUDA that ends the process) or, for a float label like 1.5, truncates it silently. Unlike
    the checks of the inputs, this reads the values on every device: a forward with labels computes a loss the
    caller reads anyway."""
    low, high = torch.aminmax(labels)
    fractional = labels.is_floating_point() and not bool((labels == labels.round()).all())
    if float(low) < 0 or float(high) >= count or fractional:
        wrong = (labels < 0) | (labels >= count) | (labels != labels.round())
        values = sorted(set(labels[wrong].tolist()))
        raise ConfigError(
            f"labels {values[:5]} are not class ids of {owner}: labels must be integers in 0..{count - 1}; check {fix}"
        )
