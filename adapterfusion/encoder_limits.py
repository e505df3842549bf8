"""How many tokens an encoder takes, read from its HuggingFace config.

An encoder with a table of absolute positions fails deep in its embeddings (a RuntimeError about an expanded size,
or an IndexError) on a longer input; a max_length above that limit can only end so. Knowing the limit from the
config alone lets an experiment file, a training run and a model call refuse it up front, naming the limit.
"""

from __future__ import annotations

import os
from typing import Any

from adapterfusion.errors import ConfigError

# RoBERTa-style embeddings number positions from padding_idx + 1 (create_position_ids_from_input_ids), so the first
# pad_token_id + 1 rows of the position table never hold a real token: 514 rows give RoBERTa 512 usable tokens.
_POSITIONS_AFTER_PADDING = frozenset(
    {"roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "data2vec-text", "mpnet", "roberta-prelayernorm"}
)
# Encoders whose positions are rotary or relative only: max_position_embeddings is a hint, not a table size.
_NO_POSITION_TABLE = frozenset({"modernbert"})
_NO_TABLE_EMBEDDING_TYPES = frozenset({"rotary", "alibi"})


def max_input_length(config: Any) -> int | None:
    """The most tokens per sequence the encoder of HF `config` takes, or None when it has no absolute-position limit
    (rotary positions, or DeBERTa with position_biased_input=False: relative positions only)."""
    model_type = getattr(config, "model_type", None)
    if (
        model_type in _NO_POSITION_TABLE
        or getattr(config, "position_embedding_type", None) in _NO_TABLE_EMBEDDING_TYPES
        or getattr(config, "position_biased_input", True) is False
    ):
        return None
    positions = getattr(config, "max_position_embeddings", None)
    if not isinstance(positions, int) or isinstance(positions, bool) or positions <= 0:
        return None
    if model_type in _POSITIONS_AFTER_PADDING:
        padding = getattr(config, "pad_token_id", None)
        return positions - (padding if isinstance(padding, int) else 1) - 1
    return positions


def limit_reason(config: Any) -> str:
    """Why max_input_length(config) is what it is, for an error message."""
    positions = getattr(config, "max_position_embeddings", None)
    limit = max_input_length(config)
    if getattr(config, "model_type", None) in _POSITIONS_AFTER_PADDING and positions and limit:
        return (
            f"max_position_embeddings={positions}, less the first pad_token_id + 1 = {positions - limit} positions "
            "it skips: its position ids start after the padding id"
        )
    return f"max_position_embeddings={positions}"


def encoder_config(encoder: str | os.PathLike) -> Any | None:
    """The HF config of `encoder` (a model folder or a Hub id) if it can be read without the network, else None."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(os.fspath(encoder), local_files_only=True)
    except (OSError, ValueError, KeyError):  # not cached, not a model folder, or an unknown model_type
        return None


def check_max_length(max_length: object, encoder: str | os.PathLike, field: str = "max_length") -> None:
    """Refuse `max_length` above what `encoder` takes (when its config can be read locally; otherwise the model call
    refuses a too-long batch)."""
    if not isinstance(max_length, int) or isinstance(max_length, bool):
        return
    config = encoder_config(encoder)
    limit = max_input_length(config) if config is not None else None
    if limit is not None and max_length > limit:
        raise ConfigError(
            f"{field}={max_length} is more tokens than encoder {os.fspath(encoder)!r} takes: {limit} "
            f"({limit_reason(config)}); set {field} to at most {limit}"
        )


def cap_tokenizer_length(tokenizer: Any, config: Any) -> Any:
    """`tokenizer` with its model_max_length no more than the tokens the model of `config` takes: a task's default
    max_length (encoding caps it at model_max_length) then fits the model, where a tokenizer that states no limit
    (or another model's) would let examples past its positions and the run fail at its first step."""
    limit = max_input_length(config) if config is not None else None
    current = getattr(tokenizer, "model_max_length", None)
    if limit is not None and (not isinstance(current, int) or current > limit):
        tokenizer.model_max_length = limit
    return tokenizer
