"""What a saved setup is, the unit that save_pretrained, from_pretrained and push_to_hub move: one folder

    adapterfusion_setup.json   the index: format version, base encoder fingerprint, pieces, active setup, provenance
    adapters/<name>/           each piece as save_adapter, save_fusion and save_head write it (serialization/pieces.py)
    fusions/<name>/
    heads/<name>/
    README.md                  the model card, added when pushed (serialization/model_card.py)

Here are the index's format and its reader (read_index, check_listed_folders) and the active setup it records
(ActiveSetup), which saving (setup_save.py), loading (setup_load.py) and pushing (setup_push.py) share. Like them,
this module gets the model as an argument and never imports model.py.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from adapterfusion._validation import check_name, naming_file, reject_unknown_keys, short_repr
from adapterfusion.errors import SerializationError
from adapterfusion.io.documents import read_json
from adapterfusion.io.paths import check_readable_file, check_readable_folder, describe
from adapterfusion.piece import PIECE_KINDS, SETUP_FILE
from adapterfusion.serialization.pieces import check_format_version, piece_folder

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel

SETUP_FORMAT = "adapterfusion-setup"
SETUP_FORMAT_VERSION = 1
# The wrapped task model's own output layer (GPT2ForSequenceClassification's score), which no piece holds, and the
# base_model entry recording its file's digest.
OWN_HEAD_FILE = "own_head.safetensors"
OWN_HEAD_DIGEST = "own_head_sha256"
# Each piece's entry in the index records the sha256 of its config (which records its weights'): a save over an
# earlier setup renames its files into place one after another, and one cut off between the renames would otherwise
# leave a mix of old and new pieces that loads without a word.
CONFIG_DIGEST = "config_sha256"


@dataclass(frozen=True)
class ActiveSetup:
    """What runs: `activate`'s choice, each fusion's mask and the fusion controls. Restored after the pieces load,
    so a restored model computes what the saved one did."""

    adapter: str | None = None
    fusion: str | None = None
    head: str | None = None
    skip_layers: tuple[int, ...] = ()
    fusion_masks: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    fusion_step: int = 0
    fusion_implementation: str = "fast"

    @classmethod
    def of(cls, model: AdaptedModel) -> ActiveSetup:
        """The saved part of `model.state` (injection/state.py; not the transient parallel routes), masks in the
        order the fusions were added."""
        state = model.state
        masks = {fusion: state.fusion_masks[fusion] for fusion in model.fusion_names if fusion in state.fusion_masks}
        return cls(
            state.adapter,
            state.fusion,
            state.head,
            state.skip_layers,
            masks,
            state.fusion_step,
            state.fusion_implementation,
        )

    def restricted(self, chosen: Mapping[str, Sequence[str]]) -> ActiveSetup:
        """The part that refers to the chosen pieces only."""
        return dataclasses.replace(
            self,
            adapter=self.adapter if self.adapter in chosen["adapter"] else None,
            fusion=self.fusion if self.fusion in chosen["fusion"] else None,
            head=self.head if self.head in chosen["head"] else None,
            fusion_masks={f: keep for f, keep in self.fusion_masks.items() if f in chosen["fusion"]},
        )

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data.update(skip_layers=list(self.skip_layers), fusion_masks={f: list(k) for f, k in self.fusion_masks.items()})
        return data

    @classmethod
    def from_dict(cls, data: Any, path: Path) -> ActiveSetup:
        if not isinstance(data, Mapping) or not isinstance(data.get("fusion_masks", {}), Mapping):
            raise SerializationError(f"{path}: 'active' must be an object with a 'fusion_masks' object")
        with naming_file(path):
            reject_unknown_keys(dict(data), [f.name for f in dataclasses.fields(cls)], "the active setup")
        for key in ("adapter", "fusion", "head"):  # activate(adapter=3) was refused as 'an adapter and a fusion'
            if data.get(key) is not None and not isinstance(data[key], str):
                raise SerializationError(
                    f"{path}: active.{key}={data[key]!r} has type {type(data[key]).__name__}; expected the name of a "
                    f"saved {key} or null. The file is damaged or was edited by hand: save the setup again"
                )
        lists = [data.get("skip_layers", []), *data.get("fusion_masks", {}).values()]
        if not all(isinstance(value, list) for value in lists):  # tuple("ab") would be the mask ('a', 'b')
            raise SerializationError(f"{path}: 'skip_layers' and each fusion mask must be lists")
        masks = {fusion: tuple(keep) for fusion, keep in data.get("fusion_masks", {}).items()}
        try:
            return cls(**{**data, "skip_layers": tuple(data.get("skip_layers", [])), "fusion_masks": masks})
        except TypeError as error:
            raise SerializationError(f"{path}: 'active' holds values of the wrong kind ({error})") from None

    def check_listed(self, pieces: Sequence[Mapping[str, Any]], path: Path) -> None:
        """Refuse an active piece the index does not list: loading would blame the model ('no fusion named ...
        is loaded; add it with add_fusion'), not the file."""
        active = [("adapter", self.adapter), ("fusion", self.fusion), ("head", self.head)]
        active += [("fusion", fusion) for fusion in self.fusion_masks]
        for kind, name in active:
            listed = [piece["name"] for piece in pieces if piece["kind"] == kind]
            if name is not None and name not in listed:
                raise SerializationError(
                    f"{path}: the active setup names the {kind} {name!r}, which its 'pieces' do not list (saved "
                    f"{kind}s: {listed or 'none'}); the file is damaged or was edited by hand: save the setup again"
                )

    def apply(self, model: AdaptedModel) -> None:
        for fusion, keep in self.fusion_masks.items():
            model.set_fusion_mask(fusion, list(keep))
        model.set_fusion_step(self.fusion_step)
        model.set_fusion_implementation(self.fusion_implementation)
        model.activate(adapter=self.adapter, fusion=self.fusion, head=self.head, skip_layers=self.skip_layers)


def read_index(folder: Path) -> dict[str, Any]:
    present = sorted(p.name for p in check_readable_folder(folder).iterdir()) if os.path.isdir(folder) else []
    path = check_readable_file(
        folder / SETUP_FILE,
        "it must be the index that save_pretrained wrote: save the setup again",
        missing=f"{folder} is not a setup saved by save_pretrained (it holds {present or 'nothing'}); "
        "load a single piece with load_adapter, load_fusion or load_head",
    )
    index = read_json(path)
    if not isinstance(index, dict) or index.get("format") != SETUP_FORMAT:
        raise SerializationError(f"{path} is not an adapterfusion setup index (its 'format' is not {SETUP_FORMAT!r})")
    check_format_version(index, path, SETUP_FORMAT_VERSION)
    pieces = index.get("pieces")
    if not isinstance(pieces, list) or not isinstance(index.get("base_model"), dict):
        raise SerializationError(f"{path} lacks a 'base_model' object or a 'pieces' list of {list(PIECE_KINDS)}")
    for piece in pieces:
        if not isinstance(piece, dict) or piece.get("kind") not in PIECE_KINDS:
            shown = f"of kind {piece.get('kind')!r}" if isinstance(piece, dict) else short_repr(piece)
            raise SerializationError(
                f"{path} lists a piece {shown} in 'pieces', where each is {{'kind': one of {list(PIECE_KINDS)}, "
                "'name': ...}; the file is damaged or was edited by hand: save the setup again"
            )
    with naming_file(path):  # a saved name becomes a folder name below `folder`
        for piece in pieces:
            check_name(piece.get("name"), f"saved {piece['kind']}")
    listed = [(piece["kind"], piece["name"]) for piece in pieces]
    twice = sorted({entry for entry in listed if listed.count(entry) > 1})
    if twice:  # the second load was refused as a piece the model already holds, blaming the model
        raise SerializationError(
            f"{path} lists the {', '.join(f'{kind} {name!r}' for kind, name in twice)} more than once in 'pieces'; "
            "the file is damaged or was edited by hand: save the setup again"
        )
    return index


def check_listed_folders(folder: Path, index: Mapping[str, Any]) -> None:
    """SerializationError naming the index and the piece where a piece it lists has no folder (removed, renamed, or
    its name's case changed by a copy through a case-insensitive file system): loading it was refused as a folder
    that is 'nor a Hub id', which says nothing of the setup."""
    path, listed = folder / SETUP_FILE, [(piece["kind"], piece["name"]) for piece in index["pieces"]]
    for kind, name in listed:
        where = folder / piece_folder(kind, name)
        if where.is_dir():
            continue
        if os.path.lexists(where):
            raise SerializationError(
                f"{path} lists the {kind} {name!r}, whose folder {piece_folder(kind, name)} is not a folder in the "
                f"setup ({describe(where)}); the setup is damaged: copy it again whole, or save it again"
            )
        parent = where.parent
        held = sorted(p.name for p in parent.iterdir()) if parent.is_dir() else []
        unlisted = [other for other in held if (kind, other) not in listed]
        same = [other for other in unlisted if other.casefold() == name.casefold()]
        hint = (
            f" ({same[0]!r} differs from it only in case: rename it back to {name!r})"
            if same
            else f" (its {parent.name}/ holds {unlisted}, which the index does not list: renamed?)"
            if unlisted
            else ""
        )
        raise SerializationError(
            f"{path} lists the {kind} {name!r}, but the setup holds no folder {piece_folder(kind, name)}{hint}; the "
            "setup is incomplete: copy it again whole, or save it again with save_pretrained"
        )
