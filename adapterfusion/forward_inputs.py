"""What a model call accepts: the one check of the inputs of `AdaptedModel.forward` and `forward_parallel`.

transformers ignores keywords its forward does not name, accepts an attention_mask of another shape, and fails deep
in torch on a list, a float id, an empty batch, a sequence longer than its positions or an id outside its
vocabulary. `check_call` refuses each of these with a ConfigError naming the value and the fix, and says what to
hand the encoder: which module runs, its inputs (multiple-choice inputs flattened; labels included when the wrapped
HF task model computes the loss itself) and the choice count.

It runs on every forward, training included, so it reads only shapes, dtypes and devices, except for value checks
(id ranges, empty mask rows), which need the values: those run on CPU tensors only, where they cost microseconds.
On an accelerator they would wait for the device (a sync per step), so there they are skipped and the device
reports a bad id itself; class ids in labels are the exception (see _check_class_ids).
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
import typing
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, cast

import torch
import transformers.modeling_flash_attention_utils as flash_attention_utils
import transformers.utils.generic as transformers_generic
from torch import nn
from transformers.cache_utils import Cache
from transformers.modeling_outputs import Seq2SeqModelOutput
from transformers.utils import ModelOutput

from adapterfusion._validation import check_bool, check_has_values
from adapterfusion.encoder_limits import limit_reason, max_input_length
from adapterfusion.errors import ConfigError
from adapterfusion.heads.config import HeadConfig
from adapterfusion.heads.question_answering import check_qa_labels
from adapterfusion.heads.token_classification import check_tagging_labels

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel

# Inputs with one value per token, shaped like input_ids (position_ids may also be [1, seq], shared by the batch).
PER_TOKEN = ("attention_mask", "token_type_ids", "position_ids", "task_type_ids")
_TOKEN_INPUTS = ("input_ids", "inputs_embeds", *PER_TOKEN)
_COMMON_FLAGS = ("output_attentions", "output_hidden_states", "return_dict")
# Flags a model call takes as True or False, which transformers reads by truth value: use_cache='no' would cache.
_FLAGS = (*_COMMON_FLAGS, "use_cache")


def _typed_dict_keys(*typed_dicts: Any) -> frozenset[str] | None:
    """The keys of transformers' TypedDicts (None where this transformers version lacks one)."""
    if any(not typing.is_typeddict(typed) for typed in typed_dicts):
        return None
    return frozenset(key for typed in typed_dicts for key in typed.__annotations__)


# What transformers' models read from a **kwargs they pass on to their layers and attention.
_PASSED_ON_KWARGS = _typed_dict_keys(
    getattr(transformers_generic, "TransformersKwargs", None),
    getattr(flash_attention_utils, "FlashAttentionKwargs", None),
)
_INTEGER_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)
# Routing keywords reach check_call only from forward_parallel (AdaptedModel.forward takes them itself).
_ROUTING_KEYWORDS = ("adapter_names", "head_names")
_ROUTING_HINT = (
    "{keyword}= is not supported by forward_parallel, which runs every adapter of the fusion on the whole batch; "
    "route each example to its own adapter, fusion and head with model(**batch, adapter_names=[...], "
    "head_names=[...]) (adapterfusion/routing.py)"
)


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
    _check_keywords(encoder, given)
    head_config = model.get_head(head).config if head is not None else None
    choices = head_config.kind == "multiple_choice" if head_config is not None else _is_multiple_choice(encoder, given)
    weight = _input_embeddings(model.model).weight
    seq2seq = _is_seq2seq(model.model)
    shape = _call_shape(given, choices, head, weight, seq2seq)
    limits = _limits(model.model)
    past = _past_length(given, shape[0], head)
    _check_logits_to_keep(given.get("logits_to_keep"), None if seq2seq else shape[-1])
    _check_length(shape[-1] + (0 if seq2seq else past), limits)
    _check_per_token(given, shape, 0 if seq2seq else past)
    _check_devices(model.model, {**given, "labels": labels}, weight.device)
    _check_values(given, weight.shape[0], limits)
    own_labels = labels if head is None else None  # a head's labels are class ids, not the decoder's tokens
    if seq2seq and head is None:
        _check_decoder_source(model.model, given, labels)
    decoder = _check_decoder_inputs(given, shape, weight, limits, past, own_labels) if seq2seq else None
    if head_config is not None and head_config.pooling == "last":
        _check_last_token_mask(model, given, shape[0], str(head))
    if labels is not None:
        if head is not None and head_config is not None:
            check_head_labels(labels, head_config, head, shape)
        else:
            given["labels"] = _passed_labels(model, labels, shape, decoder, limits)
    num_choices = shape[1] if choices else None
    if choices and head is not None:  # our head pools each choice: [batch, choices, ...] -> [batch * choices, ...]
        given = {k: v.flatten(0, 1) if k in _TOKEN_INPUTS and v.shape[:2] == shape[:2] else v for k, v in given.items()}
    rows = shape[0] * (num_choices or 1)  # a wrapped multiple-choice model flattens the choices the same way itself
    if head is not None and model.architecture.decoder is not None:
        own = "decoder_input_ids" in given or "decoder_inputs_embeds" in given  # the decoder's length, not the input's
        if own and head_config is not None and head_config.pooling == "last":
            _check_last_token_mask(model, given, rows, str(head), prefix="decoder_")
        given = _decoder_inputs_for_head(model, given, head)
        mask = given.get("decoder_attention_mask" if own else "attention_mask")
        return ForwardCall(partial(seq2seq_states, model.model), given, num_choices, rows, mask)
    return ForwardCall(encoder, given, num_choices, rows, given.get("attention_mask"))


