"""Bad-input cases at one boundary, experiment files' sweeps, select rules, analyses and span ablations, and what plan,
run and report make of them."""

from __future__ import annotations

from catalogue import BadInput

B = BadInput
GROUP = "sweeps and analyses"

CASES: tuple[BadInput, ...] = ()
