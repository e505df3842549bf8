"""Bad-input cases at one boundary, instruction and generation tasks: their definitions, chat templates, prompts and
answers as tokenised, and their scoring."""

from __future__ import annotations

from catalogue import BadInput

B = BadInput
GROUP = "instruction data"

CASES: tuple[BadInput, ...] = ()
