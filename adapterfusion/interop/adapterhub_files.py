"""The files AdapterHub's `adapters` library writes for one adapter, fusion or head: recognising a folder,
reading its JSON and weights safely, and writing them back.

Legacy `.bin` weights are pickles; they are read only with `torch.load(..., weights_only=True)`, which refuses
any object that is not a tensor or a plain container, so loading a downloaded folder can never run code.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import re
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_safetensors_bytes
from safetensors.torch import save as save_safetensors_bytes

from adapterfusion._validation import check_bool
from adapterfusion.encoder_folders import check_not_model_folder
from adapterfusion.errors import ConfigError, SerializationError, UnknownFormatVersionWarning
from adapterfusion.io.atomic import atomic_write_files, json_text
from adapterfusion.io.documents import read_bytes, read_json
from adapterfusion.io.paths import as_path, check_readable_file, check_writable_folder
from adapterfusion.piece import PIECE_FORMAT, is_our_piece_config, piece_weights_name

ADAPTERHUB_VERSION = "adapters.1.3.0"
"""The `version` written on export: the release whose formats docs/adapterhub.md describes."""
KNOWN_VERSIONS = re.compile(r"adapters\.1\.\d+\.\d+")
"""The `version` strings read without a warning: adapters 1.x, whose formats 1.3.0 (checked) shares."""

# kind -> (config file, safetensors weights, legacy pickle weights), as adapters 1.3.0 names them.
FILES: dict[str, tuple[str, str, str]] = {
    "adapter": ("adapter_config.json", "adapter.safetensors", "pytorch_adapter.bin"),
    "fusion": ("adapter_fusion_config.json", "model_adapter_fusion.safetensors", "pytorch_model_adapter_fusion.bin"),
    "head": ("head_config.json", "model_head.safetensors", "pytorch_model_head.bin"),
}


def check_kind(kind: object, able: str) -> str:
    """`kind` if it is one of FILES' kinds; else a ConfigError saying it is not `able` ('loadable', ...)."""
    if not isinstance(kind, str) or kind not in FILES:
        raise ConfigError(f"kind={kind!r} is not {able}; choose one of {', '.join(map(repr, FILES))}")
    return kind


def is_adapterhub_dir(directory: str | Path, kind: str) -> bool:
    """True if `directory` holds an AdapterHub `kind` rather than one saved by adapterfusion.

    adapter_config.json and head_config.json have the same names in both formats; ours carry
    "format": "adapterfusion", AdapterHub's a "config" object and usually a "version" like "adapters.1.3.0".
    """
    path = as_path(directory, f"the AdapterHub {check_kind(kind, 'an AdapterHub kind')} folder") / FILES[kind][0]
    if not os.path.isfile(path) or not os.access(path, os.R_OK):  # our own reader says what is wrong
        return False
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, OSError):
        # A broken file of a name only AdapterHub writes (adapter_fusion_config.json) is AdapterHub's: its reader
        # names the JSON error. One of a name both formats use (adapter_config.json) our own reader reports.
        return path.name != f"{kind}_config.json"
    if not isinstance(document, dict):  # a JSON list or number: as a broken file (read_document names it)
        return path.name != f"{kind}_config.json"
    if document.get("format") == PIECE_FORMAT:
        return False
    version = str(document.get("version", ""))
    return version.startswith(("adapters.", "adapter-transformers")) or isinstance(document.get("config"), dict)


def _replaceable(directory: Path, kind: str) -> bool:
    """Whether an export with overwrite=True may replace the `kind` files in `directory`: a config says whose they
    are, and it is an AdapterHub one or one that save_<kind> wrote, not another library's file of the same name (a
    PEFT adapter's adapter_config.json) or a user's own. Weights with no config beside them are replaceable only as
    what an interrupted export of ours left (its pending file says so): otherwise nothing says they are a piece."""
    path = directory / FILES[kind][0]
    if not os.path.lexists(path):
        return os.path.lexists(directory / pending_name(kind))
    return is_adapterhub_dir(directory, kind) or is_our_piece_config(path, kind)


def _check_not_hiding(directory: Path, kind: str, what: str) -> None:
    """Refuse to export beside a `kind` that save_<kind> wrote under other file names (a fusion: fusion_config.json):
    load_<kind> of the folder reads the AdapterHub one first, so the saved one would be hidden without a word."""
    ours = directory / f"{kind}_config.json"
    if ours.name != FILES[kind][0] and os.path.isfile(ours) and is_our_piece_config(ours, kind):
        raise ConfigError(
            f"{what} {str(directory)!r} holds a {kind} saved by save_{kind} ({ours.name}); an AdapterHub {kind} "
            f"exported beside it would hide it, as load_{kind} of that folder reads the AdapterHub one. Export into "
            "another folder (each piece goes into a folder of its own)"
        )


