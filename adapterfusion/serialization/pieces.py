"""Our format of one piece (adapter, fusion or head): `<kind>.safetensors` + `<kind>_config.json`, and the translator
between such a folder and a `Piece` (`piece_from_folder`, `piece_to_folder`).

The JSON records the library version and the base encoder's type, hidden size and layer count, so a piece
loaded into an incompatible encoder fails with a message that says which value differs.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_safetensors_bytes
from safetensors.torch import save as save_safetensors_bytes

from adapterfusion._validation import check_bool, check_has_values, check_piece_name, naming_file, short_repr
from adapterfusion._version import __version__
from adapterfusion.adapters.config import AdapterConfig
from adapterfusion.encoder_folders import check_not_model_folder
from adapterfusion.errors import ConfigError, SavedSettingError, SerializationError
from adapterfusion.fusion.config import FusionConfig
from adapterfusion.heads.config import head_config_from_dict
from adapterfusion.interop.adapterhub_files import FILES as ADAPTERHUB_FILES
from adapterfusion.interop.adapterhub_files import is_adapterhub_dir
from adapterfusion.io.atomic import atomic_write_files, json_text
from adapterfusion.io.documents import read_bytes, read_json
from adapterfusion.io.paths import check_readable_file, check_readable_folder, check_writable_folder, out_of_reach
from adapterfusion.piece import (
    PIECE_FORMAT,
    TRAINED_DTYPES,
    EncoderFingerprint,
    Piece,
    PieceConfig,
    check_finite_weights,
    check_not_in_setup,
    is_our_piece_config,
    piece_weights_name,
    setup_part_folder,
)

PIECE_FORMAT_VERSION = 1
# The config's record of its weights file's sha256: the two files are renamed into place one after the other, and a
# save cut off between the renames leaves a config beside weights it was not written with, which loading refuses.
WEIGHTS_DIGEST = "weights_sha256"
# kind -> the config class's reader of its to_dict() form
CONFIG_READERS: dict[str, Callable[[Mapping[str, Any]], PieceConfig]] = {
    "adapter": AdapterConfig.from_dict,
    "fusion": FusionConfig.from_dict,
    "head": head_config_from_dict,
}


def piece_digest(directory: str | Path) -> str:
    """sha256 of a saved piece: its files' names and bytes (weights and config). A fusion run records the digests
    of the adapters it fused, so a later rebuild can tell that the store's adapters were replaced since."""
    directory = check_readable_folder(directory)
    files = sorted(p for p in directory.rglob("*") if p.is_file())
    if not files:
        raise SerializationError(f"{directory} holds no saved piece files")
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(directory).as_posix().encode("utf-8") + b"\0")
        digest.update(hashlib.sha256(read_bytes(path)).digest())
    return digest.hexdigest()


def config_path(directory: Path, kind: str) -> Path:
    return directory / f"{kind}_config.json"


def weights_path(directory: Path, kind: str) -> Path:
    return directory / piece_weights_name(kind)


def check_piece_folder(
    directory: str | Path, kind: str, name: str | None = None, overwrite: bool = False, setup: Path | None = None
) -> Path:
    """`directory` if save_piece may write a `kind` there (io/paths.py): a folder that is, or can be made, writable,
    whose `<kind>.safetensors` and `<kind>_config.json`, if there, are a piece we saved; with `name`, a piece of that
    name unless `overwrite` (replacing another trained piece by mistake is as bad as replacing a user's file), and
    not a HuggingFace model's folder (encoder_folders.check_not_model_folder), nor one holding an AdapterHub `kind` that
    loading would read instead (interop/adapterhub_files.py), nor a part of a saved setup other than `setup` (the
    save_pretrained writing it: check_not_in_setup). Files beside them stay."""
    check_bool(overwrite, "overwrite")
    check_not_in_setup(directory, kind, setup)
    directory = check_writable_folder(
        directory,
        f"save_{kind}: the {kind} folder",
        writes=(weights_path(Path(), kind).name, config_path(Path(), kind).name),
        ours=lambda folder: holds_our_piece(folder, kind),
    )
    check_not_model_folder(directory, f"save_{kind}: the {kind} folder", kind)
    if is_adapterhub_dir(directory, kind):  # a fusion: AdapterHub's files have other names than ours
        config = ADAPTERHUB_FILES[kind][0]
        raise ConfigError(
            f"save_{kind}: the {kind} folder {str(directory)!r} holds an AdapterHub {kind} ({config}); load_{kind} of "
            f"that folder reads it first, so the {kind} saved beside it would be hidden without a word. Save the "
            f"{kind} into another folder (each piece goes into a folder of its own)"
        )
    saved = saved_piece_name(directory, kind)
    if name is not None and saved is not None and saved != name and not overwrite:
        raise ConfigError(
            f"save_{kind}: the {kind} folder {str(directory)!r} already holds the {kind} {saved!r}; saving {name!r} "
            f"there would replace it. Choose another folder, or pass overwrite=True to replace {saved!r}"
        )
    return directory


