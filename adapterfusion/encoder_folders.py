"""What a HuggingFace model folder holds, and its files checked one by one: the names of the config, weight,
tokenizer and other save_pretrained files; whether a folder is a model's (`model_files_in`, and
`check_not_model_folder`, which keeps our pieces out of one); and each JSON file read and checked as itself
(`check_folder_files`, `check_model_config`), so that a damaged or wrong file is named as the cause, before
transformers reports it as the failure of whatever it was loading. The files alone: loading the tokenizer and
model from them is encoder_loading.py's, resolving an encoder argument to a folder encoders.py's.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from adapterfusion._validation import short_repr
from adapterfusion.encoder_limits import check_config_values
from adapterfusion.errors import ConfigError, UnsupportedArchitectureError
from adapterfusion.injection.architectures import ARCHITECTURES
from adapterfusion.io.paths import describe

MODEL_CONFIG = "config.json"
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
# Shards of the weight files above (model-00001-of-00002.safetensors, ...) and GGUF files; not any .bin (a trainer's
# training_args.bin beside the weights is no weights)
WEIGHT_SHARDS = (("model", (".safetensors",)), ("pytorch_model", (".bin",)), ("", (".gguf",)))
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "spiece.model",
    "sentencepiece.bpe.model",
    "tokenizer.model",
    "spm.model",
)
# What save_pretrained writes beside those, of a model (its generation settings) and of a tokenizer (the special
# tokens, tokens added to the vocabulary, a chat template)
SAVED_EXTRAS = (
    "generation_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
)


# A sharded checkpoint's weight files as transformers names them (not model_head.safetensors, an AdapterHub head's).
_SHARD = re.compile(r"(model|pytorch_model)-\d+-of-\d+\.(safetensors|bin)")


def saved_by_save_pretrained(name: str) -> bool:
    """Whether a file `name` is one a model's and its tokenizer's save_pretrained write (safetensors weights, shards
    and index, config, tokenizer files): what a run's saved encoder folder holds of its own."""
    return (
        name in (MODEL_CONFIG, *TOKENIZER_FILES, *SAVED_EXTRAS)
        or (name in WEIGHT_FILES and "safetensors" in name)
        or bool(_SHARD.fullmatch(name) and name.endswith(".safetensors"))
    )


def model_files_in(folder: Path) -> list[str]:
    """The files that make `folder` a HuggingFace model folder: a config.json naming a model_type, weight files
    (WEIGHT_FILES, shards, GGUF). Empty for any other folder, or one that cannot be listed."""
    try:
        names = sorted(entry.name for entry in os.scandir(folder) if entry.is_file())
    except OSError:
        return []
    found = [name for name in names if name in WEIGHT_FILES or _SHARD.fullmatch(name) or name.endswith(".gguf")]
    config = read_model_config(folder) if MODEL_CONFIG in names else None
    if config is not None and "model_type" in config:  # not a run folder's config.json
        found.insert(0, MODEL_CONFIG)
    return found


