"""Gradient checkpointing on decoders and encoder-decoders: every layer recomputed in the backward pass (its sites
take the residual stream again from their norms' pre-hooks) gives the gradients of the plain backward, float64."""

from __future__ import annotations

import pytest
import torch

import adapterfusion as af
from adapterfusion.training.gradient_checkpointing import checkpointed_activations
from tiny_decoders import tiny_decoder, tiny_decoder_inputs
from tolerances import assert_close


def _gradients(model: af.AdaptedModel, inputs: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], int]:
    calls: list[int] = []
    handles = [site.register_forward_pre_hook(lambda *_: calls.append(1)) for site in model.sites]
    try:
        labels = inputs.get("decoder_input_ids", inputs["input_ids"])
        torch.manual_seed(7)  # the same dropout masks in both passes (GPT-2, T5 and BART train with dropout)
        model(**inputs, labels=labels).loss.backward()
    finally:
        for handle in handles:
            handle.remove()
    gradients = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad and p.grad is not None}
    model.zero_grad(set_to_none=True)
    return gradients, len(calls)


@pytest.mark.parametrize("model_type", ["gpt2", "llama", "gemma2", "t5", "bart"])
def test_checkpointed_decoder_gradients_equal_the_plain_ones(model_type: str) -> None:
    model = af.wrap(tiny_decoder(model_type, dtype=torch.float64))
    for name in ("a", "b"):
        model.add_adapter(name, af.AdapterConfig.pfeiffer(4, init="bert"))
    model.add_fusion("f", ["a", "b"])
    model.train_fusion("f")
    model.activate(fusion="f")
    model.train()
    inputs = tiny_decoder_inputs(model_type)
    plain, plain_calls = _gradients(model, inputs)
    with checkpointed_activations(model):
        checkpointed, checkpointed_calls = _gradients(model, inputs)
    assert checkpointed_calls == 2 * plain_calls  # each site ran again in the backward pass
    assert plain.keys() == checkpointed.keys() and plain
    for name in plain:
        assert_close(checkpointed[name], plain[name], label=name)
