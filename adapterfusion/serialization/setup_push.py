"""push_to_hub: a setup saved as save_pretrained does (setup_save.py), given a README.md model card and uploaded to a
Hub repo folder. Every argument is checked before anything is saved, and a push is refused where it would break what
the Hub folder holds: pieces its setup lists that the push drops, another setup's piece folder, a README.md we did
not write.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from adapterfusion._validation import check_bool, short_repr
from adapterfusion._version import __version__
from adapterfusion.errors import ConfigError, SerializationError
from adapterfusion.io.atomic import atomic_write_text
from adapterfusion.io.documents import read_bytes
from adapterfusion.io.hub import HubRef, download_if_there, hub_ref, id_problem, token_problem, upload
from adapterfusion.piece import PIECE_KINDS, SETUP_FILE
from adapterfusion.serialization.model_card import is_our_card, render_model_card
from adapterfusion.serialization.pieces import piece_folder
from adapterfusion.serialization.setup_index import read_index
from adapterfusion.serialization.setup_save import Names, Provenance, save_pretrained

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel

CARD_FILE = "README.md"


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
