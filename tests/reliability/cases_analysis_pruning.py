"""Bad-input cases at one boundary, what reads a trained model back: pruning fused adapters, the fusion analyses and
heatmaps, recording fusion attentions, and the zoo's adapters."""

from __future__ import annotations

from catalogue import BadInput

B = BadInput
GROUP = "analysis and pruning"

CASES: tuple[BadInput, ...] = ()
