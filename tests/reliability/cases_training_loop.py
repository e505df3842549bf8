"""Bad-input cases at one boundary, the training loop: train() and TrainingConfig settings, resume from checkpoints,
callbacks, optimizer groups, batching and the progress a run writes."""

from __future__ import annotations

from catalogue import BadInput

B = BadInput
GROUP = "training loop"

CASES: tuple[BadInput, ...] = ()
