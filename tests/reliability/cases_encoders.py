"""Bad-input cases at one boundary, encoder identity and Hub ids: what names an encoder (folders, Hub ids, offline mode,
wrapped models, tokenizers)."""

from __future__ import annotations

from catalogue import BadInput

CASES: tuple[BadInput, ...] = ()