# What an encoder-decoder's head call hands its encoder and its decoder (seq2seq_states); anything else is refused.
_SEQ2SEQ_ENCODER_INPUTS = ("input_ids", "attention_mask", "inputs_embeds")
_SEQ2SEQ_DECODER_INPUTS = {
    "decoder_input_ids": "input_ids",
    "decoder_attention_mask": "attention_mask",
    "decoder_inputs_embeds": "inputs_embeds",
}


def seq2seq_states(seq2seq: nn.Module, **inputs: Any) -> Seq2SeqModelOutput:
    """The decoder's last hidden states of an encoder-decoder, as its bare model (T5Model, BartModel) computes them:
    the encoder, then the decoder reading it. Run through the stacks, because T5ForConditionalGeneration is its own
    base model and would add vocabulary logits a head discards."""
    flags = {key: inputs.pop(key) for key in ("output_attentions", "output_hidden_states") if key in inputs}
    inputs.pop("return_dict", None)
    unknown = sorted(set(inputs) - {*_SEQ2SEQ_ENCODER_INPUTS, *_SEQ2SEQ_DECODER_INPUTS})
    if unknown:
        raise ConfigError(
            f"{type(seq2seq).__name__} with a head active takes no {', '.join(map(repr, unknown))}; it takes "
            f"{', '.join((*_SEQ2SEQ_ENCODER_INPUTS, *_SEQ2SEQ_DECODER_INPUTS))} (and output_attentions, "
            "output_hidden_states)"
        )
    encoder, decoder = cast(Any, seq2seq).get_encoder(), cast(Any, seq2seq).get_decoder()
    encoded = encoder(**{k: inputs[k] for k in _SEQ2SEQ_ENCODER_INPUTS if k in inputs}, **flags, return_dict=True)
    decoded = decoder(
        **{name: inputs[key] for key, name in _SEQ2SEQ_DECODER_INPUTS.items() if key in inputs},
        encoder_hidden_states=encoded.last_hidden_state,
        encoder_attention_mask=inputs.get("attention_mask"),
        use_cache=False,
        **flags,
        return_dict=True,
    )
    return Seq2SeqModelOutput(
        last_hidden_state=decoded.last_hidden_state,
        decoder_hidden_states=decoded.hidden_states,
        decoder_attentions=decoded.attentions,
        cross_attentions=getattr(decoded, "cross_attentions", None),
        encoder_last_hidden_state=encoded.last_hidden_state,
        encoder_hidden_states=encoded.hidden_states,
        encoder_attentions=encoded.attentions,
    )


def _decoder_inputs_for_head(model: AdaptedModel, given: dict[str, Any], head: str) -> dict[str, Any]:
    """An encoder-decoder's head reads its decoder run on the input shifted right by one, the decoder's start token
    first, as transformers' BartForSequenceClassification and T5ForSequenceClassification do; the decoder's mask is
    the input's, shifted alike (so left padding stays masked). Decoder inputs the caller gives are used as given."""
    if "decoder_input_ids" in given or "decoder_inputs_embeds" in given:
        return given
    ids = given.get("input_ids")
    if not isinstance(ids, torch.Tensor):
        raise ConfigError(
            f"head {head!r} reads an encoder-decoder's decoder, run on the input ids shifted right; pass input_ids "
            "(or decoder_input_ids / decoder_inputs_embeds yourself)"
        )
    start = getattr(model.model.config, "decoder_start_token_id", None)
    if not isinstance(start, int):
        raise ConfigError(
            f"head {head!r}: the model's config has no decoder_start_token_id to start its decoder with; set "
            "model.model.config.decoder_start_token_id, or pass decoder_input_ids"
        )
    shifted = torch.cat([ids.new_full((*ids.shape[:-1], 1), start), ids[..., :-1]], dim=-1)
    decoder = dict(given, decoder_input_ids=shifted)
    mask = given.get("attention_mask")
    if isinstance(mask, torch.Tensor):
        decoder["decoder_attention_mask"] = torch.cat([mask.new_ones((*mask.shape[:-1], 1)), mask[..., :-1]], dim=-1)
    return decoder


# ---- keywords --------------------------------------------------------------------------------------------------
def _check_keywords(encoder: nn.Module, given: Mapping[str, Any]) -> None:
    for keyword in _ROUTING_KEYWORDS:
        if keyword in given:
            raise ConfigError(_ROUTING_HINT.format(keyword=keyword))
    accepted = accepted_keywords(encoder)
    unknown = [key for key in given if accepted is not None and key not in accepted]
    if unknown:
        unknown.sort()
        named = inspect.signature(type(encoder).forward).parameters
        shown = sorted(key for key in accepted or () if key in named or key in _COMMON_FLAGS)
        raise ConfigError(
            f"{type(encoder).__name__}.forward takes no {', '.join(map(repr, unknown))}, so it would be silently "
            f"ignored; it takes {', '.join(shown)} (and the model's own labels=, output_fusion_attentions=, "
            "adapter_names= and head_names=)"
        )
    _check_flags(given, _FLAGS)
    if given.get("return_dict") is False:
        raise ConfigError(
            "return_dict=False: the model returns an AdaptedModelOutput whatever return_dict says; drop it and call "
            ".to_tuple() on the output for a tuple"
        )


