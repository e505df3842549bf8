"""A cached step through the wrapped model (`model(input_ids=new, attention_mask=..., past_key_values=...)`) takes
the mask transformers' generate builds, covering the cached tokens and the new ones, and gives the logits of the full
forward over the whole sequence, fusion active, a left-padded row included. Float64 tiny models with sdpa attention
(eager float64 attention turns a left-padded row into NaN, upstream); the reference is the uncached full forward."""

from __future__ import annotations

import pytest
import torch

import adapterfusion as af
from tiny_decoders import randomise_pieces, tiny_decoder, tiny_decoder_inputs

NEW = 3  # tokens the cached steps add, one at a time


def _fused(model_type: str) -> af.AdaptedModel:
    model = af.wrap(tiny_decoder(model_type, dtype=torch.float64))
    model.model.set_attn_implementation("sdpa")
    for name in ("a", "b"):
        model.add_adapter(name, af.AdapterConfig.pfeiffer(4))
    model.add_fusion("f", ["a", "b"])
    randomise_pieces(model, seed=3)
    model.activate(fusion="f")
    return model


def _left_padded(model_type: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompt ids and mask of 2 rows, row 1 padded by 2 on the left, then NEW more tokens for every row."""
    ids = tiny_decoder_inputs(model_type, seq=7 + NEW)["input_ids"].clone()
    mask = torch.ones_like(ids)
    ids[1, :2], mask[1, :2] = 0, 0
    return ids, mask


@pytest.mark.parametrize("model_type", ["llama", "gpt2"])
def test_cached_steps_give_the_full_forwards_logits(model_type: str) -> None:
    model = _fused(model_type)
    ids, mask = _left_padded(model_type)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    prompt = ids.shape[1] - NEW
    with torch.no_grad():
        full = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
        out = model(
            input_ids=ids[:, :prompt],
            attention_mask=mask[:, :prompt],
            position_ids=positions[:, :prompt],
            use_cache=True,
        )
        cache, steps = out.past_key_values, [out.logits[:, -1]]
        for end in range(prompt + 1, ids.shape[1] + 1):
            out = model(
                input_ids=ids[:, end - 1 : end],
                attention_mask=mask[:, :end],  # the cached tokens and the new one, as generate passes it
                position_ids=positions[:, end - 1 : end],
                past_key_values=cache,
            )
            cache = out.past_key_values
            steps.append(out.logits[:, -1])
    torch.testing.assert_close(torch.stack(steps, 1), full[:, prompt - 1 :], rtol=1e-10, atol=1e-10)


def test_a_cached_steps_mask_of_the_new_tokens_alone_is_refused() -> None:
    """transformers reads a mask of the new tokens alone as the whole sequence's, and pads the rest: other logits."""
    model = _fused("llama")
    ids, _ = _left_padded("llama")
    with torch.no_grad():
        cache = model(input_ids=ids[:, :7], use_cache=True).past_key_values
        with pytest.raises(af.ConfigError, match=r"\(2, 1\) does not match the inputs' \(2, 8\) \(7 cached tokens"):
            model(input_ids=ids[:, 7:8], attention_mask=torch.ones(2, 1, dtype=torch.long), past_key_values=cache)


def test_generate_counts_a_decoders_positions_by_the_mask() -> None:
    """generate numbers a decoder's positions by the attention mask: left padding takes none, so a batch wider than
    the positions still generates when each row fits, and a row that does not is refused before the first step."""
    model = af.wrap(tiny_decoder("gpt2"))
    ids = torch.full((2, 60), 7)
    mask = torch.ones_like(ids)
    ids[:, :30], mask[:, :30] = 0, 0
    assert model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=10, pad_token_id=0).shape == (2, 70)
    mask[0] = 1
    with pytest.raises(af.ConfigError, match=r"70 tokens per sequence \(60 prompt tokens \+ max_new_tokens=10\)"):
        model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=10, pad_token_id=0)