def check_format_version(document: Mapping[str, Any], path: Path, reads: int) -> None:
    """SerializationError unless the saved `document` (a piece config, a setup index) has the format_version this
    library `reads`; one above it was written by a newer adapterfusion, which the message names, with the fix."""
    version = document.get("format_version")
    if version == reads and not isinstance(version, bool):
        return
    newer = isinstance(version, int) and not isinstance(version, bool) and version > reads
    raise SerializationError(
        f"{path} has format_version {version!r}; this library reads {reads}"
        + (
            f": it was saved by a newer adapterfusion ({document.get('library_version') or 'version not recorded'}, "
            f"this is {__version__}); upgrade adapterfusion to load it"
            if newer
            else ""
        )
    )


def newer_library(document: Mapping[str, Any]) -> str | None:
    """The library_version a saved `document` records where it is newer than this adapterfusion, else None (older,
    the same, or none that reads as a version)."""
    from packaging.version import InvalidVersion, Version

    saved = document.get("library_version")
    try:
        return saved if isinstance(saved, str) and Version(saved) > Version(__version__) else None
    except InvalidVersion:
        return None


def saved_piece_name(directory: Path, kind: str) -> str | None:
    """The name of the `kind` saved in `directory` (None if none of ours is, or its name is unreadable)."""
    if not holds_our_piece(directory, kind):
        return None
    try:
        name = json.loads(config_path(directory, kind).read_text(encoding="utf-8")).get("name")
    except (OSError, ValueError):
        return None
    return name if isinstance(name, str) else None


def holds_our_piece(directory: Path, kind: str) -> bool:
    """Whether `directory` holds a `kind` config that save_piece wrote (a regular file: a device is never read)."""
    path = config_path(directory, kind)
    if not os.path.isfile(path):  # also when this user may not look into `directory`
        return False
    return is_our_piece_config(path, kind)


def piece_folder(kind: str, name: str) -> str:
    """Where a saved setup (serialization/setup_index.py) keeps piece `name` of `kind`: 'adapters/<name>' and so on."""
    return f"{setup_part_folder(kind)}/{name}"


def save_piece(
    directory: str | Path,
    kind: str,
    name: str,
    config: Mapping[str, Any],
    tensors: Mapping[str, torch.Tensor],
    encoder: EncoderFingerprint,
    extra: Mapping[str, Any] | None = None,
    overwrite: bool = False,
) -> Path:
    """Both files as one write (io/atomic.py atomic_write_files): a failure leaves the earlier save as it was, and a
    retry works. `overwrite` lets it replace a piece of another name saved there."""
    directory = check_piece_folder(directory, kind, name, overwrite)
    atomic_write_files(piece_files(directory, kind, name, config, tensors, encoder, extra))
    return directory


def piece_files(
    directory: Path,
    kind: str,
    name: str,
    config: Mapping[str, Any],
    tensors: Mapping[str, torch.Tensor],
    encoder: EncoderFingerprint,
    extra: Mapping[str, Any] | None = None,
) -> dict[Path, bytes]:
    """The bytes of a piece's two files, config first: renamed in that order, a save cut off between the renames
    leaves our config (so a retry may write there) beside weights that its digest refuses."""
    check_has_values(tensors.values(), f"{kind} {name!r} has weights", "there is nothing to save")
    check_finite_weights(tensors, kind, name, "the save")
    weights = safetensors_bytes(tensors)
    document = {
        "format": PIECE_FORMAT,
        "format_version": PIECE_FORMAT_VERSION,
        "kind": kind,
        "library_version": __version__,
        "name": name,
        "config": dict(config),
        "base_model": encoder.to_dict(),
    }
    document.update(extra or {})
    document[WEIGHTS_DIGEST] = hashlib.sha256(weights).hexdigest()
    text = json_text(document)
    return {config_path(directory, kind): text.encode("utf-8"), weights_path(directory, kind): weights}


