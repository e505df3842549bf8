"""Dropout whose keep-mask costs half as much to draw on CPU, for the duration of training.

torch's CPU dropout draws its mask with `bernoulli_`, about 7 ns per element on a 2-core AVX2 machine. In a
one-adapter training step of MiniLM at batch 32 that is 21–24 % of the step; most of it is the attention
probabilities' dropout inside SDPA's math path ([batch, heads, seq, seq] per layer). `torch.rand(...) >= p` draws
the same Bernoulli(1 - p) keep-mask, from the same generator, in about half the time (benchmarks/README.md).

`fast_dropout()` swaps `torch.nn.functional.dropout` and `torch.nn.functional.scaled_dot_product_attention` for the
functions below while it is open (the HF Trainer's `train()`, MT-A's loop). Every `nn.Dropout` and every encoder
that calls SDPA looks these names up at call time, so they pick the swap up; nothing else changes. Outside training
(p = 0, eval mode), and for tensors on an accelerator, both functions hand over to torch's own unchanged: on CUDA,
torch's dropout is one fused kernel and SDPA's flash and memory-efficient kernels fuse the attention dropout, both
faster than a separate mask. What changes is only which random numbers a seed gives, not their distribution: the
runs stay exactly reproducible, resumable and checkpoint-recomputable.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import torch
import torch.nn.functional as F

_TORCH_DROPOUT = F.dropout
_TORCH_ATTENTION = F.scaled_dot_product_attention


def keep_mask(shape: torch.Size, p: float, like: torch.Tensor) -> torch.Tensor:
    """Bernoulli(1 - p) as a bool tensor. Uniforms are drawn in float32 at least: a bf16/fp16 uniform has 8–11
    bits, which would round the keep probability itself."""
    dtype = torch.float64 if like.dtype == torch.float64 else torch.float32
    return torch.rand(shape, dtype=dtype, device=like.device) >= p


def dropout(input: torch.Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> torch.Tensor:
    """`torch.nn.functional.dropout`, same signature and distribution, drawn with `keep_mask` on CPU."""
    if input.device.type != "cpu":
        return _TORCH_DROPOUT(input, p, training, inplace)
    if not training or p == 0.0:
        return input
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if p == 1.0:
        return input.mul_(0) if inplace else input * 0
    scaled_mask = keep_mask(input.shape, p, input).to(input.dtype) * (1.0 / (1.0 - p))
    return input.mul_(scaled_mask) if inplace else input * scaled_mask


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> torch.Tensor:
    """`torch.nn.functional.scaled_dot_product_attention`; with attention dropout it runs the math path (what torch
    itself runs on CPU when dropout_p > 0) with `dropout` on the probabilities. Causal and grouped-query attention,
    everything without dropout and everything off the CPU go to torch's own function unchanged."""
    if dropout_p == 0.0 or is_causal or enable_gqa or query.device.type != "cpu":
        return _TORCH_ATTENTION(
            query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
            enable_gqa=enable_gqa,
        )  # fmt: skip
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = (query * scale) @ key.transpose(-2, -1)
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    # A query whose keys are all masked gets zeros, as torch's math path gives, not NaN.
    probs = torch._safe_softmax(scores, -1) if hasattr(torch, "_safe_softmax") else scores.softmax(-1)
    return dropout(probs, dropout_p) @ value


@contextlib.contextmanager
def fast_dropout(enabled: bool = True) -> Iterator[None]:
    """While open, dropout anywhere in this process draws its masks with `keep_mask` (see the module docstring).
    Restores whatever was installed before, also on error; enabled=False leaves torch alone."""
    if not enabled:
        yield
        return
    before = F.dropout, F.scaled_dot_product_attention
    F.dropout, F.scaled_dot_product_attention = dropout, scaled_dot_product_attention
    try:
        yield
    finally:
        F.dropout, F.scaled_dot_product_attention = before
