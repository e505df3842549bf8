"""Which keywords a model call may pass: those the encoder's forward takes (read from its signature and, for a
**kwargs, from what transformers documents for it), not the routing keywords forward_parallel cannot honour, and the
flags transformers reads by truth value only as real bools. transformers ignores a keyword its forward does not name,
so a misspelt or unsupported input would otherwise be dropped without a word."""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
import typing
from collections.abc import Mapping
from typing import Any, cast

import transformers.modeling_flash_attention_utils as flash_attention_utils
import transformers.utils.generic as transformers_generic
from torch import nn

from adapterfusion._validation import check_bool
from adapterfusion.errors import ConfigError

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


# Routing keywords reach check_call only from forward_parallel (AdaptedModel.forward takes them itself).
_ROUTING_KEYWORDS = ("adapter_names", "head_names")
_ROUTING_HINT = (
    "{keyword}= is not supported by forward_parallel, which runs every adapter of the fusion on the whole batch; "
    "route each example to its own adapter, fusion and head with model(**batch, adapter_names=[...], "
    "head_names=[...]) (adapterfusion/routing.py)"
)


def check_keywords(encoder: nn.Module, given: Mapping[str, Any]) -> None:
    """Every keyword of `given` one that `encoder`'s forward takes, its flags bools, and no return_dict=False."""
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
    _check_inputs_read(encoder, given)
    check_flags(given, _FLAGS)
    if given.get("return_dict") is False:
        raise ConfigError(
            "return_dict=False: the model returns an AdaptedModelOutput whatever return_dict says; drop it and call "
            ".to_tuple() on the output for a tuple"
        )


# Inputs a forward names but reads only where its config's flag is on (DeBERTa-v3 adds no absolute positions).
_READ_ONLY_WITH = {"position_ids": "position_biased_input", "task_type_ids": "use_task_id"}


def _check_inputs_read(encoder: nn.Module, given: Mapping[str, Any]) -> None:
    """Inputs that a config flag switches off (DeBERTa-v3's position_ids, ERNIE's task_type_ids), and position_ids
    where the forward does not name them (T5, BART): transformers passes them on in its **kwargs,
    and only flash attention's packed sequences read them there; these models count positions themselves (or use
    relative ones), so any other attention ignores them without a word."""
    config = getattr(encoder, "config", None)
    for key, flag in _READ_ONLY_WITH.items():  # named by the forward, but read only under a config flag
        if key in given and getattr(config, flag, True) is False:
            raise ConfigError(
                f"{type(encoder).__name__} has {flag}=False in its config, so {key} would be silently ignored; "
                f"leave {key} out"
            )
    if "position_ids" not in given or _names_positions(cast(Any, type(encoder))):
        return
    implementation = getattr(config, "_attn_implementation", None)
    if isinstance(implementation, str) and implementation.startswith("flash"):
        return
    raise ConfigError(
        f"{type(encoder).__name__} counts token positions itself, so position_ids would be silently ignored (only "
        f"flash attention's packed sequences read them, and this model runs {implementation!r} attention); leave "
        "position_ids out"
    )


@functools.cache
def _names_positions(module_class: Any) -> bool:
    """Whether `module_class.forward` names position_ids itself (read once per class, as _keywords_of is)."""
    return "position_ids" in inspect.signature(module_class.forward).parameters


def check_flags(given: Mapping[str, Any], flags: tuple[str, ...]) -> None:
    """Each of `flags` given must be a bool: transformers reads them by truth value, so 'no' would mean True."""
    for flag in flags:
        if flag in given:
            check_bool(given[flag], flag)


def accepted_keywords(module: nn.Module) -> frozenset[str] | None:
    """The keywords `module`'s forward takes (read once per class, see _keywords_of)."""
    return _keywords_of(cast(Any, type(module)))


@functools.cache
def _keywords_of(module_class: Any) -> frozenset[str] | None:
    """The keywords `module_class.forward` takes: its named parameters, the keys of a typed **kwargs
    (transformers' Unpack[TransformersKwargs]) and return_dict (every PreTrainedModel takes it). An untyped **kwargs
    that the body never reads (DeBERTa, MPNet) swallows what it is given, so it adds nothing; one the body passes on
    (GPT-2 hands it to its attention) takes what transformers documents for such kwargs, TransformersKwargs and
    FlashAttentionKwargs: anything else would be swallowed silently. None when those cannot be read, or when the
    forward is a bare `(*args, **kwargs)` wrapper (a patch or decorator without functools.wraps), which hides what
    the forward it calls takes."""
    forward = module_class.forward
    parameters = list(inspect.signature(forward).parameters.values())
    names = {p.name for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)} - {"self"}
    if not names and any(p.kind is p.VAR_POSITIONAL for p in parameters):
        return None
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


def _typed_kwargs(annotation: Any, forward: Any) -> set[str] | None:
    """The keys of `**kwargs: Unpack[SomeTypedDict]`, or None when the annotation says nothing of them."""
    if isinstance(annotation, str):  # postponed annotations: look the TypedDict up where forward was defined
        inner = annotation.removeprefix("Unpack[").removesuffix("]").rpartition(".")[2]
        annotation = getattr(forward, "__globals__", {}).get(inner) if annotation.startswith("Unpack[") else None
    elif typing.get_args(annotation):
        annotation = typing.get_args(annotation)[0]
    keys = getattr(annotation, "__annotations__", None) if typing.is_typeddict(annotation) else None
    return set(keys) if keys is not None else None
