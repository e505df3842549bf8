"""Piece: one adapter, fusion or head as a plain value, the unit that file formats translate and the model installs.

A Piece holds tensors and a config, no module and no file format. `AdaptedModel.export_piece` / `install_piece` move
pieces out of and into a model; serialization/pieces.py (our folders) and interop/adapterhub.py (AdapterHub's)
translate folders to pieces and back, knowing the encoder only through an `EncoderLayout`; serialization/formats.py
picks the translator. So no format module imports the model, and the model knows no format.

An adapter's or fusion's tensors are keyed `<site key>.<parameter>`, e.g. `layer.3.output.down.weight`; `site_key`
(injection/architectures.py) is the one place that spells a site. A head's tensors are its PredictionHead's state dict.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import json
import os
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from adapterfusion._validation import check_piece_name
from adapterfusion.adapters.config import AdapterConfig
from adapterfusion.errors import BaseModelMismatchWarning, ConfigError, IncompatibleModelError, SerializationError
from adapterfusion.fusion.config import FusionConfig
from adapterfusion.heads.config import HeadConfig
from adapterfusion.injection.architectures import ArchitectureSpec, SiteKind

PIECE_KINDS = ("adapter", "fusion", "head")
WEIGHTS_SAMPLE = "weights_sample_sha256"  # base_model's record of EncoderFingerprint.weights_sample
PIECE_FORMAT = "adapterfusion"  # the "format" field of our piece configs; AdapterHub's readers refuse it by that


SETUP_FILE = "adapterfusion_setup.json"  # a saved setup's index (serialization/setup_index.py)


def setup_part_folder(kind: str) -> str:
    """The folder of a saved setup that holds its pieces of `kind` ('adapters', 'fusions', 'heads')."""
    return f"{kind}s"


def setup_holding(directory: str | os.PathLike) -> Path | None:
    """The saved setup (a folder holding SETUP_FILE) that `directory` is, or lies inside one of the piece folders of
    (adapters/, fusions/, heads/), symlinks followed, and on a case-insensitive file system however the case of
    those folders is written ('Adapters/x'); None for any other folder."""
    try:
        path = Path(os.path.realpath(directory))
    except ValueError:  # a NUL in the path, which no folder has: whoever opens it says so
        return None
    for level, folder in enumerate((path, *path.parents)):
        if os.path.isfile(folder / SETUP_FILE) and (level == 0 or _is_part_folder(folder, path.relative_to(folder))):
            return folder
    return None


def _is_part_folder(setup: Path, inside: Path) -> bool:
    """Whether `inside` (a path relative to the setup folder `setup`) lies in one of its piece folders."""
    first = inside.parts[0]
    for part in (setup_part_folder(kind) for kind in PIECE_KINDS):
        if first == part:
            return True
        if first.casefold() == part and (setup / first).is_dir() and (setup / part).is_dir():
            return os.path.samefile(setup / first, setup / part)  # one folder: the file system ignores case
    return False


def check_not_in_setup(directory: str | Path, kind: str, setup: Path | None = None, writer: str = "") -> None:
    """Refuse to save a `kind` into a saved setup's folder or one of its piece folders (adapters/, fusions/, heads/),
    unless that setup is `setup`, the save_pretrained writing it: the setup's index lists its pieces with the digest of
    each one's config, so a piece saved over one of them leaves a setup that from_pretrained refuses (the old piece
    gone), and one saved beside them a folder the index does not know. `writer`: what writes the piece, save_<kind>
    unless told (export_adapterhub: AdapterHub's files there break the setup the same way)."""
    if not isinstance(directory, (str, os.PathLike)):  # not a path: check_writable_folder says so
        return
    held = setup_holding(directory)
    if held is None or (setup is not None and held == Path(os.path.realpath(setup))):
        return
    where = "is the saved setup" if Path(os.path.realpath(directory)) == held else "is part of the saved setup"
    writer = writer or f"save_{kind}"
    raise ConfigError(
        f"{writer}: the {kind} folder {str(directory)!r} {where} {str(held)!r}, whose {SETUP_FILE} lists its "
        "pieces and the digest of each; saving a piece there would leave the setup disagreeing with its index (or "
        f"replace one of its pieces). Save the {kind} into a folder of its own outside the setup; to change "
        "the setup, load it (AdaptedModel.from_pretrained), change the model and save_pretrained it again"
    )


def piece_weights_name(kind: str) -> str:
    """The weights file save_<kind> writes beside `<kind>_config.json` (an adapter's is AdapterHub's name too)."""
    return f"{kind}.safetensors"


def is_our_piece_config(path: Path, kind: str) -> bool:
    """Whether `path` is a `kind` config that save_<kind> wrote (read as text: a file that is not one, or cannot be
    read, is not)."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(document, dict) and document.get("format") == PIECE_FORMAT and document.get("kind") == kind


def param_key(site: str, param: str) -> str:
    """A site's parameter in piece tensors: `<site key>.<parameter>`."""
    return f"{site}.{param}"


def split_param_key(key: str) -> tuple[str, str]:
    """`layer.<i>.<position>.<parameter>` -> (site key, parameter); a site key has exactly three dotted parts."""
    parts = key.split(".", 3)
    return ".".join(parts[:3]), parts[3] if len(parts) > 3 else ""


def by_site(tensors: Mapping[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    """Piece tensors grouped per site key (in order of first appearance), each keyed by parameter."""
    grouped: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        site, param = split_param_key(key)
        grouped.setdefault(site, {})[param] = value
    return grouped


@dataclass(frozen=True)
class EncoderFingerprint:
    """What a saved piece must agree with to be loaded into an encoder."""

    model_type: str
    hidden_size: int
    num_layers: int  # an encoder-decoder's count both stacks: its layers are numbered on from the encoder's
    name_or_path: str = ""
    # An encoder-decoder's decoder layers (None: one stack). With num_layers it fixes where the encoder's end: a piece
    # saved from 2 + 2 layers must not load into 3 + 1, where its decoder layer 0 would land in encoder layer 2.
    decoder_layers: int | None = None
    # encoders.encoder_sample_digest of the weights, where taken (a model's layout(): what a saved piece records and
    # is compared with when loaded); "" where not
    weights_sample: str = ""

    def to_dict(self) -> dict[str, Any]:
        decoder = {"decoder_layers": self.decoder_layers} if self.decoder_layers is not None else {}
        sample = {WEIGHTS_SAMPLE: self.weights_sample} if self.weights_sample else {}
        return {
            "model_type": self.model_type,
            "hidden_size": self.hidden_size,
            "num_layers": self.num_layers,
            **decoder,
            "name_or_path": self.name_or_path,
            **sample,
        }

    def check_compatible(self, saved: Mapping[str, Any], source: Path, check_layers: bool = True) -> None:
        """Refuse a piece saved for another encoder: model type, hidden size and (`check_layers`) its layers, and an
        encoder-decoder's decoder layers where the file records them (files saved before it was recorded do not)."""
        _check_saved_fingerprint(saved, source)
        layers = ("num_layers", "decoder_layers") if check_layers else ()
        for field_name in ("model_type", "hidden_size", *layers):
            if field_name in saved and saved[field_name] != getattr(self, field_name):
                raise IncompatibleModelError(
                    f"{source} was saved for a model with {field_name}={saved[field_name]!r}, but this model has "
                    f"{field_name}={getattr(self, field_name)!r} (saved from "
                    f"{saved.get('name_or_path') or 'an unnamed model'}); load it into a matching model"
                )
        if not _CHECK_WEIGHTS_SAMPLE.get():
            return
        recorded = saved.get(WEIGHTS_SAMPLE)
        if self.weights_sample and isinstance(recorded, str) and recorded and recorded != self.weights_sample:
            saved_name = str(saved.get("name_or_path") or "")
            names = f" ({saved_name!r}; this one: {self.name_or_path!r})" if saved_name != self.name_or_path else ""
            warnings.warn(
                f"{source} was saved from an encoder with other weights than this one{names}, of the same "
                "architecture and sizes: it was trained for those weights and may not fit these. Load it into the "
                "encoder it was saved from (this is expected if you loaded that encoder in another precision)",
                BaseModelMismatchWarning,
                stacklevel=2,
            )


_CHECK_WEIGHTS_SAMPLE: contextvars.ContextVar[bool] = contextvars.ContextVar("check_weights_sample", default=True)


@contextlib.contextmanager
def weights_sample_unchecked() -> Iterator[None]:
    """Pieces loaded inside are not compared by their weights sample: a whole setup's loader has compared the
    encoder's weights once, for all of them (a warnings filter would also reset Python's once-per-place record)."""
    token = _CHECK_WEIGHTS_SAMPLE.set(False)
    try:
        yield
    finally:
        _CHECK_WEIGHTS_SAMPLE.reset(token)


def _check_saved_fingerprint(saved: object, source: Path) -> None:
    """A saved fingerprint of the wrong shape is a damaged file, not another encoder: say which field is wrong."""
    if not isinstance(saved, Mapping):
        raise SerializationError(f"{source}: base_model has type {type(saved).__name__}; expected a JSON object")
    for field_name, expected in (
        ("model_type", str),
        ("hidden_size", int),
        ("num_layers", int),
        ("decoder_layers", int),
    ):
        if field_name == "decoder_layers" and saved.get(field_name) is None:
            continue
        value = saved.get(field_name, expected())
        if isinstance(value, bool) or not isinstance(value, expected):
            raise SerializationError(
                f"{source}: base_model.{field_name}={value!r} has type {type(value).__name__}; expected "
                f"{'a string' if expected is str else 'an integer'}. The file is damaged or was edited by hand"
            )


@dataclass(frozen=True, eq=False)
class EncoderLayout:
    """All a translator may know of the encoder a piece comes from or goes into (AdaptedModel.layout()): its
    fingerprint, and for formats that name weights by module path (AdapterHub) where each site sits, the HF config
    their defaults come from and the pretrained LayerNorm of each site."""

    fingerprint: EncoderFingerprint
    architecture: ArchitectureSpec
    # site key -> where AdapterHub keeps the site's adapters, below the base model: 'encoder.layer.0.output'
    site_paths: Mapping[str, str]
    base_model_prefix: str  # the base model's attribute name in a task model ('bert'), '' if none
    base_model_class: str  # e.g. 'BertModel'
    config: Any  # the HF PretrainedConfig
    pretrained_layer_norms: Mapping[str, Mapping[str, torch.Tensor]]  # site key -> state dict ({} if none)

    @property
    def site_kinds(self) -> frozenset[SiteKind]:
        return frozenset({self.architecture.attention.kind, self.architecture.output.kind})


PieceConfig = AdapterConfig | FusionConfig | HeadConfig


@dataclass(frozen=True, eq=False)
class Piece:
    """One adapter, fusion or head: `tensors` keyed as the module docstring says, `adapters` the fused adapters of a
    fusion (in order). `source` names where it came from in messages; `blame`, if set, is the file every ConfigError
    raised while installing it names (AdapterHub's config, whose options decide the placement)."""

    kind: str
    name: str
    config: PieceConfig
    tensors: Mapping[str, torch.Tensor]
    adapters: tuple[str, ...] = ()
    source: str = ""
    blame: Path | None = field(default=None)

    def renamed(self, name: str | None) -> Piece:
        """The same piece under `name` (checked: it becomes a module key), or under its own name when `name` is None."""
        return self if name is None else dataclasses.replace(self, name=check_piece_name(name, self.kind))


# The dtypes weights are trained and loaded in; other floating-point ones (float8, float4) only store values.
TRAINED_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def check_finite_weights(tensors: Mapping[str, torch.Tensor], kind: str, name: str, writer: str) -> None:
    """Refuse to write weights holding NaN or inf (`writer`: 'the save', 'export_adapterhub'): loading refuses
    them (ours and AdapterHub's readers alike), so the write would put a piece that cannot be loaded in place of the
    one written there before."""
    for key, tensor in tensors.items():
        if tensor.dtype not in TRAINED_DTYPES:  # no NaN in integers; other floats are refused on load by dtype
            continue
        bad = int((~torch.isfinite(tensor)).sum())
        if bad:
            raise ConfigError(
                f"{kind} {name!r} holds {bad} NaN or infinite value(s) of {tensor.numel()} in {key!r}: its training "
                f"diverged, and loading refuses such weights, so {writer} would write a {kind} that cannot be loaded, "
                "in place of any written there before (nothing was written). Retrain it (lower the learning rate), or "
                "write one from before it diverged"
            )


class PieceHolder(Protocol):
    """What format helpers that take a model (interop's export_adapterhub / load_adapterhub) may use of it."""

    def layout(self) -> EncoderLayout: ...

    def export_piece(self, kind: str, name: str) -> Piece: ...

    def install_piece(self, piece: Piece, overwrite: bool = False, labels: Sequence[str] | None = None) -> str: ...