# The config file of each kind of piece, ours and AdapterHub's (which names a fusion's otherwise).
_KIND_OF_CONFIG = {
    "adapter_config.json": "adapter",
    "fusion_config.json": "fusion",
    "adapter_fusion_config.json": "fusion",
    "head_config.json": "head",
}


def _what_is_there(kind: str, present: list[str]) -> str:
    """What a folder without the `kind` config holds, naming the loader of the piece it holds instead (a fusion's
    folder passed to load_adapter said only that adapter_config.json was missing)."""
    others = sorted({_KIND_OF_CONFIG[name] for name in present if _KIND_OF_CONFIG.get(name, kind) != kind})
    held = f"the folder holds {present or 'nothing'}"
    if len(others) == 1:
        article = "an" if kind == "adapter" else "a"
        return f"{held}: a saved {others[0]}, not {article} {kind}; load it with load_{others[0]}"
    return held


def read_piece_config(directory: str | Path, kind: str) -> dict[str, Any]:
    directory = Path(directory)
    path = config_path(directory, kind)
    if not os.path.isdir(directory) and not out_of_reach(directory):  # else said by check_readable_folder
        raise SerializationError(f"{directory} is not a directory; pass the folder that {kind}_config.json is in")
    present = sorted(p.name for p in check_readable_folder(directory).iterdir())
    check_readable_file(path, f"save the {kind} again, or load another folder", missing=_what_is_there(kind, present))
    document = read_json(path)
    if isinstance(document, dict) and "peft_type" in document and document.get("format") != PIECE_FORMAT:
        # PEFT names its config adapter_config.json too; "format/kind fields do not match" did not say whose it is
        raise SerializationError(
            f"{path} is a PEFT adapter's config (peft_type={short_repr(document['peft_type'])}), not an adapter "
            f"that adapterfusion or AdapterHub saved: load_{kind} reads those two formats only. Load a PEFT adapter "
            "with peft (PeftModel.from_pretrained), or pass the folder of an adapter saved by save_adapter or "
            "AdapterHub"
        )
    if not isinstance(document, dict) or document.get("format") != PIECE_FORMAT or document.get("kind") != kind:
        raise SerializationError(f"{path} is not an adapterfusion {kind} config (format/kind fields do not match)")
    check_format_version(document, path, PIECE_FORMAT_VERSION)
    for key in ("name", "config", "base_model"):
        if key not in document:
            raise SerializationError(f"{path} lacks the {key!r} field; the file is incomplete")
    with naming_file(path, "name"):  # the saved name becomes a module key, and may become a folder name
        check_piece_name(document["name"], f"saved {kind}")
    return document


def check_weights(tensors: Mapping[str, torch.Tensor], source: str | Path) -> None:
    """Refuse weights that cannot be trained ones: integer, bool or complex tensors (loading would cast them silently),
    float8 or other storage-only floating-point dtypes (torch computes nothing in them, not even isfinite) and weights
    holding NaN or inf (saved from a run that diverged: loaded, they would turn every output that passes
    through them into NaN, far from the file that caused it), or on the meta device (a pickle saved from a model
    with no values keeps them there whatever map_location says: torch would fail reading them)."""
    for key, tensor in tensors.items():
        if tensor.is_meta:
            raise SerializationError(
                f"{source}: tensor {key!r} is on the meta device, which holds shapes but no values: the file was saved "
                "from a model built without weights (device='meta' or init_empty_weights). Save the piece again from "
                "a model with real weights"
            )
        dtype = str(tensor.dtype).removeprefix("torch.")
        if tensor.is_floating_point() and tensor.dtype not in TRAINED_DTYPES:
            raise SerializationError(
                f"{source}: tensor {key!r} has dtype {dtype}, a storage format that weights are neither trained nor "
                "loaded in (float32, float16, bfloat16 and float64 are); convert the file's tensors to one of those "
                "(e.g. tensor.to(torch.float32)), or save the piece again from the trained model"
            )
        if not tensor.is_floating_point():
            raise SerializationError(
                f"{source}: tensor {key!r} has dtype {dtype}, but weights are "
                "floating point (float32, float16, bfloat16 or float64); the file is damaged or was not written as "
                "an adapter, fusion or head. Save the piece again"
            )
        bad = int((~torch.isfinite(tensor)).sum())
        if bad:
            raise SerializationError(
                f"{source}: tensor {key!r} holds {bad} NaN or infinite value(s) of {tensor.numel()}; the piece "
                "was saved from a run that diverged. Retrain it (lower the learning rate) or load another"
            )


