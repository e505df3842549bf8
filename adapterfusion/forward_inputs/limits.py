"""What the model's config says its inputs may hold (tokens per sequence, rows of the position table, token
types), read once per model, and `check_length`, which refuses a sequence longer than the model has positions for
(transformers would fail deep in torch, or read positions it never learnt)."""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

from torch import nn

from adapterfusion.encoder_limits import limit_reason, max_input_length
from adapterfusion.errors import ConfigError
from adapterfusion.forward_inputs.keywords import accepted_keywords


@dataclass(frozen=True)
class Limits:
    """What the encoder's config says its inputs may hold, read once per model: config attributes are slow to read
    in transformers 5, and the checks run on every forward."""

    config: Any
    max_length: int | None  # tokens per sequence (encoder_limits.max_input_length)
    positions: int | None  # rows of the position table, when it has one
    token_types: int | None  # type_vocab_size (0: types unused; None: no type table, GPT-2 embeds them as tokens)


_LIMITS: weakref.WeakKeyDictionary[nn.Module, Limits] = weakref.WeakKeyDictionary()


def model_limits(model: nn.Module) -> Limits:
    """The Limits of `model`, read again only when its config object is replaced."""
    limits = _LIMITS.get(model)
    if limits is None or limits.config is not model.config:
        config: Any = model.config
        max_length, types = max_input_length(config), getattr(config, "type_vocab_size", None)
        if types is None:  # no type table: GPT-2 takes token_type_ids and looks them up in its token embeddings
            types = None if "token_type_ids" in (accepted_keywords(model) or ()) else 0
        positions = int(config.max_position_embeddings) if max_length is not None else None
        limits = Limits(config, max_length, positions, types if types is None or isinstance(types, int) else 0)
        _LIMITS[model] = limits
    return limits


def check_length(length: int, limits: Limits, what: str = "the inputs") -> None:
    """`length` tokens per sequence of `what` must fit the model's positions."""
    limit = limits.max_length
    if limit is not None and length > limit:
        raise ConfigError(
            f"{what} have {length} tokens per sequence, more than this {limits.config.model_type} encoder takes: "
            f"{limit} ({limit_reason(limits.config)}); truncate them, e.g. tokenizer(..., truncation=True, "
            f"max_length={limit})"
        )
