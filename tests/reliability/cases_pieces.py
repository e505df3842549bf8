"""Bad-input cases at one boundary, pieces and configs: what a saved or added adapter, fusion or head carries, and the
controls of a wrapped model."""

from __future__ import annotations

from catalogue import BadInput

CASES: tuple[BadInput, ...] = ()