def accepted_keywords(module: nn.Module) -> frozenset[str] | None:
    """The keywords `module`'s forward takes (read once per class, see _keywords_of)."""
    return _keywords_of(cast(Any, type(module)))


@functools.cache
def _keywords_of(module_class: Any) -> frozenset[str] | None:
    """The keywords `module_class.forward` takes: its named parameters, the keys of a typed **kwargs
    (transformers' Unpack[TransformersKwargs]) and return_dict (every PreTrainedModel takes it). An untyped **kwargs
    that the body never reads (DeBERTa, MPNet) swallows what it is given, so it adds nothing; one the body passes on
    (GPT-2 hands it to its attention) takes what transformers documents for such kwargs, TransformersKwargs and
    FlashAttentionKwargs: anything else would be swallowed silently. None only when those cannot be read."""
    forward = module_class.forward
    parameters = list(inspect.signature(forward).parameters.values())
    names = {p.name for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)} - {"self"}
    for parameter in parameters:
        if parameter.kind is parameter.VAR_KEYWORD:
            typed = _typed_kwargs(parameter.annotation, inspect.unwrap(forward))
            if typed is not None:
                names |= typed
            elif _reads(inspect.unwrap(forward), parameter.name):
                if _PASSED_ON_KWARGS is None:
                    return None
                names |= _PASSED_ON_KWARGS
    return frozenset(names | {"return_dict"})


