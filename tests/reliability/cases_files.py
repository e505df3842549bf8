"""Bad-input cases at one boundary, file and folder targets: where things are saved or read (setup folders, output
paths, names that become paths)."""

from __future__ import annotations

from catalogue import BadInput

CASES: tuple[BadInput, ...] = ()
