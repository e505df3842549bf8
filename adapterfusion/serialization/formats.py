"""Which translator reads or writes a piece folder: ours (serialization/pieces.py) or AdapterHub's
(interop/adapterhub.py).

    load:  folder --(is it AdapterHub's?)--> translator --> Piece --> AdaptedModel.install_piece
    save:  AdaptedModel.export_piece --> Piece --> translator (ours, or AdapterHub's on export) --> folder

The translators see the encoder only through an EncoderLayout (piece.py), so nothing here imports the model.
"""

from __future__ import annotations

from pathlib import Path

from adapterfusion._validation import check_choice
from adapterfusion.interop.adapterhub import is_adapterhub_dir, piece_from_adapterhub, piece_to_adapterhub
from adapterfusion.piece import EncoderLayout, Piece
from adapterfusion.serialization.pieces import piece_from_folder, piece_to_folder

FORMATS = ("adapterfusion", "adapterhub")


def read_piece(directory: str | Path, kind: str, layout: EncoderLayout) -> Piece:
    """The `kind` saved in the local folder `directory`, in whichever format it was written, checked against the
    encoder `layout` describes."""
    if is_adapterhub_dir(directory, kind):  # saved by AdapterHub's `adapters`
        return piece_from_adapterhub(directory, kind, layout)
    return piece_from_folder(directory, kind, layout.fingerprint)


def write_piece(
    piece: Piece,
    directory: str | Path,
    layout: EncoderLayout,
    format: str = "adapterfusion",
    use_safetensors: bool = True,
) -> Path:
    """Save `piece` into `directory` in `format`; AdapterHub's format may use its legacy `.bin` weights instead of
    safetensors (use_safetensors=False)."""
    check_choice(format, FORMATS, "format")
    if format == "adapterhub":
        return piece_to_adapterhub(piece, directory, layout, use_safetensors)
    return piece_to_folder(piece, directory, layout.fingerprint)
