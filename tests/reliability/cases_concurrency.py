"""Bad-input cases at one boundary, two writers at once: the same setup, store entry, run folder or served piece written
or loaded by two threads or processes together, and a write cut short by a kill."""

from __future__ import annotations

from catalogue import BadInput

B = BadInput
GROUP = "concurrency"

CASES: tuple[BadInput, ...] = ()
