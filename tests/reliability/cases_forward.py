"""Bad-input cases at one boundary, forward inputs: what a model call is handed (input_ids, attention_mask, labels,
unknown keywords)."""

from __future__ import annotations

from catalogue import BadInput

CASES: tuple[BadInput, ...] = ()
