"""Bad-input cases at one boundary, ScaLearn fusions (FusionConfig(kind='scalearn')) and MT-A (train_multitask, fusion-
mt-a): their configs, training, saving and loading."""

from __future__ import annotations

from catalogue import BadInput

B = BadInput
GROUP = "ScaLearn and MT-A"

CASES: tuple[BadInput, ...] = ()