def warn_unknown_version(document: Mapping[str, Any], path: Path) -> None:
    """Warn when the writer's `version` is not one of KNOWN_VERSIONS (adapter-transformers, adapters 2.x, none):
    the file is still read as adapters 1.3.0 writes it, which is right only if that format did not change."""
    version = document.get("version")
    if isinstance(version, str) and KNOWN_VERSIONS.fullmatch(version):
        return
    written = f"written by {version!r}" if version is not None else "without a 'version' field"
    warnings.warn(
        f"{path} was {written}, not by a version whose format this library was checked against (adapters 1.x, "
        f"checked with {ADAPTERHUB_VERSION}); it is read as that format, so compare the loaded model's outputs "
        "with the library that wrote it",
        UnknownFormatVersionWarning,
        stacklevel=4,
    )


def pending_name(kind: str) -> str:
    """The file an export of `kind` keeps beside its files while it renames them into place (atomic_write_files)."""
    return f".adapterfusion-{kind}-export-pending"


def read_document(directory: Path, kind: str) -> dict[str, Any]:
    path = directory / FILES[kind][0]
    if os.path.lexists(directory / pending_name(kind)):
        raise SerializationError(
            f"an export of this {kind} into {directory} was interrupted between writing its files, so its weights and "
            f"config may not belong together; export it again (export_adapterhub(..., overwrite=True))"
        )
    document = read_json(path)
    if isinstance(document, dict) and document.get("format") == PIECE_FORMAT:
        raise SerializationError(
            f"{directory} holds a {kind} saved by save_{kind} (adapterfusion's own format), not an AdapterHub one; "
            f"load it with model.load_{kind}"
        )
    if not isinstance(document, dict):
        raise SerializationError(
            f"{path} holds a JSON {type(document).__name__}, not an object; an AdapterHub {kind} config is an object "
            "with a 'config' object in it: the file is damaged or was edited by hand, so download or export it again"
        )
    if not isinstance(document.get("config"), dict):
        raise SerializationError(f"{path} has no 'config' object; it is not an AdapterHub {kind} config")
    warn_unknown_version(document, path)
    return document


def read_weights(directory: Path, kind: str) -> dict[str, torch.Tensor]:
    """The safetensors file if present, else the `.bin`, loaded with weights_only=True (never full unpickling)."""
    _, safe_name, bin_name = FILES[kind]
    safe_path, bin_path = directory / safe_name, directory / bin_name
    if not os.path.lexists(safe_path) and not os.path.lexists(bin_path):
        raise SerializationError(f"{directory} has neither {safe_name} nor {bin_name}; the {kind} weights are missing")
    if not os.path.lexists(safe_path):
        return read_bin(check_readable_file(bin_path, f"AdapterHub keeps the {kind} weights in that file"))
    check_readable_file(safe_path, f"AdapterHub keeps the {kind} weights in that file")
    data = read_bytes(safe_path, f"AdapterHub keeps the {kind} weights in that file")
    try:
        return load_safetensors_bytes(data)
    except (SafetensorError, ValueError, RuntimeError) as error:
        raise SerializationError(f"{safe_path} is not a readable safetensors file ({error})") from None


def read_bin(path: Path) -> dict[str, torch.Tensor]:
    data = read_bytes(path, "AdapterHub keeps the weights in that file")
    try:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        raise SerializationError(
            f"{path} was refused as unsafe: torch.load(weights_only=True) found objects other than tensors "
            f"({_refusal_reason(error)}). Only load files from sources you trust, and prefer .safetensors"
        ) from None
    except Exception as error:  # torch raises many types for a damaged archive
        raise SerializationError(
            f"{path} could not be read with torch.load(weights_only=True) and was refused as unsafe or corrupt "
            f"({type(error).__name__}: {' '.join(str(error).split())[:300]})"
        ) from None
    if not isinstance(state, Mapping) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise SerializationError(f"{path} does not hold a state dict of named tensors")
    return dict(state)


def _refusal_reason(error: Exception) -> str:
    """torch's reason for refusing a pickle (e.g. "Unsupported global: GLOBAL builtins.open ..."), without its
    advice to retry with weights_only=False, which would run the pickle's code."""
    found = re.search(r"WeightsUnpickler error:\s*(.*?)\s*(?:Check the documentation|$)", str(error), re.S)
    detail = " ".join((found.group(1) if found else str(error)).split())
    return detail.split(". ")[0][:200]


