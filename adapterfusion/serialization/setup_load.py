"""from_pretrained: a base encoder wrapped with every piece and the active setup of a saved setup, local or fetched
from the Hub (its index first, then the folders of the pieces it lists), each piece's config checked against the
index's digest. And piece_source: load_adapter/load_fusion/load_head take a piece's folder, or a setup holding one
piece of that kind, either of them local or on the Hub. The model class comes in as an argument: this module never
imports model.py.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch import nn

from adapterfusion._validation import naming_file
from adapterfusion.encoder_identity import encoder_digest
from adapterfusion.errors import BaseModelMismatchWarning, ConfigError, HubError, NameNotFoundError, SerializationError
from adapterfusion.interop.adapterhub_files import FILES as ADAPTERHUB_FILES
from adapterfusion.io.documents import read_bytes
from adapterfusion.io.hub import OFFLINE_VARIABLES, HubRef, cache_dir, cached_folder, download, locate, offline
from adapterfusion.io.paths import check_readable_file, check_readable_folder, out_of_reach
from adapterfusion.piece import PIECE_KINDS, SETUP_FILE, weights_sample_unchecked
from adapterfusion.serialization.pieces import config_path, piece_folder, weights_path
from adapterfusion.serialization.setup_base_model import base_encoder, load_own_head
from adapterfusion.serialization.setup_index import (
    CONFIG_DIGEST,
    OWN_HEAD_DIGEST,
    OWN_HEAD_FILE,
    ActiveSetup,
    check_listed_folders,
    read_index,
)

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel


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
    model = model_class(base_encoder(base, model_class, index["base_model"], folder / SETUP_FILE))
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
        load_own_head(model, folder, index["base_model"], folder / SETUP_FILE)
        active = ActiveSetup.from_dict(index.get("active", {}), folder / SETUP_FILE)
        active.check_listed(index["pieces"], folder / SETUP_FILE)
        with naming_file(folder / SETUP_FILE):  # a skip_layers or fusion step the file holds is fixed in the file
            active.apply(model)
    except BaseException:
        model.unload()
        raise
    return model


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
