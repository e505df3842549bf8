"""Bad-input cases at one boundary, prediction heads and span tasks: classification, regression, multiple-choice,
tagging and question-answering heads given odd labels, shapes, settings or data."""

from __future__ import annotations

from catalogue import BadInput

B = BadInput
GROUP = "heads"

CASES: tuple[BadInput, ...] = ()
