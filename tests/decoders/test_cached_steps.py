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


def _cache_of(model_type: str, **overrides: int) -> object:
    """The cache a tiny model of `model_type` returns after 3 tokens of one row."""
    ids = torch.tensor([[11, 42, 17]])
    decoder = {"decoder_input_ids": ids} if model_type in ("t5", "bart") else {}
    with torch.no_grad():
        return tiny_decoder(model_type, **overrides)(input_ids=ids, **decoder, use_cache=True).past_key_values


# (whose cache, words of the message) for a tiny Llama of 2 layers, 2 key/value heads of size 8: each failed in
# transformers' cache code (RuntimeError, IndexError, AttributeError), or was read without a word (3 layers).
FOREIGN_CACHES = [
    ("gpt2", {}, ("keys of 4 heads of size 8 at layer 0", "2 key/value heads of size 8")),
    ("llama", {"head_dim": 4}, ("keys of 2 heads of size 4", "2 key/value heads of size 8")),
    ("llama", {"num_hidden_layers": 1}, ("hold 1 layer but LlamaForCausalLM has 2",)),
    ("llama", {"num_hidden_layers": 3}, ("hold 3 layers but LlamaForCausalLM has 2",)),
    ("bart", {}, ("an EncoderDecoderCache, an encoder-decoder's", "LlamaForCausalLM is a decoder")),
]


@pytest.mark.parametrize(("other", "overrides", "words"), FOREIGN_CACHES, ids=lambda value: str(value))
@pytest.mark.parametrize("call", ["forward", "generate"])
def test_a_cache_made_by_another_model_is_refused(
    call: str, other: str, overrides: dict[str, int], words: tuple[str, ...]
) -> None:
    model = af.wrap(tiny_decoder("llama"))
    cache = _cache_of(other, **overrides)
    ids = torch.tensor([[11, 42, 17, 88]])
    with pytest.raises(af.ConfigError) as caught:
        if call == "forward":
            model(input_ids=ids[:, 3:], attention_mask=torch.ones_like(ids), past_key_values=cache)
        else:
            model.generate(input_ids=ids, past_key_values=cache, max_new_tokens=2)
    assert all(word in str(caught.value) for word in words), str(caught.value)
    assert "made by another model" in str(caught.value) or "a decoder" in str(caught.value)


@pytest.mark.parametrize("model_type", ["llama", "gemma3_text", "t5", "bart"])
def test_a_cache_of_the_same_model_still_passes(model_type: str) -> None:
    """The model's own cache (a decoder's DynamicCache, an encoder-decoder's EncoderDecoderCache)."""
    model = af.wrap(tiny_decoder(model_type))
    cache = _cache_of(model_type)
    ids = torch.tensor([[11, 42, 17, 88]])
    step = {"input_ids": ids, "decoder_input_ids": ids[:, 3:]} if model_type in ("t5", "bart") else {}
    step = step or {"input_ids": ids[:, 3:], "attention_mask": torch.ones_like(ids)}
    with torch.no_grad():
        assert model(**step, past_key_values=cache).logits.shape[:2] == (1, 1)


def test_a_decode_loop_checks_its_caches_layout_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A hand-written decode loop (model(..., past_key_values=cache) per token) checked the cache's layout on every
    step; a cache whose every layer this model filled is not looked at again, while a new one still is."""
    from transformers.cache_utils import DynamicCache

    from adapterfusion.forward_inputs import cache as cache_module

    calls = []
    real = cache_module._head_shapes  # read by each layout check that looks at the cache
    monkeypatch.setattr(cache_module, "_head_shapes", lambda wrapped: calls.append(wrapped) or real(wrapped))
    model = af.wrap(tiny_decoder("llama"))
    ids = torch.tensor([[11, 42, 17, 88]])
    for _ in range(2):
        cache, step = DynamicCache(), ids
        with torch.no_grad():
            for position in range(6):
                mask = torch.ones(1, ids.shape[1] + position, dtype=torch.long)
                logits = model(input_ids=step, attention_mask=mask, past_key_values=cache).logits
                step = logits[:, -1:].argmax(-1)
    assert len(calls) == 2 * 2  # per loop: the empty cache of its first step, then the filled one once


@pytest.mark.parametrize("call", ["forward", "generate"])
@pytest.mark.parametrize("model_type", ["t5", "bart"])
def test_a_decoders_cache_for_an_encoder_decoder_is_refused(call: str, model_type: str) -> None:
    """T5 and BART share a plain Cache between their decoder's self-attention and cross-attention, appending the
    encoder states to the decoder's keys: a RuntimeError from the mask's shape (forward and generate). The cache
    the message advises generates what generate's own cache does."""
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache

    model = af.wrap(tiny_decoder(model_type))
    inputs = tiny_decoder_inputs(model_type)
    prompts = {key: value for key, value in inputs.items() if key != "decoder_input_ids"}
    with pytest.raises(af.ConfigError) as caught:
        if call == "forward":
            model(**inputs, past_key_values=DynamicCache())
        else:
            model.generate(**prompts, past_key_values=DynamicCache(), max_new_tokens=2)
    words = ("past_key_values is a DynamicCache", "is an encoder-decoder", "EncoderDecoderCache(DynamicCache(), Dyn")
    assert all(word in str(caught.value) for word in words), str(caught.value)
    advised = EncoderDecoderCache(DynamicCache(), DynamicCache())
    generated = model.generate(**prompts, past_key_values=advised, max_new_tokens=3)
    assert torch.equal(generated, model.generate(**prompts, max_new_tokens=3))
