"""Bad-input cases at one boundary, recording fusion attentions (`output_fusion_attentions=True`,
`model.recording_fusion_attentions()` and `mean_fusion_attention`): calls whose fusion weights one recording, one
fusion's weights per site and call, cannot hold, and batches the mean over real tokens must read right."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import adapterfusion as af
from adapterfusion.analysis import mean_fusion_attention
from catalogue import Action, BadInput
from tiny_decoders import tiny_decoder
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


def _called(block: af.Block | str | None, recording: bool = False, **call: Any) -> Callable[[Path], Action]:
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


def _t5_mean_over_decoder_inputs(folder: Path) -> Action:
    """mean_fusion_attention on a tiny T5 with a fusion f over a and b, one batch of 2 inputs of 6 tokens (row 1 with
    2 padding) and decoder_input_ids of 4 tokens, no decoder_attention_mask."""
    model = af.wrap(tiny_decoder("t5"))
    for name in "ab":
        model.add_adapter(name, "pfeiffer")
    model.add_fusion("f", ["a", "b"])
    ids = torch.tensor([[11, 12, 13, 14, 15, 2], [21, 22, 23, 2, 0, 0]])
    batch = {"input_ids": ids, "attention_mask": (ids != 0).long(), "decoder_input_ids": torch.full((2, 4), 30)}

    def action() -> str:
        result = mean_fusion_attention(model, "f", [batch])
        return f"layers {list(result.layers)}, {result.tokens} real input tokens, every decoder position counted"

    return action


def _one_batch_as_batches(folder: Path) -> Action:
    model = _model()
    return lambda: mean_fusion_attention(model, "f", tiny_inputs(batch=2))


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
    B(
        "recording-mean-seq2seq-decoder-inputs",
        GROUP,
        "mean_fusion_attention(<T5 with fusion f>, 'f', [batch]) whose batch has decoder_input_ids of 4 tokens and "
        "inputs of 6, no decoder_attention_mask (not an error; was a RuntimeError 'shape [2, 4] is invalid', and at "
        "equal lengths the input's padding dropped decoder positions in silence)",
        None,
        ("layers [0, 1, 2, 3]", "10 real input tokens", "every decoder position"),
        _t5_mean_over_decoder_inputs,
    ),
    B(
        "recording-mean-one-batch-as-batches",
        GROUP,
        "mean_fusion_attention(model, 'f', tokenizer_output) (one batch, not a list of batches: was an AttributeError "
        "'str' object has no attribute 'items')",
        af.ConfigError,
        ("got one batch", "[batch]"),
        _one_batch_as_batches,
    ),
    B(
        "recording-no-fusion-active",
        GROUP,
        "model.activate('a'); model(**batch, output_fusion_attentions=True) (returned fusion_attentions of Nones, as "
        "if the fusion had recorded nothing)",
        af.ConfigError,
        ("no fusion is active", "adapter 'a' alone", "model.activate(fusion='f')", "drop output_fusion_attentions"),
        _called("a", output_fusion_attentions=True),
    ),
)
