"""`add_fusion_subset`: a fusion over some of another fusion's adapters, with the same trained Q/K/V.

A FusionLayer's Query, Key and Value are d×d maps shared by all the adapters of its site (fusion/layer.py), and
the adapter list lives in the model's fusion setup, not in the layer; so nothing in Q/K/V belongs to one adapter,
and a subset needs no retraining. Its output equals the full fusion with the other adapters masked out
(`AdaptedModel.set_fusion_mask`), but only the kept adapters run: it costs what a fusion over fewer adapters costs.
A ScaLearn fusion (fusion/scalearn.py) has one row of scales per adapter: the subset keeps the kept adapters' rows,
which is again the masked fusion (a masked adapter's scale is 0).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from adapterfusion._validation import check_bool, check_names, require_wrapped
from adapterfusion.errors import ConfigError

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel


def add_fusion_subset(
    model: AdaptedModel, source: str, adapters: Sequence[str], name: str, overwrite: bool = False
) -> str:
    """Add fusion `name` over `adapters` (a non-empty subset of fusion `source`'s, kept in `source`'s order)
    with copies of `source`'s weights at every site; returns `name`."""
    require_wrapped(model, "add_fusion_subset")
    model.require("fusion", source)
    check_bool(overwrite, "overwrite")
    fused = model.fusion_setup(source).adapters
    wanted = check_names(adapters, "adapters")
    unknown = [a for a in wanted if a not in fused]
    if unknown or not wanted:
        raise ConfigError(f"a subset of fusion {source!r} must name some of its adapters {list(fused)}; got {wanted}")
    twice = sorted({a for a in wanted if wanted.count(a) > 1})
    if twice:  # the subset runs each adapter once: a name given twice was dropped without a word
        raise ConfigError(
            f"adapters={wanted} names {twice} more than once; a subset of fusion {source!r} fuses each adapter once, "
            "so name each once"
        )
    kept = tuple(a for a in fused if a in wanted)
    piece = model.export_piece("fusion", source)
    tensors = piece.tensors
    if model.fusion_setup(source).config.is_scalearn:  # every tensor is a site's scales, one row per adapter
        rows = [fused.index(a) for a in kept]
        tensors = {key: value[rows] for key, value in tensors.items()}
    piece = dataclasses.replace(piece, name=name, adapters=kept, tensors=tensors, source=f"fusion {source!r}")
    return model.install_piece(piece, overwrite)
