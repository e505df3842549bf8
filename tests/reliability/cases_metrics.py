"""Bad-input cases at one boundary, metrics and scoring: compute_metrics and the per-kind metric functions
(classification, regression, multiple choice, tagging, QA) fed ragged, empty, mistyped or non-finite predictions and
references."""

from __future__ import annotations

from catalogue import BadInput

B = BadInput

CASES: tuple[BadInput, ...] = ()