def _reads(function: Any, name: str) -> bool:
    """Whether the body of `function` names `name` (True when its source cannot be read)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError, SyntaxError):
        return True
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], (ast.FunctionDef, ast.AsyncFunctionDef)) else []
    return not body or any(isinstance(node, ast.Name) and node.id == name for stmt in body for node in ast.walk(stmt))


def _check_flags(given: Mapping[str, Any], flags: tuple[str, ...]) -> None:
    """Each of `flags` given must be a bool: transformers reads them by truth value, so 'no' would mean True."""
    for flag in flags:
        if flag in given:
            check_bool(given[flag], flag)


def _typed_kwargs(annotation: Any, forward: Any) -> set[str] | None:
    """The keys of `**kwargs: Unpack[SomeTypedDict]`, or None when the annotation says nothing of them."""
    if isinstance(annotation, str):  # postponed annotations: look the TypedDict up where forward was defined
        inner = annotation.removeprefix("Unpack[").removesuffix("]").rpartition(".")[2]
        annotation = getattr(forward, "__globals__", {}).get(inner) if annotation.startswith("Unpack[") else None
    elif typing.get_args(annotation):
        annotation = typing.get_args(annotation)[0]
    keys = getattr(annotation, "__annotations__", None) if typing.is_typeddict(annotation) else None
    return set(keys) if keys is not None else None


def _is_multiple_choice(model: nn.Module, given: Mapping[str, Any]) -> bool:
    """A transformers *ForMultipleChoice model reads [batch, num_choices, seq] inputs (and flattens them itself); a
    *DoubleHeadsModel (GPT-2's LM + multiple-choice model) reads that layout or plain [batch, seq], as given."""
    name = type(model).__name__
    if name.endswith("DoubleHeadsModel"):
        ids, embeds = given.get("input_ids"), given.get("inputs_embeds")
        value, rank = (ids, 3) if ids is not None else (embeds, 4)
        return isinstance(value, torch.Tensor) and value.dim() == rank
    return name.endswith("ForMultipleChoice")


# ---- token inputs ------------------------------------------------------------------------------------------------
def _input_embeddings(model: nn.Module) -> nn.Embedding:
    return cast(nn.Embedding, cast(Any, model).get_input_embeddings())


def _call_shape(
    given: Mapping[str, Any], choices: bool, head: str | None, weight: torch.Tensor, seq2seq: bool
) -> torch.Size:
    """The [batch, (choices,) seq] shape of the call (_token_shape); an encoder-decoder given encoder_outputs needs
    no input_ids, and where both are given they must be of the same rows and tokens."""
    encoded = _encoder_outputs_shape(given.get("encoder_outputs"), weight) if seq2seq else None
    if encoded is not None and "input_ids" not in given and "inputs_embeds" not in given:
        return encoded
    shape = _token_shape(given, choices, head, weight.shape[1], weight.dtype)
    _check_encoded_tokens(encoded, shape)
    return shape


def _check_encoded_tokens(encoded: torch.Size | None, shape: torch.Size) -> None:
    """encoder_outputs given with input_ids (or inputs_embeds) are of those inputs: the model encodes nothing then,
    and reads the attention_mask of the inputs' tokens as the encoder states'."""
    if encoded is not None and encoded != shape:
        raise ConfigError(
            f"encoder_outputs hold states of shape {tuple(encoded)} (batch, seq) but the inputs are {tuple(shape)}; "
            "pass the encoder's output for these inputs, or leave the inputs out (the model reads only the "
            "encoder_outputs and the attention_mask of the same tokens)"
        )


def _encoder_outputs_shape(outputs: Any, weight: torch.Tensor, generating: bool = False) -> torch.Size | None:
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
    return first.shape[:-1]


def _check_decoder_source(seq2seq: nn.Module, given: Mapping[str, Any], labels: Any) -> None:
    """An encoder-decoder's own forward needs decoder inputs: given, made from labels (shifted right), or, in the
    BART family, from input_ids. Without them transformers fails with a message about the encoder's inputs."""
    if "decoder_input_ids" in given or "decoder_inputs_embeds" in given or labels is not None:
        return
    name = type(seq2seq).__name__
    from_ids = _shifts_input_ids(cast(Any, type(cast(Any, seq2seq).base_model)))
    if from_ids and "input_ids" in given:
        return
    made = (
        f"; it makes them from input_ids, which this call does not give ({', '.join(sorted(given))})"
        if from_ids
        else ""
    )
    start = getattr(cast(Any, seq2seq).config, "decoder_start_token_id", None)
    raise ConfigError(
        f"{name} was called with no decoder inputs{made}: pass decoder_input_ids (the target tokens so far, first "
        f"the decoder start token {start}), or labels, which it shifts right into decoder_input_ids; to generate "
        "text, call model.generate(input_ids=...)"
    )


@functools.cache
def _shifts_input_ids(model_class: Any) -> bool:
    """Whether `model_class.forward` makes the decoder's inputs from input_ids when it is given none (BART, mBART,
    Pegasus: shift_tokens_right(input_ids, ...)); True when its source cannot be read, leaving the call to it."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(inspect.unwrap(model_class.forward))))
    except (OSError, TypeError, SyntaxError):
        return True
    return any(
        isinstance(node, ast.Call)
        and isinstance(node.func, (ast.Name, ast.Attribute))
        and (node.func.id if isinstance(node.func, ast.Name) else node.func.attr).endswith("shift_tokens_right")
        and bool(node.args)
        and isinstance(node.args[0], ast.Name)
        and node.args[0].id == "input_ids"
        for node in ast.walk(tree)
    )


def _check_logits_to_keep(value: Any, length: int | None) -> None:
    """logits_to_keep as transformers documents it: an int N >= 0 (the last N positions; 0 all), or a 1-D tensor
    of the positions to keep, inside the `length` positions run (None: not known here). Anything else fails in
    torch's indexing, or (a bool, a negative N) drops positions without a word."""
    if value is None:
        return
    expected = (
        "an integer N >= 0 (the logits of the last N positions; 0: all) or a 1-D integer tensor of the positions "
        "to keep"
    )
    if isinstance(value, torch.Tensor):
        if value.dim() != 1 or value.dtype not in _INTEGER_DTYPES:
            raise ConfigError(
                f"logits_to_keep is a tensor of shape {tuple(value.shape)} and dtype {value.dtype}; expected {expected}"
            )
        if length is not None and value.device.type == "cpu":
            outside = value[(value < -length) | (value >= length)]
            if outside.numel():
                raise ConfigError(
                    f"logits_to_keep holds {sorted(set(outside.tolist()))[:5]}, outside the {length} positions of "
                    f"the inputs (-{length}..{length - 1}); pass positions of these inputs"
                )
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"logits_to_keep={value!r} has type {type(value).__name__}; expected {expected}")
    if value < 0:
        raise ConfigError(f"logits_to_keep={value!r} is negative; expected {expected}")


def _token_shape(
    given: Mapping[str, Any], choices: bool, head: str | None, width: int, dtype: torch.dtype, prefix: str = ""
) -> torch.Size:
    """The [batch, (choices,) seq] shape of the call, from input_ids or inputs_embeds (of the embeddings' `width`
    and `dtype`), checked; prefix 'decoder_': an encoder-decoder's decoder inputs, checked by the same rules."""
    for key in _TOKEN_INPUTS:
        if prefix + key in given:
            _require_tensor(prefix + key, given[prefix + key])
    ids, embeds = given.get(f"{prefix}input_ids"), given.get(f"{prefix}inputs_embeds")
    if (ids is None) == (embeds is None):
        which = "neither" if ids is None else "both"
        hint = "" if prefix else ". Pass the tokenizer's output: model(**tokenizer(texts, return_tensors='pt', "
        hint += "" if prefix else "padding=True))"
        raise ConfigError(
            f"a model call takes {prefix}input_ids or {prefix}inputs_embeds, not both and not neither; got {which}"
            + hint
        )
    rank = 3 if choices else 2
    layout = "[batch, num_choices, seq]" if choices else "[batch, seq]"
    if ids is not None:
        key, value, shape = f"{prefix}input_ids", ids, ids.shape
        if ids.dtype not in _INTEGER_DTYPES:
            raise ConfigError(
                f"{key} have dtype {ids.dtype}; token ids must be an integer tensor (torch.long), e.g. "
                f"{key}.long() or the tokenizer's output"
            )
    else:
        embeds = cast(torch.Tensor, embeds)
        key, value, shape, layout = f"{prefix}inputs_embeds", embeds, embeds.shape[:-1], layout[:-1] + ", hidden]"
        if not embeds.is_floating_point() or embeds.shape[-1:] != (width,):
            raise ConfigError(
                f"{key} of shape {tuple(embeds.shape)} and dtype {embeds.dtype}: they must be a float tensor "
                f"whose last dimension is the embedding width {width}"
            )
        if embeds.dtype != dtype:
            raise ConfigError(
                f"{key} have dtype {embeds.dtype} but the model's weights are {dtype}; pass "
                f"{key}.to({dtype}) (or convert the model with model.to({embeds.dtype}))"
            )
    if value.dim() != rank + key.endswith("inputs_embeds"):
        raise ConfigError(f"{key} of shape {tuple(value.shape)} must be {layout}{_rank_hint(value.dim(), rank, head)}")
    if 0 in shape:
        raise ConfigError(
            f"{key} of shape {tuple(value.shape)} is empty: a model call needs at least one example of at least one "
            "token; skip empty batches before calling the model"
        )
    return shape


