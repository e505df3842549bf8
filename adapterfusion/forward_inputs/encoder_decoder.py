"""An encoder-decoder's own inputs (T5, BART): encoder_outputs given instead of (or with) the inputs, whether a call
without a head has any source of decoder inputs, and the decoder inputs, checked by the rules of the encoder's.
Without these, transformers reads a bare tensor of encoder states as a tuple of them, or fails with a message about
the encoder's inputs."""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
from collections.abc import Mapping
from typing import Any, cast

import torch
from torch import nn
from transformers.utils import ModelOutput

from adapterfusion.errors import ConfigError
from adapterfusion.forward_inputs.limits import Limits, check_length
from adapterfusion.forward_inputs.tokens import check_per_token, check_values, of_autocast_dtype, token_shape


def is_seq2seq(model: nn.Module) -> bool:
    """Whether `model` is an encoder-decoder (its config says so), whose decoder takes inputs of its own."""
    return bool(getattr(cast(Any, model).config, "is_encoder_decoder", False))


def encoder_outputs_shape(outputs: Any, weight: torch.Tensor, generating: bool = False) -> torch.Size | None:
    """The [batch, seq] of an encoder-decoder's encoder_outputs (None: not given), checked. Transformers documents
    them as the encoder's ModelOutput or a tuple (last_hidden_state, optional hidden_states, optional attentions);
    a bare tensor would be read as that tuple, its first row taken for the last hidden state. generate() reads
    them as a ModelOutput only (its last_hidden_state)."""
    if outputs is None:
        return None
    tuples = () if generating else (tuple, list)
    first = None
    if isinstance(outputs, ModelOutput) and len(outputs):
        first = outputs.to_tuple()[0]
    elif isinstance(outputs, tuples) and outputs:
        first = outputs[0]
    if not isinstance(first, torch.Tensor):
        got = f"a {type(outputs).__name__}"
        got += f" of shape {tuple(outputs.shape)}" if isinstance(outputs, torch.Tensor) else ""
        fix = "" if generating else ", or a tuple whose first item is its last hidden state: encoder_outputs=(hidden,)"
        raise ConfigError(
            f"encoder_outputs is {got}; pass what the encoder returned, a BaseModelOutput "
            f"(model.model.get_encoder()(input_ids=..., attention_mask=...)){fix}"
        )
    width = weight.shape[1]
    if first.dim() != 3 or first.shape[-1] != width or not first.is_floating_point() or 0 in first.shape:
        raise ConfigError(
            f"encoder_outputs' last hidden state has shape {tuple(first.shape)} and dtype {first.dtype}; it must be "
            f"a float tensor [batch, seq, {width}] (the encoder's width), as the encoder returns it"
        )
    if first.dtype != weight.dtype and not of_autocast_dtype(first):  # cross-attention multiplies it with weights
        raise ConfigError(
            f"encoder_outputs' last hidden state has dtype {first.dtype} but the model's weights are {weight.dtype}; "
            f"pass the states the encoder of this model returned, or .to({weight.dtype}) of them"
        )
    if first.device.type == "cpu" and not bool(torch.isfinite(first).all()):  # as inputs_embeds (tokens.py)
        raise ConfigError(
            "encoder_outputs' last hidden state holds NaN or infinite values, so every output would be NaN; check "
            "how they were made"
        )
    return first.shape[:-1]


def check_encoded_tokens(encoded: torch.Size | None, shape: torch.Size) -> None:
    """encoder_outputs given with input_ids (or inputs_embeds) are of those inputs: the model encodes nothing then,
    and reads the attention_mask of the inputs' tokens as the encoder states'."""
    if encoded is not None and encoded != shape:
        raise ConfigError(
            f"encoder_outputs hold states of shape {tuple(encoded)} (batch, seq) but the inputs are {tuple(shape)}; "
            "pass the encoder's output for these inputs, or leave the inputs out (the model reads only the "
            "encoder_outputs and the attention_mask of the same tokens)"
        )


