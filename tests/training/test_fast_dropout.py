"""training/fast_dropout.py: the same dropout distribution as torch's, exact attention around it, and a swap that is
undone. References are torch's own functions and the literal formulas, in float64."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from adapterfusion.training.fast_dropout import dropout, fast_dropout, keep_mask, scaled_dot_product_attention
from tolerances import assert_close

TORCH_DROPOUT, TORCH_ATTENTION = F.dropout, F.scaled_dot_product_attention


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_keep_rate_and_scale_match_torch_dropout(p: float, dtype: torch.dtype) -> None:
    """Kept elements are x / (1 - p), the rest 0, and the keep rate is 1 - p within 5 standard errors, in bf16 too
    (whose own uniforms would round p)."""
    torch.manual_seed(0)
    x = torch.full((400_000,), 3.0, dtype=dtype)
    out = dropout(x, p)
    kept = out != 0
    resolution = {torch.float32: 1e-6, torch.bfloat16: 1e-2}[dtype]  # one rounding of 3 / (1 - p) in the dtype
    assert torch.allclose(out[kept].double(), torch.tensor(3.0 / (1 - p), dtype=torch.float64), rtol=resolution)
    rate = kept.double().mean().item()
    assert abs(rate - (1 - p)) < 5 * math.sqrt(p * (1 - p) / x.numel())


def test_identity_without_training_or_p_and_zero_at_p_one() -> None:
    x = torch.randn(5, 7)
    assert dropout(x, 0.3, training=False) is x
    assert dropout(x, 0.0) is x
    assert torch.all(dropout(x, 1.0) == 0)
    with pytest.raises(ValueError, match="between 0 and 1"):
        dropout(x, 1.5)


def test_inplace_and_gradient_are_the_mask_scaled() -> None:
    torch.manual_seed(1)
    x = torch.randn(64, 32, dtype=torch.float64, requires_grad=True)
    out = dropout(x, 0.25)
    out.backward(torch.ones_like(out))
    scaled_mask = (out != 0).double() / 0.75
    assert_close(x.grad, scaled_mask)
    assert_close(out, x.detach() * scaled_mask)
    y = torch.randn(64, 32)
    before = y.clone()
    result = dropout(y, 0.25, inplace=True)
    assert result is y and torch.all((y == 0) | torch.isclose(y, before / 0.75, rtol=1e-6, atol=0))


def test_the_mask_comes_from_the_global_generator() -> None:
    """Seeded runs, resumes and checkpoint recomputation replay the same masks."""
    x = torch.randn(32, 16)
    torch.manual_seed(7)
    first = dropout(x, 0.4)
    torch.manual_seed(7)
    second = dropout(x, 0.4)
    torch.manual_seed(7)
    mask = keep_mask(x.shape, 0.4, x)
    assert torch.equal(first, second)
    assert torch.equal(first != 0, mask)


def _qkv(masked: str | None):
    generator = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 3, 5, 4, dtype=torch.float64, generator=generator) for _ in range(3))
    mask = None
    if masked == "bool":
        mask = torch.ones(2, 1, 5, 5, dtype=torch.bool)
        mask[1, ..., 3:] = False  # the second example's last two keys are padding
    elif masked == "float":
        mask = torch.zeros(2, 1, 5, 5, dtype=torch.float64)
        mask[1, ..., 3:] = torch.finfo(torch.float64).min
    return q, k, v, mask


@pytest.mark.parametrize("masked", [None, "bool", "float"])
def test_attention_with_dropout_is_softmax_then_masked_probabilities(masked: str | None) -> None:
    """With dropout the math path: softmax(q kᵀ · scale + mask), dropped with the mask the generator gives, @ v."""
    q, k, v, mask = _qkv(masked)
    torch.manual_seed(11)
    out = scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.3, scale=0.7)
    torch.manual_seed(11)
    keep = keep_mask(torch.Size((2, 3, 5, 5)), 0.3, q)
    scores = q @ k.transpose(-2, -1) * 0.7
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    expected = (scores.softmax(-1) * keep / 0.7) @ v
    assert_close(out, expected)


@pytest.mark.parametrize("masked", [None, "bool", "float"])
def test_attention_averages_to_torchs_attention_without_dropout(masked: str | None) -> None:
    """Dropout is unbiased: the mean over many draws approaches torch's SDPA without dropout (independent of how
    the masks are drawn); without dropout it is torch's SDPA itself."""
    q, k, v, mask = _qkv(masked)
    reference = TORCH_ATTENTION(q, k, v, attn_mask=mask)
    assert_close(scaled_dot_product_attention(q, k, v, attn_mask=mask), reference)
    torch.manual_seed(0)
    mean = torch.stack([scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.2) for _ in range(4000)])
    assert (mean.mean(0) - reference).abs().max().item() < 0.05


def test_fully_masked_query_gets_zeros_not_nan() -> None:
    q, k, v, _ = _qkv(None)
    mask = torch.ones(2, 1, 5, 5, dtype=torch.bool)
    mask[0, :, 2] = False  # query 2 of the first example sees no key
    out = scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.1)
    assert not torch.isnan(out).any()
    assert torch.all(out[0, :, 2] == 0)


def test_swap_is_seen_by_modules_and_undone_even_on_error() -> None:
    layer = nn.Dropout(0.5).train()
    x = torch.randn(1000)
    with fast_dropout():
        assert F.dropout is dropout and F.scaled_dot_product_attention is scaled_dot_product_attention
        torch.manual_seed(2)
        inside = layer(x)
    torch.manual_seed(2)
    assert torch.equal(inside != 0, keep_mask(x.shape, 0.5, x))
    assert F.dropout is TORCH_DROPOUT and F.scaled_dot_product_attention is TORCH_ATTENTION
    with pytest.raises(RuntimeError, match="boom"), fast_dropout():
        raise RuntimeError("boom")
    assert F.dropout is TORCH_DROPOUT and F.scaled_dot_product_attention is TORCH_ATTENTION
    with fast_dropout(enabled=False):
        assert F.dropout is TORCH_DROPOUT


def test_tensors_off_the_cpu_go_to_torchs_own_functions(monkeypatch) -> None:
    """On CUDA torch's dropout and SDPA fuse the mask into one kernel: the swap must not replace them there. Checked
    on the meta device (any non-CPU device takes the same branch): keep_mask is never reached."""
    from adapterfusion.training import fast_dropout as module

    def no_mask(*args, **kwargs):
        raise AssertionError("keep_mask was called for a tensor off the CPU")

    monkeypatch.setattr(module, "keep_mask", no_mask)
    x = torch.empty(4, 8, device="meta")
    assert dropout(x, 0.3).device.type == "meta"
    q = torch.empty(2, 3, 5, 4, device="meta")
    assert scaled_dot_product_attention(q, q, q, dropout_p=0.2).shape == (2, 3, 5, 4)