def read_model_config(folder: Path) -> dict[str, Any] | None:
    """The JSON object of `folder`'s config.json; None where there is none, or it cannot be read as one."""
    try:
        config = json.loads((folder / MODEL_CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError):  # UnicodeDecodeError is a ValueError
        return None
    return config if isinstance(config, dict) else None


def check_not_model_folder(folder: Path, what: str, kind: str) -> None:
    """Refuse to write a piece into a HuggingFace model's folder. None of our file names is one of the model's, but
    the mix is harmful: with peft installed, transformers' from_pretrained reads an adapter_config.json in a model
    folder as a PEFT adapter and fails on ours (AdapterHub's too), and whatever copies or uploads the model carries
    the piece along. AdapterHub itself saves each piece in a folder of its own."""
    found = model_files_in(folder)
    if found:
        shown = ", ".join(found[:4]) + (f" and {len(found) - 4} more" if len(found) > 4 else "")
        peft = (
            ": with peft installed, transformers reads an adapter_config.json beside a model as a PEFT adapter, so "
            "from_pretrained of that model would fail on ours"
            if kind == "adapter"
            else ""
        )
        raise ConfigError(
            f"{what} {str(folder)!r} holds a HuggingFace model ({shown}); each {kind} goes into a folder of its own, "
            f"as AdapterHub keeps it, not among a model's files{peft}. Save the {kind} into a new or empty folder"
        )


# The JSON files of a model folder, each with what writes it: transformers reads each while loading the config, the
# model or the tokenizer, and reports a damaged one as a failure of whichever it was loading (a broken
# special_tokens_map.json as "the tokenizer does not load", with a JSONDecodeError and no file name).
_JSON_FILES = {
    MODEL_CONFIG: "model.save_pretrained(folder)",
    "generation_config.json": "model.save_pretrained(folder)",
    "model.safetensors.index.json": "model.save_pretrained(folder)",
    "pytorch_model.bin.index.json": "model.save_pretrained(folder)",
    "tokenizer.json": "tokenizer.save_pretrained(folder)",
    "tokenizer_config.json": "tokenizer.save_pretrained(folder)",
    "special_tokens_map.json": "tokenizer.save_pretrained(folder)",
    "added_tokens.json": "tokenizer.save_pretrained(folder)",
    "vocab.json": "tokenizer.save_pretrained(folder)",
    "chat_template.json": "tokenizer.save_pretrained(folder)",
}


def check_folder_files(folder: Path, present: list[str]) -> dict[str, Any] | None:
    """ConfigError naming the file where one of the model's or tokenizer's own files is not a file (a folder of that
    name) or, for a JSON file, holds no JSON object: each damaged file named as itself, before transformers reports
    it as a failure of something else. Returns config.json's object, read here once, where the folder holds one."""
    config = None
    for name in present:
        path = folder / name
        known = name in _JSON_FILES or name in TOKENIZER_FILES or name in WEIGHT_FILES or name in SAVED_EXTRAS
        if known and not path.is_file():
            raise ConfigError(
                f"{path} is not a file (it is {describe(path)}), where the model folder's {name} belongs; remove it "
                "and save the model and its tokenizer there again (model.save_pretrained(folder), "
                "tokenizer.save_pretrained(folder)), or download a Hub id's files again"
            )
        if name in _JSON_FILES:
            document = _json_object(path, _JSON_FILES[name], f"the tokenizer of encoder {folder} does not load: ")
            if name == "tokenizer_config.json":
                _check_tokenizer_config(document, path)
            elif name == MODEL_CONFIG:
                config = document
    return config


# tokenizer_config.json keys transformers reads as one type, each with what it must be: a wrong one failed deep in
# the tokenizer's construction ('int' object has no attribute 'removesuffix'), or loaded and cut every text short (a
# model_max_length of -3) or failed at the first chat (a chat_template that is a number).
_TOKENIZER_KEYS: dict[str, tuple[Callable[[object], bool], str]] = {
    "tokenizer_class": (
        lambda v: isinstance(v, str) and v != "",
        "the name of a tokenizer class, such as 'BertTokenizer'",
    ),
    "model_max_length": (  # a whole float too: some Hub files say 1e30 for no limit
        lambda v: (isinstance(v, int) and not isinstance(v, bool) or isinstance(v, float) and v.is_integer()) and v > 0,
        "a positive whole number",
    ),
    "padding_side": (lambda v: v in ("right", "left"), "'right' or 'left'"),
    "truncation_side": (lambda v: v in ("right", "left"), "'right' or 'left'"),
    "chat_template": (
        lambda v: isinstance(v, str) or (isinstance(v, list) and all(isinstance(t, dict) for t in v)),
        "a Jinja template (a string), or a list of {'name': ..., 'template': ...} objects",
    ),
}


def _check_tokenizer_config(document: Mapping[str, Any], path: Path) -> None:
    """ConfigError naming tokenizer_config.json, the key and its value where a key read as one type holds another
    (null: transformers' default), as check_model_config does for config.json."""
    for key, (fits, wanted) in _TOKENIZER_KEYS.items():
        value = document.get(key)
        if value is not None and not fits(value):
            raise ConfigError(
                f"{path} gives {key!r} the value {short_repr(value)} ({type(value).__name__}), where the tokenizer "
                f"needs {wanted}; correct that value in the file, or save the tokenizer again with "
                "tokenizer.save_pretrained(folder)"
            )


def _json_object(path: Path, writer: str, tokenizer: str = "") -> dict[str, Any]:
    """The JSON object in `path`; ConfigError naming the file and what writes it, where it holds none, after
    `tokenizer` (what fails) where the tokenizer writes it."""
    said = tokenizer if writer.startswith("tokenizer") else ""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise ConfigError(
            f"{said}{path} is not a readable JSON file ({type(error).__name__}: {error}); write it again with {writer}"
        ) from None
    if not isinstance(value, dict):
        raise ConfigError(
            f"{said}{path} holds a JSON {type(value).__name__}, not the JSON object {writer} writes; write it again "
            f"with {writer}"
        )
    return value


def check_model_config(path: Path, config: dict[str, Any] | None) -> None:
    """ConfigError (UnsupportedArchitectureError) naming config.json, and the key and value where one is the cause,
    unless it is a config transformers loads, of a model type adapterfusion has sites for. `config`: its object as
    check_folder_files read it (None: read here)."""
    from transformers import CONFIG_MAPPING, AutoConfig

    config = config if config is not None else _json_object(path, "model.save_pretrained(folder)")
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING:
        raise ConfigError(
            f"{path} names model_type {model_type!r}, which this transformers version does not know; save the model "
            "with model.save_pretrained(folder) (its config.json then names its type), or upgrade transformers"
        )
    if model_type not in ARCHITECTURES:
        raise UnsupportedArchitectureError(
            f"{path} is a {model_type!r} model, which adapterfusion has no adapter sites for; use an encoder of one "
            f"of {', '.join(sorted(ARCHITECTURES))}"
        )
    check_config_values(config, path)
    try:
        AutoConfig.from_pretrained(path.parent, local_files_only=True)
    except Exception as error:  # noqa: BLE001 - a config class raises what its own checks raise
        lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
        field = re.search(r"field '([^']+)'", lines[0]) if lines else None
        value = f" ({field.group(1)!r} is {config.get(field.group(1))!r})" if field and field.group(1) in config else ""
        raise ConfigError(
            f"{path} does not load as a {model_type!r} config{value}: {type(error).__name__}: {' '.join(lines[:2])}; "
            "correct that value in the file, or save the model again with model.save_pretrained(folder)"
        ) from None
