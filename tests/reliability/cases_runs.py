"""Bad-input cases at one boundary, runs: training calls, run folders, stores and the CLI commands around them."""

from __future__ import annotations

from catalogue import BadInput

CASES: tuple[BadInput, ...] = ()
