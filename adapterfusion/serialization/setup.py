"""A whole AdaptedModel setup as one folder, the unit that save_pretrained, from_pretrained and push_to_hub move:

    adapterfusion_setup.json   the index: format version, base encoder fingerprint, pieces, active setup, provenance
    adapters/<name>/           each piece as save_adapter, save_fusion and save_head write it (serialization/pieces.py)
    fusions/<name>/
    heads/<name>/
    README.md                  the model card, added when pushed (serialization/model_card.py)

load_adapter/load_fusion/load_head take a piece's folder, or a setup holding one piece of that kind, either of
them local or on the Hub (`piece_source`). This module gets the model (or its class) as an argument and never
imports model.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import tempfile
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import load as load_safetensors_bytes
from torch import nn

from adapterfusion._validation import check_bool, check_name, check_names, naming_file, reject_unknown_keys, short_repr
from adapterfusion._version import __version__
from adapterfusion.encoders import (
    encoder_digest,
    load_encoder_model_and_missing,
    resolve_encoder,
    sampled_fingerprint,
    unloaded_parts,
)
from adapterfusion.errors import (
    BaseModelMismatchWarning,
    ConfigError,
    HubError,
    IncompatibleModelError,
    NameNotFoundError,
    SerializationError,
)
from adapterfusion.interop.adapterhub_files import FILES as ADAPTERHUB_FILES
from adapterfusion.io.atomic import atomic_write_files, atomic_write_text, json_text, write_new_folder
from adapterfusion.io.documents import read_bytes, read_json
from adapterfusion.io.hub import (
    OFFLINE_VARIABLES,
    HubRef,
    cache_dir,
    cached_folder,
    download,
    download_if_there,
    hub_ref,
    id_problem,
    locate,
    offline,
    token_problem,
    upload,
)
from adapterfusion.io.paths import (
    check_readable_file,
    check_readable_folder,
    check_writable_folder,
    describe,
    out_of_reach,
    path_part,
)
from adapterfusion.piece import PIECE_KINDS, SETUP_FILE, weights_sample_unchecked
from adapterfusion.serialization.model_card import is_our_card, render_model_card
from adapterfusion.serialization.pieces import (
    check_format_version,
    check_piece_folder,
    config_path,
    holds_our_piece,
    piece_folder,
    piece_to_files,
    safetensors_bytes,
    weights_path,
)
from adapterfusion.serialization.provenance import describe_origin
from adapterfusion.trainable import own_head_parameters

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
CARD_FILE = "README.md"

Names = str | Sequence[str] | None
Provenance = Mapping[str, str | os.PathLike | Mapping[str, Any]] | None


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


# ---- save ------------------------------------------------------------------------------------------------
def save_pretrained(
    model: AdaptedModel,
    directory: str | os.PathLike,
    *,
    adapters: Names = None,
    fusions: Names = None,
    heads: Names = None,
    provenance: Provenance = None,
    overwrite: bool = False,
) -> Path:
    """Every piece, or the named ones (with the adapters of each named fusion), and the active setup restricted to
    them, in one folder; `provenance` maps a piece name to the run folder or store entry it was trained in
    (serialization/provenance.py), for its model card. A new setup is built in a temp folder and renamed into place.
    Onto a setup saved before, every file is written first and only then renamed over the old ones, index last, so
    a failure while writing leaves the old setup whole (and one between the renames is refused on load by the
    index's digests). A save that leaves out pieces the earlier setup listed would remove them: it is refused unless
    `overwrite=True` (as save_adapter refuses to replace another adapter), and then their files are removed last.
    Nothing else in the folder is touched, and nothing is written or removed through a symlink leading out of it.
    AdaptedModel.save_pretrained."""
    check_bool(overwrite, "save_pretrained(overwrite)")
    directory = check_writable_folder(
        directory,
        "save_pretrained: the folder",
        writes=(SETUP_FILE, OWN_HEAD_FILE),
        ours=lambda folder: (folder / SETUP_FILE).is_file(),
        only_ours="a saved setup",
        built_aside=True,  # a new setup is built in a temp folder beside it (io/atomic.py replace_folder)
    )
    chosen = _chosen(model, adapters, fusions, heads)
    _refuse_case_twins(chosen)
    for kind in PIECE_KINDS:  # every piece's folder, before anything is written
        for name in chosen[kind]:
            folder = directory / piece_folder(kind, path_part(name, f"the {kind} name"))
            _check_inside(directory, folder)
            check_piece_folder(folder, kind, name, setup=directory)
    earlier = _saved_pieces(directory)
    kept = {(kind, name) for kind in PIECE_KINDS for name in chosen[kind]}
    dropped = sorted((kind, name, digest) for (kind, name), digest in earlier.items() if (kind, name) not in kept)
    if dropped and not overwrite:
        _refuse_dropping(directory, [(kind, name) for kind, name, _ in dropped])
    for kind, name, digest in dropped:  # and the folders of the earlier setup's pieces it removes
        _check_removable(directory, kind, name, digest)
    saved = {name for names in chosen.values() for name in names}
    if provenance is not None and not isinstance(provenance, Mapping):
        raise ConfigError(
            f"provenance must map piece names to run folders, store entries or dicts; got {type(provenance).__name__}"
        )
    stray = sorted(set(provenance or {}) - saved)
    if stray:
        raise ConfigError(
            f"provenance is given for {stray}, which are not saved pieces {sorted(saved)}; key it by piece name"
        )
    index: dict[str, Any] = {
        "format": SETUP_FORMAT,
        "format_version": SETUP_FORMAT_VERSION,
        "library_version": __version__,
        "base_model": {
            **model.fingerprint.to_dict(),
            "class": type(model.model).__name__,
            "weights_sha256": encoder_digest(model),
        },
        "pieces": [{"kind": kind, "name": name} for kind in PIECE_KINDS for name in chosen[kind]],
        "active": ActiveSetup.of(model).restricted(chosen).to_dict(),
        "provenance": {name: describe_origin(origin) for name, origin in (provenance or {}).items()},
    }

    if not os.path.lexists(directory):
        _save_new(model, directory, index)
        return directory
    atomic_write_files(_setup_files(model, directory, index))
    for kind, name, digest in dropped:
        _remove_saved_piece(directory, kind, name, digest)
    return directory


def _save_new(model: AdaptedModel, directory: Path, index: dict[str, Any]) -> None:
    """The setup built whole in a temp folder and renamed to `directory`, which was not there when checked. Whatever
    appeared there since (the user's folder, another save) is kept: replacing it would delete what we never saw."""
    write_new_folder(
        directory,
        lambda tmp: atomic_write_files(_setup_files(model, tmp, index)),
        "save_pretrained: the folder",
        "the save",
        "Save again: into that folder if it is empty or a saved setup, else into another one",
    )


def _refuse_case_twins(chosen: Mapping[str, Sequence[str]]) -> None:
    """Refuse two pieces of one kind whose names differ only in case ('a' and 'A'): their folders adapters/a and
    adapters/A are one folder on a case-insensitive file system (macOS, Windows), where saving, copying or
    downloading the setup writes one piece over the other, and the index then refuses the setup."""
    for kind in PIECE_KINDS:
        seen: dict[str, str] = {}
        for name in chosen[kind]:
            twin = seen.setdefault(name.casefold(), name)
            if twin != name:
                raise ConfigError(
                    f"save_pretrained: the {kind}s {twin!r} and {name!r} differ only in case, so their folders "
                    f"{piece_folder(kind, twin)} and {piece_folder(kind, name)} are one folder on a case-insensitive "
                    "file system (macOS, Windows), where one would be written over the other; save them into two "
                    f"setups ({kind}s=[...]), or add one of them again under a name that differs in more than case"
                )


def _refuse_dropping(directory: Path, dropped: Sequence[tuple[str, str]]) -> None:
    """A save that would remove pieces saved there before, without overwrite=True: updating one piece of a setup
    (save_pretrained(folder, adapters="rte")) would otherwise delete the others without a word."""
    listed = ", ".join(f"{kind} {name!r}" for kind, name in dropped)
    kinds = sorted({kind for kind, _ in dropped})
    include = ", ".join(f"{kind}s=[...]" for kind in kinds)
    raise ConfigError(
        f"save_pretrained: the setup saved in {str(directory)!r} holds the {listed}, which this save leaves out, so "
        f"their files would be removed; pass overwrite=True to replace the setup, include them ({include}, or save "
        "every piece the model holds), or save into another folder"
    )


def _setup_files(model: AdaptedModel, directory: Path, index: dict[str, Any]) -> dict[Path, bytes]:
    """Every file of the setup `index` describes, as saved in `directory`, the index last: it lists only pieces whose
    files are in place, with the digest of each piece's config."""
    files: dict[Path, bytes] = {}
    fingerprint = sampled_fingerprint(model)  # what each piece records: one loaded alone is checked by it too
    for piece in index["pieces"]:
        kind, folder = piece["kind"], directory / piece_folder(piece["kind"], piece["name"])
        written = piece_to_files(model.export_piece(kind, piece["name"]), folder, fingerprint)
        piece[CONFIG_DIGEST] = hashlib.sha256(written[config_path(folder, kind)]).hexdigest()
        files.update(written)
    own = _own_head_state(model)
    if own:  # the task model's own output layer, which the base's checkpoint does not hold as trained here
        data = safetensors_bytes(own)
        files[directory / OWN_HEAD_FILE] = data
        index["base_model"][OWN_HEAD_DIGEST] = hashlib.sha256(data).hexdigest()
    files[directory / SETUP_FILE] = json_text(index).encode("utf-8")
    return files


def _check_inside(directory: Path, folder: Path) -> None:
    """Refuse a piece folder that a symlink leads out of the setup `directory`: saving would overwrite the files
    where it leads, which are not the setup's."""
    if not _is_inside(directory, folder):
        raise ConfigError(
            f"save_pretrained: {str(folder)!r} leads out of the setup folder (to {os.path.realpath(folder)!r}) through "
            "a symlink; we write only inside the setup. Replace the link with a folder, or save into another folder"
        )


def _is_inside(directory: Path, path: Path) -> bool:
    """Whether `path`, symlinks followed, lies inside `directory` (symlinks followed too)."""
    return Path(os.path.realpath(path)).is_relative_to(os.path.realpath(directory))


def _saved_pieces(directory: Path) -> dict[tuple[str, str], str | None]:
    """(kind, name) of each piece the setup already in `directory` lists, with the digest of the config its index
    recorded (None in an index of before digests): the only pieces there that may be ours to remove; none for a new
    folder, or for an index that cannot be read (then nothing is removed)."""
    if not (directory / SETUP_FILE).is_file():
        return {}
    try:
        return {(piece["kind"], piece["name"]): piece.get(CONFIG_DIGEST) for piece in read_index(directory)["pieces"]}
    except SerializationError:
        return {}


def _ours_to_remove(directory: Path, kind: str, name: str, digest: str | None) -> list[Path]:
    """The files we wrote for the piece `kind` `name` of the setup in `directory` that are there to remove: only while
    its config is the one we wrote (ours in format, and the bytes whose `digest` the index recorded). A piece folder
    or file that is a symlink (the user shares a piece kept elsewhere) is the user's: nothing is removed through it,
    nor the link itself; nor are files put there since (an AdapterHub export of the user's under that name)."""
    folder = directory / piece_folder(kind, name)
    if os.path.islink(folder) or os.path.islink(folder.parent) or not _is_inside(directory, folder):
        return []
    config = config_path(folder, kind)
    if os.path.islink(config) or not holds_our_piece(folder, kind):
        return []
    if digest is not None and hashlib.sha256(config.read_bytes()).hexdigest() != digest:
        return []
    files = (weights_path(folder, kind), config)
    return [path for path in files if os.path.isfile(path) and not os.path.islink(path)]


def _check_removable(directory: Path, kind: str, name: str, digest: str | None) -> None:
    """Refuse, before anything is written, a save that drops a piece of the earlier setup whose files this user may
    not remove: its folder must be one this user may write in."""
    folder = directory / piece_folder(kind, name)
    if not _ours_to_remove(directory, kind, name, digest) and not out_of_reach(folder):
        return
    check_writable_folder(
        folder,
        f"save_pretrained: the setup saved there before holds the {kind} {name!r}, which this save drops, so its "
        "files must be removed; its folder",
        fix=f"change the folder's permissions, save the {kind} too, or save into another folder",
    )


def _remove_saved_piece(directory: Path, kind: str, name: str, digest: str | None) -> None:
    """Delete the two files we wrote for a piece no longer saved, then its folders if that left them empty: a file
    the user put beside them stays, and so does its folder (see _ours_to_remove)."""
    folder = directory / piece_folder(kind, name)
    try:
        for path in _ours_to_remove(directory, kind, name, digest):
            path.unlink()
    except OSError as error:  # checked up front (_check_removable); only a change since then gets here
        raise SerializationError(
            f"save_pretrained saved the setup in {directory}, but could not remove the files of the {kind} {name!r} "
            f"it no longer holds ({error.strerror}: {error.filename}); remove {str(folder)!r} yourself"
        ) from None
    for empty in (folder, folder.parent):
        with contextlib.suppress(OSError):  # not empty (or gone): what is left there is not ours to remove
            empty.rmdir()


def _chosen(model: AdaptedModel, adapters: Names, fusions: Names, heads: Names) -> dict[str, list[str]]:
    loaded = {"adapter": model.adapter_names, "fusion": model.fusion_names, "head": model.head_names}
    if adapters is None and fusions is None and heads is None:
        return loaded
    asked = {
        kind: check_names(names, f"{kind}s")
        for kind, names in zip(PIECE_KINDS, (adapters, fusions, heads), strict=True)
    }
    for kind, names in asked.items():
        missing = [name for name in names if name not in loaded[kind]]
        if missing:
            raise NameNotFoundError(f"no {kind} named {missing} is loaded; loaded {kind}s: {loaded[kind] or 'none'}")
    asked["adapter"] += [a for fusion in asked["fusion"] for a in model.fusion_setup(fusion).adapters]
    return {kind: [name for name in loaded[kind] if name in asked[kind]] for kind in PIECE_KINDS}


# ---- load ------------------------------------------------------------------------------------------------
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


def from_pretrained(
    model_class: type[AdaptedModel], base: nn.Module | str | os.PathLike, source: str | os.PathLike
) -> AdaptedModel:
    """`base` (a HuggingFace encoder, its folder or Hub id) wrapped, with every piece and the active setup that
    save_pretrained or push_to_hub wrote to `source` (a folder or a Hub id 'org/name[/subfolder]'). On any error
    the encoder is unwrapped again, so a failed load leaves a passed-in encoder as it was.
    AdaptedModel.from_pretrained (a classmethod)."""
    place = locate(source, "saved setup")
    folder = place if isinstance(place, Path) else _fetch_setup(place)
    index = read_index(folder)
    check_listed_folders(folder, index)  # before the base encoder is loaded
    model = model_class(_base_encoder(base, model_class, index["base_model"], folder / SETUP_FILE))
    try:
        model.fingerprint.check_compatible(index["base_model"], folder / SETUP_FILE)
        saved_digest = index["base_model"].get("weights_sha256")
        if saved_digest and saved_digest != encoder_digest(model):
            warnings.warn(
                f"{source}: the base encoder's weights differ from those the setup was saved with "
                f"({index['base_model'].get('name_or_path') or 'unnamed'}); its adapters may not fit this encoder "
                "(expected if you loaded the same encoder in another precision)",
                BaseModelMismatchWarning,
                stacklevel=2,
            )
        with weights_sample_unchecked():  # said once above for the whole setup, not again for each of its pieces
            # adapters before the fusions that need them, whatever order the index lists them in
            for piece in sorted(index["pieces"], key=lambda piece: PIECE_KINDS.index(piece["kind"])):
                kind, name = piece["kind"], piece["name"]
                _check_config_digest(folder, piece)
                getattr(model, f"load_{kind}")(folder / piece_folder(kind, name), name=name)
        _load_own_head(model, folder, index["base_model"], folder / SETUP_FILE)
        active = ActiveSetup.from_dict(index.get("active", {}), folder / SETUP_FILE)
        active.check_listed(index["pieces"], folder / SETUP_FILE)
        with naming_file(folder / SETUP_FILE):  # a skip_layers or fusion step the file holds is fixed in the file
            active.apply(model)
    except BaseException:
        model.unload()
        raise
    return model


def _own_head_state(model: AdaptedModel) -> dict[str, torch.Tensor]:
    """The wrapped task model's own output layer (trainable.own_head_parameters: score, classifier) by parameter
    name: trained when no head of ours is active, and a part of no piece, so a setup saves it beside them. {} for a
    bare or language model."""
    parameters = {id(parameter) for parameter in own_head_parameters(model)}
    return {name: parameter for name, parameter in model.model.named_parameters() if id(parameter) in parameters}


def _load_own_head(model: AdaptedModel, folder: Path, saved: Mapping[str, Any], index: Path) -> None:
    """The task model's own output layer saved beside the pieces, put into the loaded base (whose checkpoint holds
    it untrained, or not at all, drawn at random). A setup saved without one (a bare or language model, or saved
    before this file existed) leaves the base's as it is."""
    digest = saved.get(OWN_HEAD_DIGEST)
    if digest is None:
        return
    path = folder / OWN_HEAD_FILE
    data = read_bytes(path, f"{index} lists the task model's own output layer there: save the setup again")
    if hashlib.sha256(data).hexdigest() != digest:
        raise SerializationError(
            f"{path} is not the file {index} was saved with (its digest differs): a save over the setup was cut off "
            "between its renames, or the file was replaced; save the setup again"
        )
    tensors = load_safetensors_bytes(data)
    own = _own_head_state(model)
    shapes = {name: tuple(tensor.shape) for name, tensor in tensors.items()}
    if shapes != {name: tuple(parameter.shape) for name, parameter in own.items()}:
        raise IncompatibleModelError(
            f"{path} holds the own output layer {shapes} of the {saved.get('class')} the setup was saved on, but the "
            f"base {type(model.model).__name__} has {dict((n, tuple(p.shape)) for n, p in own.items())}; pass as base "
            "the model the setup was saved on (the same task class and number of labels)"
        )
    with torch.no_grad():
        for name, parameter in own.items():
            parameter.copy_(tensors[name])


def _check_config_digest(folder: Path, piece: Mapping[str, Any]) -> None:
    """Refuse a piece whose config is not the one the index was saved with: a save_pretrained over an earlier setup
    was cut off between its renames, and the folder mixes pieces of two saves (indexes saved before the digest was
    recorded have none)."""
    expected = piece.get(CONFIG_DIGEST)
    path = config_path(folder / piece_folder(piece["kind"], piece["name"]), piece["kind"])
    if expected is None or (not os.path.isfile(path) and not out_of_reach(path)):  # said by the piece reader
        return
    check_readable_file(path, "save the setup again")
    if hashlib.sha256(read_bytes(path)).hexdigest() != expected:
        raise SerializationError(
            f"{path} is not the {piece['kind']} config that {folder / SETUP_FILE} was saved with (its sha256 differs "
            f"from the index's {CONFIG_DIGEST}): a save_pretrained there was cut off part-way, or the file was "
            "replaced, so the folder mixes two saves. Save the setup again"
        )


def _fetch_setup(place: HubRef) -> Path:
    """The index, then the folders of the pieces it lists (nothing else the repo holds)."""
    listing = download(place, [SETUP_FILE])
    if offline() and not (listing / SETUP_FILE).is_file():
        raise _partly_cached(place, "saved setup", SETUP_FILE)
    if not (listing / SETUP_FILE).is_file():  # said of the cache's copy, 'it holds nothing', and its path
        raise SerializationError(
            f"the Hub folder {place} holds no {SETUP_FILE}, so it is no setup that save_pretrained or push_to_hub "
            f"wrote; load a single piece there with load_adapter, load_fusion or load_head ({str(place)!r}), or "
            "check the id"
        )
    index = _hub_index(place, listing)
    pieces = index["pieces"]
    own = [OWN_HEAD_FILE] if index["base_model"].get(OWN_HEAD_DIGEST) else []
    folder = download(place, [SETUP_FILE, *own] + [f"{piece_folder(p['kind'], p['name'])}/*" for p in pieces])
    for piece in pieces:
        relative = piece_folder(piece["kind"], piece["name"])
        weights = weights_path(folder / relative, piece["kind"])
        if offline() and not weights.is_file():
            raise _partly_cached(place.child(relative), piece["kind"], weights.name)
        if not (folder / relative).is_dir():  # said of the cache's copy: 'copy it again whole'
            raise SerializationError(
                f"the setup in the Hub folder {place} lists the {piece['kind']} {piece['name']!r}, but the "
                f"repository holds no {place.child(relative)}; the pushed setup is incomplete: push it again whole "
                "(push_to_hub with every piece), or load the pieces it does hold one by one"
            )
    return folder


def _hub_index(place: HubRef, listing: Path) -> dict[str, Any]:
    """read_index of a Hub folder's setup (`listing`, the cache's copy of its JSON files), raising _of_hub."""
    try:
        return read_index(listing)
    except SerializationError as error:
        raise _of_hub(place, listing, error) from None


def _of_hub(place: HubRef, listing: Path, error: SerializationError) -> SerializationError:
    """`error` about the setup index in the cache's copy `listing` of the Hub folder `place`, said of the Hub
    folder: the copy is nobody's to edit, the fix is in the repository."""
    return SerializationError(
        f"{str(error).replace(str(listing / SETUP_FILE), f'the {SETUP_FILE} of the Hub folder {place}')}; "
        "fetched from the Hub: push the setup again with push_to_hub(..., overwrite=True) to replace it"
    )


def _partly_cached(ref: HubRef, what: str, missing: str) -> HubError:
    """Offline, snapshot_download hands back whatever an earlier download cached of a repo (the JSON files of a
    look-up, another piece); the error for `missing` not being among it, instead of calling the saved files
    incomplete or the path wrong."""
    return HubError(
        f"{what} {ref} is only partly in the local Hugging Face cache ({cache_dir()}): {missing} is not there, and "
        f"offline mode is on ({' or '.join(OFFLINE_VARIABLES)}); load it once with the network on (unset "
        f"{OFFLINE_VARIABLES[0]}) to fetch the rest, or pass a local folder that holds all of it"
    )


def _base_encoder(
    base: nn.Module | str | os.PathLike, model_class: type, saved: Mapping[str, Any], index: Path
) -> nn.Module:
    """`base` itself, or loaded from its folder or Hub id as the class the setup was saved with (a decoder's
    *ForCausalLM keeps its LM head); a local folder of another model type than the setup's is refused before
    loading (transformers would load it into the saved class with every weight missing)."""
    if isinstance(base, model_class):
        raise ConfigError(
            "base is already an AdaptedModel; pass the plain HuggingFace encoder (model.unload() "
            "returns it), its folder or its Hub id"
        )
    if isinstance(base, nn.Module):
        return base
    encoder = resolve_encoder(base, tokenizer=False)
    _check_base_type(encoder.folder, saved, index)
    class_name = _saved_class(saved, index)
    model, missing = load_encoder_model_and_missing(encoder, class_name)
    _check_base_parts(str(encoder), model, missing, class_name, saved, index)
    return model


def _check_base_parts(
    base: str, model: nn.Module, missing: frozenset[str], class_name: str | None, saved: Mapping[str, Any], index: Path
) -> None:
    """Refuse a base whose checkpoint lacks a part of the class the setup was saved on: its LM head (a bare
    LlamaModel's folder loaded as LlamaForCausalLM, whose lm_head is then drawn at random) or, for an
    encoder-decoder, its whole decoder (a T5EncoderModel's folder loaded as T5ForConditionalGeneration).
    transformers fills such weights at random and only logs it, so generate() and every output through them was
    noise with no error. Which weights are a part's own, and which the checkpoint lacked, says
    encoders.unloaded_parts."""
    if class_name is None:
        return
    get_decoder = getattr(model, "get_decoder", None)
    decoder = get_decoder() if saved.get("decoder_layers") is not None and callable(get_decoder) else None
    parts = unloaded_parts(model, missing, [decoder] if isinstance(decoder, nn.Module) else [])
    decoder_path = next((path for path, module in model.named_modules() if module is decoder), None)
    lacking = [
        f"{'its decoder' if path == decoder_path else f'its {path}'} ({path}.*: {len(names)} weight(s) missing)"
        for path, names in parts.items()
    ]
    if lacking:
        raise IncompatibleModelError(
            f"{index} was saved on a {class_name}, but the base {base!r} holds a checkpoint without "
            f"{' or '.join(lacking)}: it was saved from a model without that part (AutoModel, or an encoder alone), "
            "and transformers would fill it with random weights, making every output that passes through it noise. "
            f"Pass the folder of the whole model, saved from {class_name}, or the loaded model itself as base"
        )


def _saved_class(saved: Mapping[str, Any], index: Path) -> str | None:
    """The transformers class name the setup's base was saved as, checked against its model type: a number there
    failed inside getattr, and a class of another model type (BertModel for a 'gpt2' setup) loaded the base's
    checkpoint into it with every weight missing, to fail only when wrapped."""
    import transformers

    name = saved.get("class")
    if name is None:
        return None
    if not isinstance(name, str):
        raise SerializationError(
            f"{index}: base_model.class={name!r} has type {type(name).__name__}; expected a transformers class name "
            "such as 'GPT2LMHeadModel'. The file is damaged or was edited by hand: save the setup again"
        )
    found = getattr(getattr(getattr(transformers, name, None), "config_class", None), "model_type", None)
    expected = saved.get("model_type")
    if isinstance(found, str) and found and isinstance(expected, str) and found != expected:
        raise SerializationError(
            f"{index}: base_model.class={name!r} is a class of {found!r} models, but base_model.model_type is "
            f"{expected!r}; the file is damaged or was edited by hand: save the setup again"
        )
    return name


def _check_base_type(folder: Path | None, saved: Mapping[str, Any], index: Path) -> None:
    """IncompatibleModelError when the local `folder`'s config.json names another model_type than `saved`."""
    expected = saved.get("model_type")
    if folder is None or not expected or not (folder / "config.json").is_file():
        return
    document = read_json(folder / "config.json")
    found = document.get("model_type") if isinstance(document, dict) else None
    if found and found != expected:
        raise IncompatibleModelError(
            f"{index} was saved on a {expected!r} model ({saved.get('name_or_path') or 'unnamed'}), but the base "
            f"{str(folder)!r} is a {found!r} model; pass the base the setup was trained on (base=..., or --base "
            "for adapterfusion serve)"
        )


def piece_source(source: str | os.PathLike, kind: str) -> Path:
    """The local folder of one piece: `source` itself, or the one piece of `kind` in the saved setup `source`. A Hub
    id is fetched in two steps: its JSON files (to find the piece), then that piece's folder only."""
    place = locate(source, f"{kind} folder")
    if isinstance(place, Path):
        check_readable_folder(place)
        return place / _piece_in(place, kind, lambda relative: str(place / relative))
    listing = download(place, ["*.json"])
    try:
        relative = _piece_in(listing, kind, lambda rel: str(place.child(rel)))
    except SerializationError as error:
        raise _of_hub(place, listing, error) from None
    config_names = tuple(dict.fromkeys((config_path(listing, kind).name, ADAPTERHUB_FILES[kind][0])))  # ours, theirs
    if not relative and not any((listing / name).is_file() for name in config_names):
        if offline():
            raise _partly_cached(place, f"{kind} folder", f"{' or '.join(config_names)} or {SETUP_FILE}")
        one = f"{'an' if kind == 'adapter' else 'a'} {kind}"
        raise SerializationError(
            f"the Hub folder {place} holds neither {one} ({' or '.join(config_names)}) nor a saved setup "
            f"({SETUP_FILE}); check the id"
        )
    child = place.child(relative)
    weights = tuple(dict.fromkeys((weights_path(Path(), kind).name, *ADAPTERHUB_FILES[kind][1:])))  # ours, AdapterHub's
    if offline() and not any(cached_folder(child, name) for name in weights):
        raise _partly_cached(child, kind, " or ".join(weights))
    return download(child)


def _piece_in(folder: Path, kind: str, label: Callable[[str], str]) -> str:
    """'' if `folder` is a piece folder (or not a setup); else the path of the setup's one `kind` within it. A setup
    whose root holds a `kind` too (saved or exported there since) is refused: which of them is meant cannot be told,
    and loading the root's would pass over the setup's without a word."""
    if not os.path.isfile(folder / SETUP_FILE):
        return ""
    configs = dict.fromkeys((config_path(folder, kind).name, ADAPTERHUB_FILES[kind][0]))  # ours, AdapterHub's
    at_root = [name for name in configs if (folder / name).is_file()]
    if at_root:
        try:
            listed = [piece["name"] for piece in read_index(folder)["pieces"] if piece["kind"] == kind]
        except SerializationError:  # not readable as a setup: the folder is the piece's
            return ""
        if listed:
            choices = ", ".join(repr(label(piece_folder(kind, name))) for name in listed)
            raise ConfigError(
                f"{label('')} is a saved setup holding {len(listed)} {kind}(s) ({choices}), and its root holds "
                f"another {kind} ({', '.join(at_root)}), saved or exported there since: which one to load cannot be "
                f"told. Load one of the setup's by its folder, or move the root's {kind} files into a folder of their "
                "own"
            )
        return ""
    names = [piece["name"] for piece in read_index(folder)["pieces"] if piece["kind"] == kind]
    if len(names) == 1:
        return piece_folder(kind, names[0])
    if not names:
        raise NameNotFoundError(f"the saved setup {label('')} holds no {kind}")
    choices = ", ".join(repr(label(piece_folder(kind, name))) for name in names)
    raise SeveralPiecesError(
        f"the saved setup {label('')} holds {len(names)} {kind}s; load one of {choices}",
        tuple(piece_folder(kind, name) for name in names),
    )


class SeveralPiecesError(ConfigError):
    """A saved setup given where one piece is loaded holds several of that kind; `choices` are their folders
    relative to the setup (the server names them under the client's own source)."""

    def __init__(self, message: str, choices: tuple[str, ...]) -> None:
        super().__init__(message)
        self.choices = choices


# ---- push ------------------------------------------------------------------------------------------------
def push_to_hub(
    model: AdaptedModel,
    repo_id: str,
    *,
    adapters: Names = None,
    fusions: Names = None,
    heads: Names = None,
    provenance: Provenance = None,
    private: bool | None = None,
    token: str | None = None,
    commit_message: str | None = None,
    overwrite: bool = False,
) -> str:
    """save_pretrained into Hub repo folder `repo_id` ('org/name' or 'org/name/subfolder') with a README.md model
    card; returns the id that from_pretrained and load_adapter/load_fusion/load_head (with '/adapters/<name>' etc.)
    take. As save_pretrained onto a saved setup, a push that would drop pieces the folder's setup lists is refused
    unless `overwrite=True`, and so is one that would replace a README.md we did not write (the owner's card).
    AdaptedModel.push_to_hub."""
    ref = _check_push_arguments(repo_id, private, token, commit_message, overwrite)
    _check_not_in_a_piece(ref)
    with tempfile.TemporaryDirectory() as tmp:
        folder = save_pretrained(
            model, Path(tmp) / "setup", adapters=adapters, fusions=fusions, heads=heads, provenance=provenance
        )
        index = read_index(folder)
        if not overwrite:
            _check_remote_folder(ref, index)
        atomic_write_text(folder / CARD_FILE, render_model_card(folder, index, ref))
        listed = "; ".join(
            f"{kind}s {', '.join(p['name'] for p in index['pieces'] if p['kind'] == kind)}"
            for kind in PIECE_KINDS
            if any(p["kind"] == kind for p in index["pieces"])
        )
        upload(folder, ref, commit_message or f"adapterfusion {__version__}: {listed or 'no pieces'}", private, token)
    return str(ref)


def _check_push_arguments(
    repo_id: object, private: object, token: object, commit_message: object, overwrite: object
) -> HubRef:
    """Every argument of a push that goes to huggingface_hub, checked before anything is saved or the Hub is asked:
    a token of the wrong type failed only after the save, offline as "reading before pushing failed", and online
    deep inside huggingface_hub (a token with a newline from the file it was read from: an invalid HTTP header)."""
    if private is not None:
        check_bool(private, "push_to_hub(private)")  # "no" would be read as true
    check_bool(overwrite, "push_to_hub(overwrite)")
    problem = id_problem(repo_id) if isinstance(repo_id, str) else None
    if problem is not None:
        raise ConfigError(f"push_to_hub: repo_id {short_repr(repo_id)} {problem}")
    ref = hub_ref(repo_id) if isinstance(repo_id, str) else None
    if ref is None or "/" not in ref.repo_id:  # a bare name would land in the token's own namespace, not at `repo_id`
        raise ConfigError(
            f"repo_id {short_repr(repo_id)} is not a Hub id to push to; use 'org/name' or 'org/name/subfolder' (your "
            "user or organisation name first), with '@<branch>' to push to a branch"
        )
    if token is not None and (
        not isinstance(token, str) or not token.strip() or token != token.strip() or token_problem(token)
    ):
        kind = type(token).__name__
        problem = (
            (token_problem(token) or "is empty or has spaces or a newline around it")
            if isinstance(token, str)
            else f"has type {kind}"
        )
        raise ConfigError(
            f"push_to_hub(token) {problem}; expected the access token as a string ('hf_...', stripped of the "
            "newline a file read with it ends in), or None to use the saved login (`hf auth login` or HF_TOKEN)"
        )
    if commit_message is not None and (not isinstance(commit_message, str) or not commit_message.strip()):
        raise ConfigError(
            f"push_to_hub(commit_message)={short_repr(commit_message)} ({type(commit_message).__name__}) is no "
            "commit message; give a non-empty string, or None for the generated one"
        )
    return ref


def _check_not_in_a_piece(ref: HubRef) -> None:
    """Refuse a push into the folder of a piece that a setup above it in the repository lists ('org/name/adapters/a'
    under the setup 'org/name'), even with overwrite: the pushed setup's files would lie among that piece's, whose
    folder then holds a setup and a piece, which load_adapter refuses as ambiguous, so that setup no longer loads.
    save_pretrained refuses the same locally. One look-up of the setup files of the folders above `ref`."""
    parts = ref.subfolder.split("/") if ref.subfolder else []
    above = ["/".join(parts[:depth]) for depth in range(len(parts))]
    if not above:
        return
    root = HubRef(ref.repo_id, "", ref.revision)
    remote = download_if_there(root, ["/".join(p for p in (folder, SETUP_FILE) if p) for folder in above], ref)
    if remote is None:
        return
    for folder in above:
        try:
            pieces = read_index(remote / folder)["pieces"] if (remote / folder / SETUP_FILE).is_file() else []
        except SerializationError:  # not a setup this library reads: nothing of it to break
            continue
        inside = ref.subfolder[len(folder) :].lstrip("/")
        for piece in pieces:
            own = piece_folder(piece["kind"], piece["name"])
            if inside == own or inside.startswith(f"{own}/"):
                raise ConfigError(
                    f"push_to_hub: {ref} is inside the folder of the {piece['kind']} {piece['name']!r} of the setup "
                    f"in {HubRef(ref.repo_id, folder, ref.revision)} ({own}); a setup pushed there would lie among "
                    f"that {piece['kind']}'s files, and that setup would no longer load. Push to a folder of its own "
                    "(another subfolder or repository); nothing was pushed"
                )


def _check_remote_folder(ref: HubRef, index: Mapping[str, Any]) -> None:
    """Refuse a push that would drop what the Hub folder `ref` holds: pieces its setup lists that this push leaves
    out (upload keeps their files, but the new index no longer lists them, so they no longer load), or a README.md
    that is not our card. The folder's setup and card are read first; a repository not there yet holds neither."""
    remote = download_if_there(ref, [SETUP_FILE, CARD_FILE])
    if remote is None:
        return
    pushed = {(piece["kind"], piece["name"]) for piece in index["pieces"]}
    if (remote / SETUP_FILE).is_file():
        try:
            earlier = read_index(remote)
        except SerializationError as error:  # it named the file's copy in the local cache, which nobody edits
            raise ConfigError(
                f"push_to_hub: the Hub folder {ref} holds an {SETUP_FILE} that is not a setup this library reads "
                f"({str(error).replace(str(remote / SETUP_FILE), 'it')}), so what this push would drop cannot be "
                "told; pass overwrite=True to replace it, or push to another repository or subfolder"
            ) from None
        dropped = [(p["kind"], p["name"]) for p in earlier["pieces"] if (p["kind"], p["name"]) not in pushed]
        if dropped:
            listed = ", ".join(f"{kind} {name!r}" for kind, name in dropped)
            raise ConfigError(
                f"push_to_hub: the setup in {ref} lists the {listed}, which this push leaves out, so the pushed setup "
                "would no longer list or load them; include them (push every piece, or name them), pass "
                "overwrite=True to replace the setup, or push to another repository or subfolder"
            )
    card = remote / CARD_FILE
    if card.is_file() and not is_our_card(read_bytes(card).decode("utf-8", errors="replace")):
        raise ConfigError(
            f"push_to_hub: {ref} holds a README.md that adapterfusion did not write (its metadata names no "
            "library_name: adapterfusion), which this push would replace with a generated model card; pass "
            "overwrite=True to replace it, or push to a subfolder ('org/name/subfolder')"
        )