def _rank_hint(dim: int, rank: int, head: str | None) -> str:
    if dim < rank:
        return "; for one sequence add the batch dimension: input_ids.unsqueeze(0)"
    if rank == 2:
        return (
            f" for the active head {head!r}" if head is not None else ""
        ) + "; [batch, num_choices, seq] inputs are read by a MultipleChoiceHead (activate one)"
    return f": the active head {head!r} is a MultipleChoiceHead" if head is not None else ""


@dataclass(frozen=True)
class _Limits:
    """What the encoder's config says its inputs may hold, read once per model: config attributes are slow to read
    in transformers 5, and the checks run on every forward."""

    config: Any
    max_length: int | None  # tokens per sequence (encoder_limits.max_input_length)
    positions: int | None  # rows of the position table, when it has one
    token_types: int  # type_vocab_size (0: token types unused)


_LIMITS: weakref.WeakKeyDictionary[nn.Module, _Limits] = weakref.WeakKeyDictionary()


def _limits(model: nn.Module) -> _Limits:
    limits = _LIMITS.get(model)
    if limits is None or limits.config is not model.config:
        config: Any = model.config
        max_length, token_types = max_input_length(config), getattr(config, "type_vocab_size", 0)
        positions = int(config.max_position_embeddings) if max_length is not None else None
        limits = _Limits(config, max_length, positions, token_types if isinstance(token_types, int) else 0)
        _LIMITS[model] = limits
    return limits


def _check_length(length: int, limits: _Limits, what: str = "the inputs") -> None:
    limit = limits.max_length
    if limit is not None and length > limit:
        raise ConfigError(
            f"{what} have {length} tokens per sequence, more than this {limits.config.model_type} encoder takes: "
            f"{limit} ({limit_reason(limits.config)}); truncate them, e.g. tokenizer(..., truncation=True, "
            f"max_length={limit})"
        )


def _check_per_token(given: Mapping[str, Any], shape: torch.Size, past: int = 0, prefix: str = "") -> None:
    """One value per token. After `past` cached tokens the attention mask covers them and the new ones, as
    transformers' generate builds it: a mask of the new tokens alone would be read as the whole sequence's."""
    for key in PER_TOKEN if not prefix else (f"{prefix}attention_mask",):
        value = given.get(key)
        if value is None:
            continue
        _require_tensor(key, value)
        expected = (*shape[:-1], shape[-1] + past) if key.endswith("attention_mask") else tuple(shape)
        shared = key == "position_ids" and len(shape) == 2 and value.shape == (1, shape[1])
        if value.shape != expected and not shared:
            cached = (
                f" ({past} cached tokens + {shape[-1]} new: a cached step's mask covers the past_key_values' tokens "
                "and the new ones)"
                if past and key.endswith("attention_mask")
                else ""
            )
            raise ConfigError(
                f"{key} of shape {tuple(value.shape)} does not match the inputs' {expected}{cached}: pass one value "
                "per token of the same batch (the tokenizer's output, padded together)"
            )
        integer = value.dtype in _INTEGER_DTYPES
        if not integer and not (key == "attention_mask" and (value.dtype == torch.bool or value.is_floating_point())):
            raise ConfigError(f"{key} have dtype {value.dtype}; pass an integer tensor (torch.long)")


def _is_seq2seq(model: nn.Module) -> bool:
    return bool(getattr(cast(Any, model).config, "is_encoder_decoder", False))


def _past_length(given: Mapping[str, Any], batch: int, head: str | None) -> int:
    """How many tokens the given past_key_values hold already (0: none): a transformers Cache of this batch's rows,
    which a head cannot use (it pools the whole sequence; a cached step runs the new tokens only)."""
    past = given.get("past_key_values")
    if past is None:
        return 0
    if head is not None:
        raise ConfigError(
            f"head {head!r} is active: a head pools the whole sequence, but a step with past_key_values runs only "
            "the new tokens; run the head on the whole sequence, or activate(head=None) for cached decoding"
        )
    if not isinstance(past, Cache):
        raise ConfigError(
            f"past_key_values is a {type(past).__name__}, not a transformers Cache; pass the past_key_values a "
            "previous call with use_cache=True returned (a DynamicCache), or DynamicCache() to start one"
        )
    rows = _cache_rows(past)
    if rows is not None and rows != batch:
        raise ConfigError(
            f"past_key_values hold {rows} rows but the inputs have {batch}; a cached step continues the batch the "
            f"cache was made with: pass the next tokens of those {rows} rows"
        )
    return int(past.get_seq_length())


