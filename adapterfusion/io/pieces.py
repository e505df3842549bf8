"""Save and load one piece (adapter, fusion or head) as `<kind>.safetensors` + `<kind>_config.json`.

The JSON records the library version and the base encoder's type, hidden size and layer count, so a piece
loaded into an incompatible encoder fails with a message that says which value differs.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_safetensors_bytes
from safetensors.torch import save as save_safetensors_bytes

from adapterfusion._validation import check_name, naming_file
from adapterfusion._version import __version__
from adapterfusion.errors import IncompatibleModelError, SerializationError
from adapterfusion.io.atomic import atomic_write_bytes, atomic_write_json
from adapterfusion.io.paths import check_writable_folder

PIECE_FORMAT = "adapterfusion"
PIECE_FORMAT_VERSION = 1
PIECE_KINDS = ("adapter", "fusion", "head")


@dataclass(frozen=True)
class EncoderFingerprint:
    """What a saved piece must agree with to be loaded into an encoder."""

    model_type: str
    hidden_size: int
    num_layers: int
    name_or_path: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"model_type": self.model_type, "hidden_size": self.hidden_size,
                "num_layers": self.num_layers, "name_or_path": self.name_or_path}

    def check_compatible(self, saved: Mapping[str, Any], source: Path, check_layers: bool = True) -> None:
        for field in ("model_type", "hidden_size") + (("num_layers",) if check_layers else ()):
            if field in saved and saved[field] != getattr(self, field):
                raise IncompatibleModelError(
                    f"{source} was saved for an encoder with {field}={saved[field]!r}, but this encoder has "
                    f"{field}={getattr(self, field)!r} (saved from {saved.get('name_or_path') or 'an unnamed model'}); "
                    "load it into a matching encoder"
                )


def piece_digest(directory: str | Path) -> str:
    """sha256 of a saved piece: its files' names and bytes (weights and config). A fusion run records the digests
    of the adapters it fused, so a later rebuild can tell that the store's adapters were replaced since."""
    directory = Path(directory)
    files = sorted(p for p in directory.rglob("*") if p.is_file())
    if not files:
        raise SerializationError(f"{directory} holds no saved piece files")
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(directory).as_posix().encode("utf-8") + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def config_path(directory: Path, kind: str) -> Path:
    return directory / f"{kind}_config.json"


def weights_path(directory: Path, kind: str) -> Path:
    return directory / f"{kind}.safetensors"


def piece_folder(kind: str, name: str) -> str:
    """Where a saved setup (io/setup.py) keeps piece `name` of `kind`: 'adapters/<name>' and so on."""
    return f"{kind}s/{name}"


def save_piece(
    directory: str | Path,
    kind: str,
    name: str,
    config: Mapping[str, Any],
    tensors: Mapping[str, torch.Tensor],
    encoder: EncoderFingerprint,
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Weights first, config last: a directory with a config always has the weights that go with it."""
    directory = check_writable_folder(directory, f"save_{kind}: the {kind} folder")
    payload = {k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}
    atomic_write_bytes(weights_path(directory, kind), save_safetensors_bytes(payload, metadata={"format": "pt"}))
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
    atomic_write_json(config_path(directory, kind), document)
    return directory


def read_json(path: Path) -> Any:
    """A JSON file's content; a SerializationError naming the file if it is not valid JSON."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise SerializationError(f"{path} is not valid JSON ({error}); the file is corrupt or truncated") from None


def read_piece_config(directory: str | Path, kind: str) -> dict[str, Any]:
    directory = Path(directory)
    path = config_path(directory, kind)
    if not directory.is_dir():
        raise SerializationError(f"{directory} is not a directory; pass the folder that {kind}_config.json is in")
    if not path.is_file():
        present = sorted(p.name for p in directory.iterdir())
        raise SerializationError(f"{path} is missing; the folder holds {present or 'nothing'}")
    document = read_json(path)
    if not isinstance(document, dict) or document.get("format") != PIECE_FORMAT or document.get("kind") != kind:
        raise SerializationError(f"{path} is not an adapterfusion {kind} config (format/kind fields do not match)")
    if document.get("format_version") != PIECE_FORMAT_VERSION:
        raise SerializationError(
            f"{path} has format_version {document.get('format_version')!r}; this library reads {PIECE_FORMAT_VERSION}"
        )
    for key in ("name", "config", "base_model"):
        if key not in document:
            raise SerializationError(f"{path} lacks the {key!r} field; the file is incomplete")
    with naming_file(path):  # the saved name becomes a module key, and may become a folder name
        check_name(document["name"], f"saved {kind}")
    return document


def check_finite(tensors: Mapping[str, torch.Tensor], source: str | Path) -> None:
    """Refuse weights holding NaN or inf (saved from a run that diverged): loaded, they would turn every output
    that passes through them into NaN, far from the file that caused it."""
    for key, tensor in tensors.items():
        if tensor.is_floating_point():
            bad = int((~torch.isfinite(tensor)).sum())
            if bad:
                raise SerializationError(
                    f"{source}: tensor {key!r} holds {bad} NaN or infinite value(s) of {tensor.numel()}; the piece "
                    "was saved from a run that diverged. Retrain it (lower the learning rate) or load another")


def read_piece_weights(directory: str | Path, kind: str) -> dict[str, torch.Tensor]:
    path = weights_path(Path(directory), kind)
    if not path.is_file():
        raise SerializationError(f"{path} is missing; the {kind} was not saved completely")
    try:
        return load_safetensors_bytes(path.read_bytes())
    except (SafetensorError, ValueError, RuntimeError) as error:
        raise SerializationError(
            f"{path} is not a readable safetensors file ({error}); it is corrupt or truncated") from None
