"""Bad-input cases at one boundary, Hub ids and offline use: Hub ids, revisions and AdapterHub names where a model,
encoder or piece is loaded, and pushing, all without a network."""

from __future__ import annotations

from catalogue import BadInput

B = BadInput
GROUP = "Hub"

CASES: tuple[BadInput, ...] = ()
