"""Bad-input cases left over from the earlier hunts, across boundaries: AdapterHub export into a setup, tokenizer
settings of the wrong type, another container's processes, a damaged provenance manifest, the shipped zoo on another
encoder."""

from __future__ import annotations

from catalogue import BadInput

B = BadInput
GROUP = "leftovers"

CASES: tuple[BadInput, ...] = ()