def _cache_rows(cache: Cache) -> int | None:
    """The batch size of a filled cache (an encoder-decoder's: of its decoder's self-attention), from its shapes."""
    inner = getattr(cache, "self_attention_cache", cache)
    for layer in getattr(inner, "layers", ()):
        keys = getattr(layer, "keys", None)
        if isinstance(keys, torch.Tensor) and keys.dim() > 1 and keys.numel():
            return int(keys.shape[0])
    return None


_DECODER_KEYS = ("decoder_input_ids", "decoder_inputs_embeds", "decoder_attention_mask")


def _check_decoder_inputs(
    given: Mapping[str, Any], shape: torch.Size, weight: torch.Tensor, limits: _Limits, past: int, labels: Any
) -> torch.Size | None:
    """An encoder-decoder's decoder inputs, checked by the rules of the encoder's (same batch, ids in the
    vocabulary, a 0/1 mask of their length plus the `past` cached tokens, finite embeddings); their [batch, seq]
    shape, or None when the model makes them itself (from labels, or BART from input_ids)."""
    if not any(key in given for key in _DECODER_KEYS):
        return None
    decoder = None
    if "decoder_input_ids" in given or "decoder_inputs_embeds" in given:
        decoder = _token_shape(given, False, None, weight.shape[1], weight.dtype, prefix="decoder_")
        _check_length(decoder[-1] + past, limits, "the decoder inputs" + (" with the cached tokens" if past else ""))
    made = labels.shape if isinstance(labels, torch.Tensor) and labels.dim() == 2 else shape
    own = decoder if decoder is not None else torch.Size(made)
    if own[0] != shape[0]:
        raise ConfigError(
            f"the decoder inputs have {own[0]} rows but the encoder inputs {shape[0]}: pass one decoder sequence per "
            "example"
        )
    _check_per_token(given, own, past, prefix="decoder_")
    _check_values(given, weight.shape[0], limits, prefix="decoder_")
    return decoder


def _check_devices(model: nn.Module, given: Mapping[str, Any], device: torch.device) -> None:
    """Every input (and labels) on the embeddings' device, where add_head puts heads too (unless accelerate places
    the model and moves the inputs itself). A model on the meta device has no values to compute with."""
    if getattr(model, "hf_device_map", None):
        return
    if device.type == "meta":
        check_has_values(model.parameters(), "the model's weights are", "it cannot compute outputs")
    for key, value in given.items():
        if isinstance(value, torch.Tensor) and value.device != device:
            raise ConfigError(
                f"{key} is on {value.device} but the model is on {device}; move the inputs with .to({str(device)!r})"
            )


def _check_values(given: Mapping[str, Any], vocabulary: int, limits: _Limits, prefix: str = "") -> None:
    """Ids inside their tables and a mask of 0/1 with a real token in each row. CPU tensors only (module docstring):
    on CUDA reading a value waits for the device. prefix 'decoder_': an encoder-decoder's decoder inputs."""
    ids = given.get(f"{prefix}input_ids")
    if ids is not None and ids.device.type == "cpu":
        hint = "was the tokenizer made for this model?"
        _check_range(ids, f"{prefix}input_ids", vocabulary, "the model's vocabulary", hint)
    types, count = given.get("token_type_ids"), limits.token_types
    if types is not None and types.device.type == "cpu" and count > 0:
        _check_range(types, "token_type_ids", count, f"type_vocab_size={count}", "pass 0 for one segment")
    positions, rows = given.get("position_ids"), limits.positions
    if positions is not None and positions.device.type == "cpu" and rows is not None:
        _check_range(positions, "position_ids", rows, f"max_position_embeddings={rows}", "leave position_ids out")
    mask = given.get(f"{prefix}attention_mask")
    if mask is not None and mask.device.type == "cpu":
        _check_mask(mask, f"{prefix}attention_mask")
    embeds = given.get(f"{prefix}inputs_embeds")
    if embeds is not None and embeds.device.type == "cpu" and not bool(torch.isfinite(embeds).all()):
        raise ConfigError(
            f"{prefix}inputs_embeds hold NaN or infinite values, so every output would be NaN; check how they were made"
        )


def _check_range(values: torch.Tensor, key: str, count: int, table: str, hint: str) -> None:
    low, high = torch.aminmax(values)
    if int(low) < 0 or int(high) >= count:
        bad = sorted(set(values[(values < 0) | (values >= count)].tolist()))
        raise ConfigError(f"{key} holds {bad[:5]}, outside 0..{count - 1} ({table}); {hint}")


