"""Bad-input cases at one boundary, recording fusion attentions (`output_fusion_attentions=True` and
`model.recording_fusion_attentions()`): calls whose fusion weights one recording, one fusion's weights per site and
call, cannot hold."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import adapterfusion as af
from catalogue import Action, BadInput
from tiny_models import tiny_encoder, tiny_inputs

B = BadInput
GROUP = "recording fusion attentions"


def _model() -> af.AdaptedModel:
    """A tiny encoder with adapters a, b, c, a fusion f over all three and a fusion g over a and b."""
    model = af.wrap(tiny_encoder("bert"))
    for name in "abc":
        model.add_adapter(name, "pfeiffer")
    model.add_fusion("f", ["a", "b", "c"])
    model.add_fusion("g", ["a", "b"])
    return model


def _called(block: af.Block | None, recording: bool = False, **call: Any) -> Callable[[Path], Action]:
    """model(**batch of 2, **call) on _model() with `block` active, inside recording_fusion_attentions() if
    `recording`."""

    def prepare(folder: Path) -> Action:
        model = _model()
        if block is not None:
            model.activate(block)

        def action() -> Any:
            if not recording:
                return model(**tiny_inputs(batch=2), **call)
            with model.recording_fusion_attentions():
                return model(**tiny_inputs(batch=2), **call)

        return action

    return prepare


CASES: tuple[BadInput, ...] = (
    B(
        "recording-stack-of-fusions",
        GROUP,
        "model.activate(af.Stack('f', 'g')); model(**batch, output_fusion_attentions=True)",
        af.ConfigError,
        ("one fusion's weights per site", "['f', 'g']", "model.activated(fusion='f')"),
        _called(af.Stack("f", "g"), output_fusion_attentions=True),
    ),
    B(
        "recording-stack-of-fusions-in-block",
        GROUP,
        "model.activate(af.Stack('f', 'g')); model(**batch) inside model.recording_fusion_attentions()",
        af.ConfigError,
        ("one fusion's weights per site", "['f', 'g']", "a Stack with one fusion"),
        _called(af.Stack("f", "g"), recording=True),
    ),
    B(
        "recording-routed-call-in-block",
        GROUP,
        "model(**batch, adapter_names=['f', 'a']) inside model.recording_fusion_attentions()",
        af.ConfigError,
        ("one fusion's weights for every row", "adapter_names=", "model.activated(fusion=...)"),
        _called(None, recording=True, adapter_names=["f", "a"]),
    ),
    B(
        "recording-parallel-in-block",
        GROUP,
        "model.activate(af.Parallel('f', 'a')); model(**batch) inside model.recording_fusion_attentions()",
        af.ConfigError,
        ("one fusion's weights for every row", "Parallel"),
        _called(af.Parallel("f", "a"), recording=True),
    ),
)