def read_piece_weights(directory: str | Path, kind: str, digest: object = None) -> dict[str, torch.Tensor]:
    """The weights saved in `directory`; with `digest` (the config's WEIGHTS_DIGEST), refused unless they are the
    ones that config was saved with (configs saved before the digest was recorded have none)."""
    path = check_readable_file(
        weights_path(Path(directory), kind),
        f"save the {kind} again, or load another folder",
        missing=f"the {kind} was not saved completely",
    )
    data = read_bytes(path, f"save the {kind} again, or load another folder")
    try:
        tensors = load_safetensors_bytes(data)
    except (SafetensorError, ValueError, RuntimeError) as error:
        raise SerializationError(
            f"{path} is not a readable safetensors file ({error}); it is corrupt or truncated"
        ) from None
    if digest is not None and digest != hashlib.sha256(data).hexdigest():
        check_weights(tensors, directory)  # weights that cannot be trained ones have the more specific message
        raise SerializationError(
            f"{path} is not the weights file that {config_path(Path(directory), kind).name} was saved with (its "
            f"sha256 differs from the config's {WEIGHTS_DIGEST}): a save there was cut off between its two files, "
            "or one was replaced. Save the piece again"
        )
    return tensors


# ---- the translator: folder <-> Piece ---------------------------------------------------------------------------
def piece_from_folder(directory: str | Path, kind: str, encoder: EncoderFingerprint) -> Piece:
    """The `kind` saved in `directory` by piece_to_folder, refused if it was saved for an encoder unlike `encoder`."""
    directory = Path(directory)
    document = read_piece_config(directory, kind)
    # A head reads only the final hidden states: the layer count need not match.
    encoder.check_compatible(document["base_model"], directory, check_layers=kind != "head")
    adapters = document.get("adapters") if kind == "fusion" else []
    if (
        not isinstance(adapters, list)
        or (kind == "fusion" and not adapters)
        or not all(isinstance(a, str) for a in adapters)
    ):
        raise SerializationError(
            f"{directory}: the fusion config's 'adapters' is {adapters!r}; expected a non-empty list of adapter names"
        )
    try:
        with naming_file(config_path(directory, kind), "config"):
            config = CONFIG_READERS[kind](document["config"])
    except SavedSettingError as error:
        newer = newer_library(document)
        if newer is None:
            raise
        raise SavedSettingError(
            error.path,
            f"{error.reason}. It was saved by adapterfusion {newer}, newer than this {__version__}, which may know "
            "settings this one does not: upgrade adapterfusion to load it",
            error.key,
        ) from None
    weights = read_piece_weights(directory, kind, document.get(WEIGHTS_DIGEST))
    return Piece(kind, document["name"], config, weights, tuple(adapters), source=str(directory))


def piece_to_folder(piece: Piece, directory: str | Path, encoder: EncoderFingerprint, overwrite: bool = False) -> Path:
    """Save `piece` as save_piece lays it out, recording `encoder` (and a fusion's adapters) in its config."""
    return save_piece(
        directory, piece.kind, piece.name, piece.config.to_dict(), piece.tensors, encoder, _extra(piece), overwrite
    )


def safetensors_bytes(tensors: Mapping[str, torch.Tensor]) -> bytes:
    """`tensors` as the bytes of a safetensors file (on the CPU, contiguous, as the format stores them), for the
    atomic writes of a piece's weights and of the tensors a setup saves beside its pieces."""
    payload = {key: tensor.detach().to("cpu").contiguous() for key, tensor in tensors.items()}
    return save_safetensors_bytes(payload, metadata={"format": "pt"})


def piece_to_files(piece: Piece, directory: Path, encoder: EncoderFingerprint) -> dict[Path, bytes]:
    """The files piece_to_folder would write, for a caller that writes several pieces as one (a whole setup)."""
    return piece_files(directory, piece.kind, piece.name, piece.config.to_dict(), piece.tensors, encoder, _extra(piece))


def _extra(piece: Piece) -> dict[str, Any] | None:
    return {"adapters": list(piece.adapters)} if piece.kind == "fusion" else None