def _check_mask(mask: torch.Tensor, key: str = "attention_mask") -> None:
    if mask.dtype != torch.bool:
        if bool(((mask != 0) & (mask != 1)).any()):  # 0.5 or 2 would be added into the attention scores
            odd = mask[(mask != 0) & (mask != 1)]
            raise ConfigError(
                f"{key} holds {sorted(set(odd.tolist()))[:5]}; it must hold only 0 and 1 (1 = a real token)"
            )
    if not bool(mask.any(dim=-1).all()):
        empty = ~mask.any(dim=-1)
        where = [tuple(index) if len(index) > 1 else index[0] for index in empty.nonzero().tolist()]
        raise ConfigError(
            f"{key} rows {where[:10]} have no token (all 0): their output would be made of padding alone; "
            "drop those examples (an empty text still tokenises to [CLS] [SEP], which the mask marks 1)"
        )


def _require_tensor(key: str, value: Any) -> None:
    if not isinstance(value, torch.Tensor):
        raise ConfigError(
            f"{key} is a {type(value).__name__}, not a torch.Tensor; pass the tokenizer's output with "
            "return_tensors='pt', or torch.tensor(...) of it"
        )


# ---- labels ------------------------------------------------------------------------------------------------------
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


def check_head_labels(labels: Any, config: HeadConfig, name: str, shape: torch.Size) -> None:
    """One class id (or target) per example, inside the head's classes; a per-token head's own layout
    (heads/question_answering.py, heads/token_classification.py)."""
    labels = _labels_tensor(labels, shape[0], f"head {name!r}")
    if config.kind == "question_answering":
        check_qa_labels(labels, name, shape)
        return
    if config.kind == "token_classification":
        check_tagging_labels(labels, name, config.num_labels, shape)
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


def _passed_labels(
    model: AdaptedModel, labels: Any, shape: torch.Size, decoder: torch.Size | None, limits: _Limits
) -> torch.Tensor:
    """Labels for the wrapped HF task model's own loss, when no head of ours is active and it takes labels;
    `decoder`: the shape of an encoder-decoder's own decoder inputs."""
    task_model = model.model
    name = type(task_model).__name__
    accepted = accepted_keywords(task_model)
    # Whether its forward takes labels decides; a model that is its own base (T5ForConditionalGeneration) may.
    has_own_loss = "labels" in accepted if accepted is not None else task_model is not task_model.base_model
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
    labels = _labels_tensor(labels, shape[0], name)
    config: Any = task_model.config
    kind = _language_model_kind(task_model)
    if kind is not None:
        expected = decoder if kind == "seq2seq" else shape
        if kind == "seq2seq" and decoder is None and labels.dim() == 2:
            _check_length(labels.shape[-1], limits, "the labels (the decoder's inputs, shifted)")
            expected = labels.shape
        _check_token_labels(labels, kind, expected, _output_vocabulary(task_model), name)
    elif name.endswith("ForMultipleChoice"):
        _check_class_ids(labels, shape[1], f"{name} ({shape[1]} choices per example)", "the task's label ids")
    elif (
        name.endswith("ForSequenceClassification")
        and config.num_labels > 1
        and labels.dtype in _INTEGER_DTYPES
        and config.problem_type in (None, "single_label_classification")
    ):  # the cases transformers computes a cross-entropy over num_labels classes for
        owner = f"{name} (num_labels={config.num_labels})"
        _check_class_ids(labels, config.num_labels, owner, "the task's label ids or the model config's num_labels")
    return labels


def _language_model_kind(model: nn.Module) -> str | None:
    """'causal', 'seq2seq' or 'masked' for a wrapped language model, whose labels are token ids, one per token;
    None for other task models."""
    if type(model).__name__.endswith("ForMaskedLM"):
        return "masked"
    can_generate = getattr(model, "can_generate", None)
    if not callable(can_generate) or not can_generate():
        return None
    return "seq2seq" if _is_seq2seq(model) else "causal"


def _output_vocabulary(model: nn.Module) -> int:
    """How many tokens the language-model head scores (the rows of its output embeddings)."""
    output = cast(Any, model).get_output_embeddings()
    weight = getattr(output, "weight", None)
    return int(weight.shape[0]) if isinstance(weight, torch.Tensor) else int(cast(Any, model).config.vocab_size)


_IGNORED = -100  # the label transformers' losses skip