def check_decoder_source(seq2seq: nn.Module, given: Mapping[str, Any], labels: Any) -> None:
    """An encoder-decoder's own forward needs decoder inputs: given, made from labels (a language model shifts its
    labels right), or made from input_ids (the BART family's base models, T5's task models for classification and
    question answering). Without them transformers fails with a message about the encoder's inputs."""
    if "decoder_input_ids" in given or "decoder_inputs_embeds" in given:
        return
    model_class, base_class = cast(Any, type(seq2seq)), cast(Any, type(cast(Any, seq2seq).base_model))
    from_labels = shifts_labels(model_class)
    if labels is not None and from_labels:
        return
    from_ids = shifts_input_ids(model_class) or shifts_input_ids(base_class)
    if from_ids and "input_ids" in given:
        return
    made = (
        f"; it makes them from input_ids, which this call does not give ({', '.join(sorted(given))})"
        if from_ids
        else ""
    )
    start = getattr(cast(Any, seq2seq).config, "decoder_start_token_id", None)
    can_generate = getattr(seq2seq, "can_generate", None)
    labels_hint = ", or labels, which it shifts right into decoder_input_ids" if from_labels else ""
    generate_hint = (
        "; to generate text, call model.generate(input_ids=...)"
        if callable(can_generate) and can_generate()
        else "; to generate text, wrap the model loaded with AutoModelForSeq2SeqLM"
    )
    raise ConfigError(
        f"{type(seq2seq).__name__} was called with no decoder inputs{made}: pass decoder_input_ids (the target "
        f"tokens so far, first the decoder start token {start}){labels_hint}{generate_hint}"
    )


def shifts_input_ids(model_class: Any) -> bool:
    """Whether `model_class.forward` makes the decoder's inputs from input_ids when it is given none (BART, mBART,
    PLBart, LED: shift_tokens_right(input_ids, ...); T5's task models: self._shift_right(input_ids); not T5Model,
    T5ForConditionalGeneration, Pegasus, Marian); True when its source cannot be read, leaving the call to it."""
    return _shifts_right(model_class, "input_ids")


def shifts_labels(model_class: Any) -> bool:
    """Whether `model_class.forward` makes the decoder's inputs from its labels (a language model's token ids:
    BartForConditionalGeneration, T5ForConditionalGeneration), not from class ids (T5ForSequenceClassification)."""
    return _shifts_right(model_class, "labels")


@functools.cache
def _shifts_right(model_class: Any, argument: str) -> bool:
    """Whether `model_class.forward` calls a shift-right function (transformers' shift_tokens_right, T5's
    _shift_right) on its `argument`; True when its source cannot be read. Read from the source because transformers
    says it nowhere else: no class attribute or config field, and a probe would run the model. It misses a shift
    made inside a helper (FSMT's), a family with no row in injection/architectures.py; tests/test_forward_inputs.py
    holds it to what the models do."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(inspect.unwrap(model_class.forward))))
    except (OSError, TypeError, SyntaxError):
        return True
    return any(
        isinstance(node, ast.Call)
        and isinstance(node.func, (ast.Name, ast.Attribute))
        and (node.func.id if isinstance(node.func, ast.Name) else node.func.attr).endswith(
            ("shift_tokens_right", "_shift_right")
        )
        and bool(node.args)
        and isinstance(node.args[0], ast.Name)
        and node.args[0].id == argument
        for node in ast.walk(tree)
    )


_DECODER_KEYS = ("decoder_input_ids", "decoder_inputs_embeds", "decoder_attention_mask")


def check_decoder_inputs(
    given: Mapping[str, Any], shape: torch.Size, weight: torch.Tensor, limits: Limits, past: int, labels: Any
) -> torch.Size | None:
    """An encoder-decoder's decoder inputs, checked by the rules of the encoder's (same batch, ids in the
    vocabulary, a 0/1 mask of their length plus the `past` cached tokens, finite embeddings); their [batch, seq]
    shape, or None when the model makes them itself (from labels, or BART from input_ids)."""
    if not any(key in given for key in _DECODER_KEYS):
        return None
    decoder = None
    if "decoder_input_ids" in given or "decoder_inputs_embeds" in given:
        decoder = token_shape(given, False, None, weight.shape[1], weight.dtype, prefix="decoder_")
        check_length(decoder[-1] + past, limits, "the decoder inputs" + (" with the cached tokens" if past else ""))
    made = labels.shape if isinstance(labels, torch.Tensor) and labels.dim() == 2 else shape
    own = decoder if decoder is not None else torch.Size(made)
    if own[0] != shape[0]:
        raise ConfigError(
            f"the decoder inputs have {own[0]} rows but the encoder inputs {shape[0]}: pass one decoder sequence per "
            "example"
        )
    check_per_token(given, own, past, prefix="decoder_")
    check_values(given, weight.shape[0], limits, prefix="decoder_")
    return decoder
