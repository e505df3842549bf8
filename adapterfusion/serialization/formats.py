"""Which translator reads or writes a piece folder: ours (serialization/pieces.py) or AdapterHub's
(interop/adapterhub.py).

    load:  folder --(is it AdapterHub's?)--> translator --> Piece --> AdaptedModel.install_piece
    save:  AdaptedModel.export_piece --> Piece --> write_piece (ours) or export_adapterhub (AdapterHub's) --> folder

The translators see the encoder only through an EncoderLayout (piece.py), so nothing here imports the model.
"""

from __future__ import annotations

from pathlib import Path

from adapterfusion.interop.adapterhub import is_adapterhub_dir, piece_from_adapterhub
from adapterfusion.piece import EncoderLayout, Piece
from adapterfusion.serialization.pieces import piece_from_folder, piece_to_folder


def read_piece(directory: str | Path, kind: str, layout: EncoderLayout) -> Piece:
    """The `kind` saved in the local folder `directory`, in whichever format it was written, checked against the
    encoder `layout` describes."""
    if is_adapterhub_dir(directory, kind):  # saved by AdapterHub's `adapters`
        return piece_from_adapterhub(directory, kind, layout)
    return piece_from_folder(directory, kind, layout.fingerprint)


def write_piece(piece: Piece, directory: str | Path, layout: EncoderLayout, overwrite: bool = False) -> Path:
    """Save `piece` into `directory` in our format (`overwrite`: over a piece of another name saved there).
    AdapterHub's format has one way out, `export_adapterhub` (a model's piece) through `piece_to_adapterhub` (a
    Piece), both in interop/adapterhub.py."""
    return piece_to_folder(piece, directory, layout.fingerprint, overwrite)
