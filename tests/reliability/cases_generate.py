"""Bad-input cases at one boundary, generation settings: generate()'s numeric settings of the wrong type or value
(forward_inputs/generate_settings.py), a numpy scalar among them, and integer ids or labels of another dtype than
torch.long (forward_inputs/tokens.py, labels.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

import adapterfusion as af
from catalogue import Action, BadInput
from tiny_decoders import tiny_decoder, tiny_decoder_inputs

B = BadInput
GROUP = "generation settings"


def _lm(model_type: str) -> af.AdaptedModel:
    """A tiny language model of `model_type` (tiny_decoders.py) with adapter 'a' active and no head."""
    model = af.wrap(tiny_decoder(model_type))
    model.add_adapter("a")
    model.activate(adapter="a")
    return model


def _generate(model_type: str = "gpt2", **changes: Any) -> Callable[[Path], Action]:
    """_lm(model_type).generate(**tiny_decoder_inputs(model_type), max_new_tokens=2, pad_token_id=0, with
    `changes`); a value None drops that input."""

    def prepare(folder: Path) -> Action:
        model = _lm(model_type)
        inputs: dict[str, Any] = {**tiny_decoder_inputs(model_type), "max_new_tokens": 2, "pad_token_id": 0}
        inputs.update(changes)
        return lambda: model.generate(**{key: value for key, value in inputs.items() if value is not None})

    return prepare


def _int32_labels(folder: Path) -> Action:
    """A tiny Llama's loss on int32 labels, compared with its loss on the same labels as int64."""
    model = _lm("llama")
    inputs = tiny_decoder_inputs("llama")
    labels = inputs["input_ids"]

    def action() -> str:
        narrow, wide = model(**inputs, labels=labels.int()).loss, model(**inputs, labels=labels).loss
        return f"int32 labels give the int64 labels' loss: {bool(torch.equal(narrow, wide))}"

    return action


CASES: tuple[BadInput, ...] = (
    B(
        "generate-max-new-tokens-numpy",
        GROUP,
        "generate(max_new_tokens=np.int64(100)) of a 7-token prompt, GPT-2 of 64 positions (was an IndexError "
        "mid-generation: the positions check skipped a length that is not a Python int)",
        af.ConfigError,
        ("107 tokens", "max_new_tokens=100", "64", "at most 57"),
        _generate(max_new_tokens=np.int64(100)),
    ),
    B(
        "generate-num-beams-zero",
        GROUP,
        "generate(num_beams=0) (was a ZeroDivisionError from transformers)",
        af.ConfigError,
        ("generate()", "num_beams=0", "an integer greater than 0"),
        _generate("llama", num_beams=0),
    ),
    B(
        "generate-ids-uint8",
        GROUP,
        "generate(input_ids=<uint8 tensor>), Llama (was a RuntimeError from torch's embedding)",
        af.ConfigError,
        ("input_ids", "torch.uint8", "torch.long", "input_ids.long()"),
        _generate("llama", input_ids=tiny_decoder_inputs("llama")["input_ids"].to(torch.uint8)),
    ),
    B(
        "lm-labels-int32",
        GROUP,
        "int32 causal-LM labels (not an error; was a RuntimeError from cross_entropy: 'expected target dtype to be "
        "Long')",
        None,
        ("int32 labels give the int64 labels' loss: True",),
        _int32_labels,
    ),
)