def _check_token_labels(
    labels: torch.Tensor, kind: str, expected: torch.Size | None, vocabulary: int, name: str
) -> None:
    """A language model's labels: integer token ids in its vocabulary or -100, one per (decoder) token, at least
    one counted. Otherwise cross_entropy fails deep in torch, reads a [batch, seq, 1] tensor as other positions, or
    averages over no token at all: a NaN loss (0/0), silently. Read on every device, as _check_class_ids is."""
    if labels.dtype not in _INTEGER_DTYPES or labels.dtype == torch.uint8:
        raise ConfigError(
            f"{name}: labels have dtype {labels.dtype}; a language model's labels are token ids, an integer tensor "
            f"(torch.long) with {_IGNORED} where no loss is counted, e.g. labels = input_ids.clone()"
        )
    like = "decoder_input_ids" if kind == "seq2seq" else "input_ids"
    if labels.shape != expected if expected is not None else labels.dim() != 2:  # GPT2DoubleHeadsModel's are 3-D
        raise ConfigError(
            f"{name}: labels of shape {tuple(labels.shape)} must be shaped like the {like}"
            f"{'' if expected is None else ' ' + str(tuple(expected))}: one token id per token, [batch, seq] "
            f"({_IGNORED} where no loss is counted{'; transformers shifts them itself' if kind == 'causal' else ''})"
        )
    wrong = (labels != _IGNORED) & ((labels < 0) | (labels >= vocabulary))
    if bool(wrong.any()):
        values = sorted(set(labels[wrong].tolist()))
        raise ConfigError(
            f"{name}: labels hold {values[:5]}, which are not token ids of its vocabulary of {vocabulary}: labels "
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


def _labels_tensor(labels: Any, batch: int, owner: str) -> torch.Tensor:
    """`labels` as a tensor of one row per example, or a ConfigError saying what to pass."""
    if not isinstance(labels, torch.Tensor):
        preview = labels[:5] if isinstance(labels, (list, tuple)) else labels
        raise ConfigError(
            f"labels are a {type(labels).__name__} ({preview!r}), not a torch.Tensor; pass the class ids (or "
            "regression targets) as torch.tensor([...]), one per example (map label names to their ids first)"
        )
    if labels.is_complex() or labels.dim() == 0 or labels.shape[0] != batch:
        count = labels.shape[0] if labels.dim() else "a single value as"
        raise ConfigError(
            f"{owner}: {count} labels for a batch of {batch} examples; pass one real label per example, shape [batch]"
        )
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


# ---- generate() --------------------------------------------------------------------------------------------------
# generate()'s flags, which transformers reads by truth value: use_cache='no' would cache, return_dict_in_generate='no'
# return a dict.
_GENERATE_FLAGS = (
    "use_cache",
    "do_sample",
    "output_attentions",
    "output_hidden_states",
    "output_scores",
    "output_logits",
    "return_dict_in_generate",
)
# What check_generate_inputs reads of generate()'s keywords: the model inputs and the flags.
GENERATE_INPUTS = (
    "input_ids",
    "inputs_embeds",
    "attention_mask",
    "position_ids",
    "token_type_ids",
    "decoder_input_ids",
    "decoder_attention_mask",
    "decoder_inputs_embeds",
    "encoder_outputs",
    "logits_to_keep",
    *_GENERATE_FLAGS,
)


def check_generate_inputs(
    model: AdaptedModel, inputs: Mapping[str, Any], max_new_tokens: int | None, max_length: int | None
) -> None:
    """generate()'s model inputs, checked by the rules of check_call (transformers' generate would broadcast a
    one-row mask, embed a bad id deep in its loop, or run out of positions mid-generation), and the longest
    sequence it may reach (`max_new_tokens` after the prompt, else `max_length`) against the model's positions,
    before any step runs."""
    wrapped = model.model
    given = {key: value for key, value in inputs.items() if value is not None}
    _check_flags(given, _GENERATE_FLAGS)
    _check_logits_to_keep(given.get("logits_to_keep"), None)
    if "input_ids" in given and "inputs_embeds" in given:
        given.pop("input_ids")  # transformers runs the embeddings and keeps the ids only to return them
    weight = _input_embeddings(wrapped).weight
    limits = _limits(wrapped)
    seq2seq = _is_seq2seq(wrapped)
    encoded = _encoder_outputs_shape(given.get("encoder_outputs"), weight, generating=True) if seq2seq else None
    prompt, padding = 1, 0  # with no prompt, generation starts from the start (or bos) token alone
    shape = encoded  # an encoder-decoder's prompts given encoded, or None
    if "input_ids" in given or "inputs_embeds" in given:
        shape = _token_shape(given, False, None, weight.shape[1], weight.dtype)
        _check_encoded_tokens(encoded, shape)
    if shape is not None:
        _check_per_token(given, shape)
    _check_devices(wrapped, given, weight.device)
    _check_values(given, weight.shape[0], limits)
    if shape is not None and seq2seq:
        _check_length(shape[-1], limits, "the prompts")
        decoder = _check_decoder_inputs(given, shape, weight, limits, 0, None)
        prompt = decoder[-1] if decoder is not None else 1
    elif shape is not None:
        prompt = _longest_row(given.get("attention_mask"), shape[-1])
        padding = shape[-1] - prompt
        _check_length(prompt, limits, "the prompts")
    new = max_new_tokens if max_new_tokens is not None and max_new_tokens > 0 else None
    total = prompt + new if new is not None else (max_length - padding if max_length is not None else None)
    limit = limits.max_length
    if limit is not None and total is not None and total > limit:
        fix = (
            f"lower max_new_tokens to at most {max(limit - prompt, 0)}"
            if new is not None
            else f"lower max_length to at most {limit + padding}"
        )
        asked = f"{prompt} prompt tokens + max_new_tokens={new}" if new is not None else f"max_length={max_length}"
        raise ConfigError(
            f"generate() could reach {total} tokens per sequence ({asked}), more than this {limits.config.model_type} "
            f"model has positions for: {limit} ({limit_reason(limits.config)}); {fix}, or truncate the prompts"
        )


def _longest_row(mask: torch.Tensor | None, width: int) -> int:
    """The most real tokens in a prompt row: generate numbers a decoder's positions by its attention mask, so the
    left padding of a batch takes none."""
    return int(mask.sum(-1).max()) if isinstance(mask, torch.Tensor) else width
