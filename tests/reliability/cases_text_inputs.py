"""Bad-input cases at one boundary, texts handed to inference: pipelines, predict helpers, the CLI's predict and
evaluate inputs (empty, non-string, wrongly nested, unequal pairs, odd characters, huge)."""

from __future__ import annotations

from catalogue import BadInput

B = BadInput
GROUP = "text inputs"

CASES: tuple[BadInput, ...] = ()