def write_folder(
    directory: str | Path,
    kind: str,
    document: Mapping[str, Any],
    tensors: Mapping[str, torch.Tensor],
    use_safetensors: bool = True,
    overwrite: bool = False,
) -> Path:
    """Weights and config as one write (io/atomic.py atomic_write_files: a failure leaves neither, so a retry works),
    under the names adapters 1.3.0 reads. A file of those names already there is refused unless `overwrite`: an
    export and an AdapterHub download look alike; weights with no config beside them, or our own saved fusion
    (whose files have other names), are refused even then. With `overwrite`, the weights file of the other format
    that the replaced piece left (an earlier export's, or a save_* of ours: its config is replaced, so the file holds
    nothing loadable) is removed after the write, so that nothing loads it instead; a weights file that was not the
    replaced piece's is kept, and refused where it would hide the new weights."""
    check_bool(use_safetensors, "use_safetensors")
    check_bool(overwrite, "overwrite")
    what = f"export_adapterhub: the {kind} folder"
    directory = check_writable_folder(directory, what)  # the path itself first, before anything in it is read
    held = [name for name in FILES[kind] if os.path.isfile(directory / name)]
    configured = os.path.lexists(directory / FILES[kind][0])
    if held and not configured and not _replaceable(directory, kind):
        raise ConfigError(
            f"{what} {str(directory)!r} already holds {', '.join(held)} but no {FILES[kind][0]}, so nothing says it "
            f"is an AdapterHub {kind} or one we wrote (a download cut short, another tool's file, or your own); we "
            f"never overwrite a file we did not write, even with overwrite=True: choose another folder, or move "
            f"{', '.join(held)} away"
        )
    if held and configured and not _replaceable(directory, kind):
        raise ConfigError(
            f"{what} {str(directory)!r} already holds {FILES[kind][0]}, which is neither an AdapterHub {kind} nor one "
            f"that save_{kind} wrote (another library's file of that name, such as a PEFT adapter's, or your own); we "
            "never overwrite a file we did not write, even with overwrite=True: choose another folder"
        )
    check_not_model_folder(directory, what, kind)  # before overwrite=True is suggested for an earlier export there
    _check_not_hiding(directory, kind, what)
    if held and not overwrite:
        article = "an" if kind[0] in "aeiou" else "a"
        if not configured:
            whose = f"{article} {kind} whose export was interrupted"
        elif is_adapterhub_dir(directory, kind):
            whose = f"{article} AdapterHub {kind}"
        else:
            whose = f"{article} {kind} saved by save_{kind}"
        raise ConfigError(
            f"{what} {str(directory)!r} already holds {', '.join(held)} of {whose}, which may not be ours (an export "
            "and a download look alike); pass overwrite=True to replace them, or choose another folder"
        )
    config_name, safe_name, bin_name = FILES[kind]
    stale = directory / (bin_name if use_safetensors else safe_name)
    stale_is_ours = held and _belongs_to_replaced(directory, kind, stale.name)
    if not use_safetensors and os.path.lexists(stale) and not stale_is_ours:
        raise ConfigError(
            f"{what} {str(directory)!r} holds {safe_name}, which is not part of the {kind} being replaced (nothing "
            f"we wrote says it is ours); a .bin export beside it would be hidden, as loaders read {safe_name} first, "
            f"and we never delete a file we did not write: export with use_safetensors=True, move {safe_name} away, "
            "or choose another folder"
        )
    directory = check_writable_folder(directory, what, writes=FILES[kind], ours=lambda _: overwrite)
    payload = {k: v.detach().to("cpu").contiguous().clone() for k, v in tensors.items()}
    if use_safetensors:
        files = {directory / safe_name: save_safetensors_bytes(payload, metadata={"format": "pt"})}
    else:
        buffer = io.BytesIO()
        torch.save(payload, buffer)
        files = {directory / bin_name: buffer.getvalue()}
    files[directory / config_name] = json_text(dict(document)).encode("utf-8")
    atomic_write_files(files, pending=directory / pending_name(kind))  # the format has no digest to tell a mix
    if stale_is_ours and os.path.isfile(stale) and not os.path.islink(stale):
        stale.unlink()
    return directory


def _belongs_to_replaced(directory: Path, kind: str, name: str) -> bool:
    """Whether the file `name` in `directory` is part of the `kind` an export with overwrite=True replaces, so that
    it may be removed once the new files are in place: every file of AdapterHub's names is, beside an AdapterHub
    config or after an interrupted export of ours; beside a config that save_<kind> wrote, only the weights file
    save_<kind> writes is (a .bin there is someone else's: save_<kind> never writes one)."""
    if not _replaceable(directory, kind):
        return False
    return not is_our_piece_config(directory / FILES[kind][0], kind) or name == piece_weights_name(kind)
