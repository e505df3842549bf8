"""generate() with a choice per prompt (issue #24 item 1 on decoders): `model.generate(..., adapter_names=[...])`
gives each prompt what it gets generated alone with its choice active, through greedy search, beam search,
returned sequences and an encoder-decoder's encoder and decoder. Float64 tiny models, so batched and single-row
arithmetic pick the same tokens."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import adapterfusion as af
from tiny_decoders import randomise_pieces, tiny_decoder, tiny_decoder_inputs

CHOICES: list[Any] = ["a", "f", None, "b", af.Stack("a", "b")]
PROMPTS = len(CHOICES)


def _model(model_type: str) -> af.AdaptedModel:
    model = af.wrap(tiny_decoder(model_type, dtype=torch.float64))
    if not model.model.config.is_encoder_decoder:
        model.model.set_attn_implementation("sdpa")  # eager float64 attention turns left padding's rows into NaN
    for name in ("a", "b", "c"):
        model.add_adapter(name, af.AdapterConfig.pfeiffer(4))
    model.add_fusion("f", ["a", "b", "c"])
    randomise_pieces(model, seed=5)
    return model


def _prompts(model_type: str) -> dict[str, torch.Tensor]:
    inputs = tiny_decoder_inputs(model_type, batch=PROMPTS, seq=6, padding_side="left")  # as a decoder generates
    inputs.pop("decoder_input_ids", None)
    return inputs


def _alone(model: af.AdaptedModel, inputs: dict[str, torch.Tensor], row: int, choice: Any, **options: Any) -> Any:
    """What prompt `row` gets generated in a batch of its own with `choice` active."""
    one = {key: value[row : row + 1] for key, value in inputs.items()}
    kind = "fusion" if choice == "f" else "adapter"
    with model.activated(**({kind: choice} if choice is not None else {})):
        return model.generate(**one, **options)


@pytest.mark.parametrize("model_type", ["llama", "gpt2", "t5", "bart"])
def test_each_prompt_generates_what_it_generates_alone_with_its_choice(model_type: str) -> None:
    model = _model(model_type)
    inputs = _prompts(model_type)
    options: dict[str, Any] = dict(max_new_tokens=5, do_sample=False, pad_token_id=0)
    routed = model.generate(**inputs, adapter_names=CHOICES, **options)
    alone = [_alone(model, inputs, row, choice, **options) for row, choice in enumerate(CHOICES)]
    for row, tokens in enumerate(alone):
        assert torch.equal(routed[row, : tokens.shape[1]], tokens[0]), f"prompt {row} ({CHOICES[row]!r})"
    # the choices matter: the same prompts with one adapter for all give other tokens
    assert not torch.equal(routed, model.generate(**inputs, adapter_names=["a"] * PROMPTS, **options))
    assert model.active_adapter is None and model.state.routing is None  # nothing stays routed


@pytest.mark.parametrize("model_type", ["qwen2", "t5"])
def test_beams_and_returned_sequences_keep_their_prompts_choice(model_type: str) -> None:
    model = _model(model_type)
    inputs = _prompts(model_type)
    options: dict[str, Any] = dict(
        max_new_tokens=4, do_sample=False, num_beams=3, num_return_sequences=2, pad_token_id=0
    )
    routed = model.generate(**inputs, adapter_names=CHOICES, **options)
    assert routed.shape[0] == 2 * PROMPTS
    for row, choice in enumerate(CHOICES):
        tokens = _alone(model, inputs, row, choice, **options)
        assert torch.equal(routed[2 * row : 2 * row + 2, : tokens.shape[1]], tokens), f"prompt {row} ({choice!r})"


def test_an_active_batch_split_routes_generate_as_adapter_names_does() -> None:
    model = _model("llama")
    inputs = _prompts("llama")
    options: dict[str, Any] = dict(max_new_tokens=4, do_sample=False, pad_token_id=0)
    expected = model.generate(**inputs, adapter_names=["a", "a", "b", "b", "b"], **options)
    model.activate(af.BatchSplit("a", "b", batch_sizes=[2, 3]))
    assert torch.equal(model.generate(**inputs, **options), expected)


def test_routed_generation_refuses_what_it_cannot_run() -> None:
    model = _model("llama")
    inputs = _prompts("llama")
    with pytest.raises(af.ConfigError, match=f"{PROMPTS} examples"):
        model.generate(**inputs, adapter_names=["a", "b"], max_new_tokens=2, pad_token_id=0)
    with pytest.raises(af.NameNotFoundError, match="'nope'"):
        model.generate(**inputs, adapter_names=["a", "nope", None, "b", "a"], max_new_tokens=2, pad_token_id=0)
    with pytest.raises(af.ConfigError, match="a list with one entry per example"):
        model.generate(**inputs, adapter_names="a", max_new_tokens=2, pad_token_id=0)
    with pytest.raises(af.ConfigError, match="recording fusion attentions"):
        with model.recording_fusion_attentions():
            model.generate(**inputs, adapter_names=CHOICES, max_new_tokens=2, pad_token_id=0)
    model.activate(af.Parallel("a", "b"))
    with pytest.raises(af.ConfigError, match="Parallel"):
        model.generate(**inputs, max_new_tokens=2, pad_token_id=0)
    assert model.state.routing is None
