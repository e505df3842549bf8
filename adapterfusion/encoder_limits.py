"""How many tokens an encoder takes, read from its HuggingFace config.

An encoder with a table of absolute positions fails deep in its embeddings (a RuntimeError about an expanded size,
or an IndexError) on a longer input; a max_length above that limit can only end so. Knowing the limit from the
config alone lets an experiment file, a training run and a model call refuse it up front, naming the limit.
"""

from __future__ import annotations

import contextlib
import math
import os
from pathlib import Path
from typing import Any

from adapterfusion.errors import ConfigError, HubError
from adapterfusion.io.hub import cached_folder, cached_spelling
from adapterfusion.io.hub_ids import hub_ref
from adapterfusion.io.paths import user_path

_MODEL_CONFIG = "config.json"

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

    folder = local_config_folder(encoder)
    if folder is None:
        return None
    try:
        return AutoConfig.from_pretrained(folder, local_files_only=True)
    except Exception:  # noqa: BLE001 - not a model folder, an unknown model_type, or a value its config class
        return None  # refuses with its own error type: resolve_encoder names the file, key and value


def local_config_folder(encoder: str | os.PathLike) -> Path | None:
    """The folder on this machine holding `encoder`'s config.json: the folder it names, or, for a Hub id
    ('org/name', '/subfolder', '@revision'), its snapshot in the local cache the environment names now, as the
    encoder is loaded from (io/hub.py cached_folder). transformers read 'org/name@rev' as a repo name, and the cache
    its import found: a cached encoder's config came back None, and the max-length check was skipped unsaid."""
    local = user_path(encoder)
    with contextlib.suppress(OSError, ValueError):  # a name past the file system's limit: no folder, maybe an id
        if local.is_dir():
            return local
    ref = hub_ref(encoder) if isinstance(encoder, str) else None
    if ref is None:
        return None
    try:
        return cached_folder(cached_spelling(ref), _MODEL_CONFIG)  # offline, whatever case the cache spells it in
    except HubError:  # a cache that is a file or damaged: loading the encoder names it
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


# ---- what a config.json may hold --------------------------------------------------------------------------------
# Sizes a model is built from, by their standard names (a config class's attribute_map gives its own key: GPT-2's
# n_layer, DistilBERT's n_layers). Each a positive whole number where the file gives one: transformers builds a model
# of no layers from num_hidden_layers=-1 and loads it without a word, and fails on a string deep in the tokenizer's
# or the model's construction.
_SIZES = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
    "num_key_value_heads",
    "head_dim",
)
_ACTIVATIONS = ("hidden_act", "activation_function", "activation")
_DTYPES = ("torch_dtype", "dtype")
_MAPPINGS = ("id2label", "label2id")


def check_config_values(config: Any, path: str | os.PathLike) -> None:
    """ConfigError naming the key and its value where `config` (the JSON of the model config.json at `path`) holds
    a value no model is built from: a size that is not a positive whole number, an activation transformers does not
    know, a dtype that is no torch dtype, labels that are no mapping. A file that is no JSON object, or names no
    model_type transformers knows, is its reader's to refuse."""
    from transformers import CONFIG_MAPPING

    model_type = config.get("model_type") if isinstance(config, dict) else None
    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING:
        return
    aliases = getattr(CONFIG_MAPPING[model_type], "attribute_map", {}) or {}
    for name in _SIZES:
        key = aliases.get(name, name)
        value = config.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
            _bad_value(path, key, value, "a positive whole number" + (f" (its {name})" if key != name else ""))
    for key in _ACTIVATIONS:
        value = config.get(key)
        if value is not None and not _known_activation(value):
            _bad_value(path, key, value, "the name of an activation transformers knows (such as 'gelu' or 'silu')")
    for key in _DTYPES:
        value = config.get(key)
        if value is not None and not _torch_dtype_name(value):
            _bad_value(path, key, value, "the name of a torch dtype (such as 'float32' or 'bfloat16'), or null")
    for key in _MAPPINGS:
        value = config.get(key)
        if value is not None and not isinstance(value, dict):
            _bad_value(path, key, value, "a JSON object mapping label ids to label names (or names to ids)")
    for key, value in config.items():  # Python's json reads NaN and Infinity: a NaN epsilon made every output NaN
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if number and math.isnan(value):
            _bad_value(path, key, value, "a number (NaN makes every output NaN)")
        if key.endswith(("_eps", "_epsilon")) and value is not None and not (number and 0 < value < math.inf):
            _bad_value(path, key, value, "a small positive number (a normalisation's epsilon, such as 1e-12)")


def _known_activation(value: object) -> bool:
    from transformers.activations import ACT2FN

    return isinstance(value, str) and value in ACT2FN


def _torch_dtype_name(value: object) -> bool:
    import torch

    return isinstance(value, str) and isinstance(getattr(torch, value.removeprefix("torch."), None), torch.dtype)


def _bad_value(path: str | os.PathLike, key: str, value: object, wanted: str) -> None:
    shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
    raise ConfigError(
        f"{os.fspath(path)} gives {key!r} the value {shown} ({type(value).__name__}), where the model needs {wanted}; "
        "correct that value in the file, or save the model again with model.save_pretrained(folder)"
    )
