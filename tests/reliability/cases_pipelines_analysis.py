"""Bad-input cases at one boundary: (filled in by this session's hunt)."""

from __future__ import annotations

from catalogue import BadInput

B = BadInput

CASES: tuple[BadInput, ...] = ()
