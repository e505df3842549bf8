"""`check_call`, the one check of a model call's inputs (`AdaptedModel.forward` and `forward_parallel`): the checks
of the modules beside it, in a fixed order, and the `ForwardCall` it returns: which module runs, with which inputs
(multiple-choice inputs flattened for a head of ours; labels included when the wrapped HF task model computes the
loss itself), the choice count and the mask a head pools by."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from adapterfusion.errors import ConfigError
from adapterfusion.forward_inputs.cache import past_length
from adapterfusion.forward_inputs.encoder_decoder import (
    check_decoder_inputs,
    check_decoder_source,
    check_encoded_tokens,
    encoder_outputs_shape,
    is_seq2seq,
)
from adapterfusion.forward_inputs.keywords import check_keywords
from adapterfusion.forward_inputs.labels import check_head_labels, check_span_positions, passed_labels
from adapterfusion.forward_inputs.limits import check_length, model_limits
from adapterfusion.forward_inputs.padding import padding_to_the_right, positions_from_mask
from adapterfusion.forward_inputs.seq2seq_head import decoder_inputs_for_head, seq2seq_states
from adapterfusion.forward_inputs.task_pooling import check_task_pooling
from adapterfusion.forward_inputs.tokens import (
    TOKEN_INPUTS,
    check_devices,
    check_logits_to_keep,
    check_per_token,
    check_values,
    input_embeddings,
    integer_masks,
    token_shape,
)

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel


@dataclass(frozen=True)
class ForwardCall:
    """A checked call: run `encoder(**inputs)`; a multiple-choice head, or a wrapped multiple-choice model, reads
    `num_choices` per example. `rows` is the encoder's batch size (examples x choices); `head_mask` which positions
    of its last hidden state a head pools (None: all): the attention mask, or on an encoder-decoder given its own
    decoder inputs, theirs."""

    encoder: Callable[..., Any]
    inputs: dict[str, Any]
    num_choices: int | None
    rows: int
    head_mask: torch.Tensor | None = None


def check_call(model: AdaptedModel, inputs: Mapping[str, Any], head: str | None, labels: Any = None) -> ForwardCall:
    """Check the keyword inputs of a call that `head` reads (None: the wrapped HF model's own output) with `labels`,
    and say what to hand the encoder."""
    encoder = cast(nn.Module, model.model.base_model) if head is not None else model.model
    given = {key: value for key, value in inputs.items() if value is not None}
    check_keywords(encoder, given)
    head_config = model.get_head(head).config if head is not None else None
    choices = head_config.kind == "multiple_choice" if head_config is not None else _is_multiple_choice(encoder, given)
    weight = input_embeddings(model.model).weight
    seq2seq = is_seq2seq(model.model)
    shape = _call_shape(given, choices, head, weight, seq2seq)
    limits = model_limits(model.model)
    past = past_length(model, given, shape[0], head)
    check_logits_to_keep(given.get("logits_to_keep"), None if seq2seq else shape[-1], labels is not None)
    check_length(shape[-1] + (0 if seq2seq else past), limits)
    check_per_token(given, shape, 0 if seq2seq else past)
    check_devices(model.model, {**given, "labels": labels}, weight.device)
    check_values(given, weight.shape[0], limits)
    given = integer_masks(given)
    own_labels = labels if head is None else None  # a head's labels are class ids, not the decoder's tokens
    if seq2seq and head is None:
        check_decoder_source(model.model, given, labels)
    if head is None:
        check_task_pooling(model, given, shape[0])
        check_span_positions(model, given)
    decoder = check_decoder_inputs(given, shape, weight, limits, past, own_labels) if seq2seq else None
    if head_config is not None and head_config.pooling == "last":
        _check_last_token_mask(model, given, shape[0], str(head))
    if labels is not None:
        if head is not None and head_config is not None:
            check_head_labels(labels, head_config, head, shape, given.get("attention_mask"))
        else:
            given["labels"] = passed_labels(model, labels, shape, decoder, limits)
    num_choices = shape[1] if choices else None
    if choices:  # our head pools each choice: [batch, choices, ...] -> [batch * choices, ...]; a wrapped
        # multiple-choice model flattens the choices itself, by its input_ids and mask ...
        given = _choices_flattened(given, shape, TOKEN_INPUTS if head is not None else _FLATTENED_FOR_THE_MODEL)
    rows = shape[0] * (num_choices or 1)  # ... the same way
    if head is not None and model.architecture.decoder is not None:
        own = "decoder_input_ids" in given or "decoder_inputs_embeds" in given  # the decoder's length, not the input's
        if own and head_config is not None and head_config.pooling == "last":
            _check_last_token_mask(model, given, rows, str(head), prefix="decoder_")
        given = decoder_inputs_for_head(model, given if own else padding_to_the_right(given), head)
        mask = given.get("decoder_attention_mask" if own else "attention_mask")
        return ForwardCall(partial(seq2seq_states, model.model), given, num_choices, rows, mask)
    if head is not None and model.architecture.pools_last_token:  # a decoder: left padding must not shift positions
        given = positions_from_mask(encoder, given)
    return ForwardCall(encoder, given, num_choices, rows, given.get("attention_mask"))


# Per-token inputs a wrapped multiple-choice model passes on: not all flatten them (DistilBERT's hands position_ids of
# [batch, choices, seq] to its embeddings as they are, which fails there); flattened here they reach the encoder right
# whichever it does, as view(-1, seq) leaves [batch * choices, seq] as it is. input_ids and the mask stay as given:
# the model counts the choices by them.
_FLATTENED_FOR_THE_MODEL = ("token_type_ids", "position_ids", "task_type_ids")


def _choices_flattened(given: dict[str, Any], shape: tuple[int, ...], keys: Sequence[str]) -> dict[str, Any]:
    """`given` with its inputs named in `keys` of [batch, choices, ...] as [batch * choices, ...]."""
    return {
        key: value.flatten(0, 1)
        if key in keys and isinstance(value, torch.Tensor) and value.shape[:2] == shape[:2]
        else value
        for key, value in given.items()
    }


def _is_multiple_choice(model: nn.Module, given: Mapping[str, Any]) -> bool:
    """A transformers *ForMultipleChoice model reads [batch, num_choices, seq] inputs (and flattens them itself); a
    *DoubleHeadsModel (GPT-2's LM + multiple-choice model) reads that layout or plain [batch, seq], as given."""
    name = type(model).__name__
    if name.endswith("DoubleHeadsModel"):
        ids, embeds = given.get("input_ids"), given.get("inputs_embeds")
        value, rank = (ids, 3) if ids is not None else (embeds, 4)
        return isinstance(value, torch.Tensor) and value.dim() == rank
    return name.endswith("ForMultipleChoice")


def _call_shape(
    given: Mapping[str, Any], choices: bool, head: str | None, weight: torch.Tensor, seq2seq: bool
) -> torch.Size:
    """The [batch, (choices,) seq] shape of the call (token_shape); an encoder-decoder given encoder_outputs needs
    no input_ids, and where both are given they must be of the same rows and tokens."""
    encoded = encoder_outputs_shape(given.get("encoder_outputs"), weight) if seq2seq else None
    if encoded is not None and "input_ids" not in given and "inputs_embeds" not in given:
        return encoded
    shape = token_shape(given, choices, head, weight.shape[1], weight.dtype)
    check_encoded_tokens(encoded, shape)
    return shape


def _check_last_token_mask(
    model: AdaptedModel, given: Mapping[str, Any], rows: int, head: str, prefix: str = ""
) -> None:
    """A head pooling each row's last token finds it through the attention mask: in a batch of several rows without
    one, a padded row would pool a padding token. Refused unless the ids show no padding (CPU tensors only).
    prefix 'decoder_': an encoder-decoder's own decoder inputs, whose first token (the start token, T5's is its pad
    token) is not padding."""
    if f"{prefix}attention_mask" in given or rows <= 1:
        return
    ids = given.get(f"{prefix}input_ids")
    pad = getattr(model.model.config, "pad_token_id", None)
    if isinstance(ids, torch.Tensor) and prefix:
        ids = ids[..., 1:]
    if isinstance(pad, int) and isinstance(ids, torch.Tensor) and ids.device.type == "cpu" and not (ids == pad).any():
        return
    unknown = " (and the model has no pad_token_id to tell padding by)" if pad is None else ""
    raise ConfigError(
        f"head {head!r} pools each row's last non-padding token, which it finds through {prefix}attention_mask, and "
        f"this batch of {rows} rows has none{unknown}; pass the {prefix}attention_mask of your {prefix}input_ids"
    )
