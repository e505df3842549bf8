"""Bad-input cases at one boundary, how adapters are composed and trained together: FusionConfig and ScaLearn settings,
add_fusion and train_fusion arguments, and MT-A's tasks, sampling and heads."""

from __future__ import annotations

from catalogue import BadInput

B = BadInput
GROUP = "fusion configs"

CASES: tuple[BadInput, ...] = ()
