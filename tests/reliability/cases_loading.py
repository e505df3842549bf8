"""Bad-input cases at one boundary, loading what was saved or named: encoders from folders and Hub ids, their config and
tokenizer files, setup folders and the pieces inside them."""

from __future__ import annotations

from catalogue import BadInput

B = BadInput
GROUP = "loading"

CASES: tuple[BadInput, ...] = ()
