"""The past_key_values of a cached step: a transformers Cache made for this batch's rows, which a head cannot use,
and how many tokens it holds already (a cached step's attention mask covers those too)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from transformers.cache_utils import Cache

from adapterfusion.errors import ConfigError


def past_length(given: Mapping[str, Any], batch: int, head: str | None) -> int:
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
