"""save_pretrained: the model's pieces, or the named ones, and the active setup restricted to them, written as one
setup folder (setup_index.py); and the bookkeeping of a save onto a setup saved before: which of its pieces the save
drops, whether their files are ours to remove, and removing them once the new setup is in place. Apart from loading
because a save meets files that are there already, and what it checks is that none of them is lost.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from adapterfusion._validation import check_bool, check_names
from adapterfusion._version import __version__
from adapterfusion.encoder_identity import encoder_digest, sampled_fingerprint
from adapterfusion.errors import ConfigError, NameNotFoundError, SerializationError
from adapterfusion.io.atomic import atomic_write_files, json_text, write_new_folder
from adapterfusion.io.paths import check_writable_folder, out_of_reach, path_part
from adapterfusion.piece import PIECE_KINDS, SETUP_FILE
from adapterfusion.serialization.pieces import (
    check_piece_folder,
    config_path,
    holds_our_piece,
    piece_folder,
    piece_to_files,
    safetensors_bytes,
    weights_path,
)
from adapterfusion.serialization.provenance import describe_origin
from adapterfusion.serialization.setup_base_model import own_head_state
from adapterfusion.serialization.setup_index import (
    CONFIG_DIGEST,
    OWN_HEAD_DIGEST,
    OWN_HEAD_FILE,
    SETUP_FORMAT,
    SETUP_FORMAT_VERSION,
    ActiveSetup,
    read_index,
)

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel

Names = str | Sequence[str] | None
Provenance = Mapping[str, str | os.PathLike | Mapping[str, Any]] | None


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
    own = own_head_state(model)
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
