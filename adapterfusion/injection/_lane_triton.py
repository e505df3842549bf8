"""The Triton kernels of lane_kernels.py (imported only where Triton is installed: CUDA machines have it).

Each program writes BLOCK_N output columns of one row; loads are converted to float32 and sums accumulate in it.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _activate(x, KIND: tl.constexpr, slope):  # noqa: N803 - Triton's constexpr convention
    """lane_kernels.activation_kind's numbering: ReLU, SiLU, GELU (erf), GELU (tanh), Tanh, LeakyReLU."""
    if KIND == 0:
        y = tl.where(x < 0.0, 0.0, x)  # NaN stays NaN, as in torch.relu (tl.maximum would make it 0)
    elif KIND == 1:
        y = x * tl.sigmoid(x)
    elif KIND == 2:
        y = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
    elif KIND == 3:
        inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
        y = 0.5 * x * (2.0 * tl.sigmoid(2.0 * inner))
    elif KIND == 4:
        y = 2.0 * tl.sigmoid(2.0 * x) - 1.0
    else:
        y = tl.where(x >= 0.0, x, x * slope)
    return y


@triton.jit
def _bottleneck(
    x_ptr,
    down_ptr,
    down_bias_ptr,
    row,
    units,
    unit_mask,
    d_in,
    slope,
    HAS_DOWN_BIAS: tl.constexpr,  # noqa: N803
    KIND: tl.constexpr,  # noqa: N803
    BLOCK_K: tl.constexpr,  # noqa: N803
):
    """act(down(x[row]))[units] in float32, 0 where `unit_mask` is not set: the down-projection in BLOCK_K columns at
    a time."""
    z = tl.zeros(units.shape, dtype=tl.float32)
    for start in range(0, d_in, BLOCK_K):
        k = start + tl.arange(0, BLOCK_K)
        k_mask = k < d_in
        xk = tl.load(x_ptr + row * d_in + k, mask=k_mask, other=0.0).to(tl.float32)
        w = tl.load(
            down_ptr + units[:, None] * d_in + k[None, :], mask=unit_mask[:, None] & k_mask[None, :], other=0.0
        ).to(tl.float32)
        z += tl.sum(w * xk[None, :], axis=1)
    if HAS_DOWN_BIAS:
        z += tl.load(down_bias_ptr + units, mask=unit_mask, other=0.0).to(tl.float32)
    return tl.where(unit_mask, _activate(z, KIND, slope), 0.0)


@triton.jit
def _up_to_out(
    z,
    residual_ptr,
    up_ptr,
    up_bias_ptr,
    out_ptr,
    row,
    units,
    unit_mask,
    size,
    d_out,
    scaling,
    HAS_UP_BIAS: tl.constexpr,  # noqa: N803
    BLOCK_N: tl.constexpr,  # noqa: N803
):
    """out[row, cols] = residual + scaling * (up(z))[cols] for this program's BLOCK_N output columns."""
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < d_out
    u = tl.load(
        up_ptr + cols[:, None] * size + units[None, :], mask=col_mask[:, None] & unit_mask[None, :], other=0.0
    ).to(tl.float32)
    y = tl.sum(u * z[None, :], axis=1)
    if HAS_UP_BIAS:
        y += tl.load(up_bias_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    y = y * scaling + tl.load(residual_ptr + row * d_out + cols, mask=col_mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * d_out + cols, y.to(out_ptr.dtype.element_ty), mask=col_mask)


@triton.jit
def adapter_kernel(
    x_ptr,
    residual_ptr,
    down_ptr,
    down_bias_ptr,
    up_ptr,
    up_bias_ptr,
    out_ptr,
    d_in,
    size,
    d_out,
    scaling,
    slope,
    HAS_DOWN_BIAS: tl.constexpr,  # noqa: N803
    HAS_UP_BIAS: tl.constexpr,  # noqa: N803
    KIND: tl.constexpr,  # noqa: N803
    BLOCK_M: tl.constexpr,  # noqa: N803
    BLOCK_K: tl.constexpr,  # noqa: N803
    BLOCK_N: tl.constexpr,  # noqa: N803
):
    """out[row, cols] = residual + scaling * (up(act(down(x[row]))))[cols]; weights as nn.Linear holds them."""
    row = tl.program_id(0)
    units = tl.arange(0, BLOCK_M)
    unit_mask = units < size
    z = _bottleneck(x_ptr, down_ptr, down_bias_ptr, row, units, unit_mask, d_in, slope, HAS_DOWN_BIAS, KIND, BLOCK_K)
    _up_to_out(
        z, residual_ptr, up_ptr, up_bias_ptr, out_ptr, row, units, unit_mask, size, d_out, scaling, HAS_UP_BIAS, BLOCK_N
    )


@triton.jit
def _probabilities(
    base,
    flush,
    slope,
    COUNT: tl.constexpr,  # noqa: N803
    SIZE: tl.constexpr,  # noqa: N803
    KIND: tl.constexpr,  # noqa: N803
    FLUSH: tl.constexpr,  # noqa: N803
    BLOCK_C: tl.constexpr,  # noqa: N803
    BLOCK_S: tl.constexpr,  # noqa: N803
):
    """(act(a) as [BLOCK_C, BLOCK_S], p = softmax(sum_units(act(a) * q) + v) as [BLOCK_C]) of the joint product's row at
    `base`; 0 outside COUNT adapters and SIZE units."""
    total = COUNT * SIZE
    adapters = tl.arange(0, BLOCK_C)
    units = tl.arange(0, BLOCK_S)
    adapter_mask = adapters < COUNT
    tile_mask = adapter_mask[:, None] & (units < SIZE)[None, :]
    at = adapters[:, None] * SIZE + units[None, :]
    a = tl.load(base + at, mask=tile_mask, other=0.0).to(tl.float32)
    a = tl.where(tile_mask, _activate(a, KIND, slope), 0.0)
    q = tl.load(base + total + at, mask=tile_mask, other=0.0).to(tl.float32)
    v = tl.load(base + 2 * total + adapters, mask=adapter_mask, other=0.0).to(tl.float32)
    scores = tl.where(adapter_mask, tl.sum(a * q, axis=1) + v, float("-inf"))
    e = tl.where(adapter_mask, tl.exp(scores - tl.max(scores, axis=0)), 0.0)
    p = e / tl.sum(e, axis=0)
    if FLUSH:
        p = tl.where(p > flush, p, 0.0)
    return a, p


@triton.jit
def adapter_down_kernel(
    x_ptr,
    down_ptr,
    down_bias_ptr,
    z_ptr,
    d_in,
    size,
    slope,
    HAS_DOWN_BIAS: tl.constexpr,  # noqa: N803
    KIND: tl.constexpr,  # noqa: N803
    BLOCK_U: tl.constexpr,  # noqa: N803
    BLOCK_K: tl.constexpr,  # noqa: N803
):
    """z[row, units] = act(down(x[row]))[units] for BLOCK_U units a program (float32): the first half of an adapter
    site split in two kernels, so that no program reads the whole down-projection (adapter_kernel's each do)."""
    row = tl.program_id(0)
    units = tl.program_id(1) * BLOCK_U + tl.arange(0, BLOCK_U)
    unit_mask = units < size
    z = _bottleneck(x_ptr, down_ptr, down_bias_ptr, row, units, unit_mask, d_in, slope, HAS_DOWN_BIAS, KIND, BLOCK_K)
    tl.store(z_ptr + row * size + units, z, mask=unit_mask)


@triton.jit
def adapter_up_kernel(
    z_ptr,
    residual_ptr,
    up_ptr,
    up_bias_ptr,
    out_ptr,
    size,
    d_out,
    scaling,
    HAS_UP_BIAS: tl.constexpr,  # noqa: N803
    BLOCK_M: tl.constexpr,  # noqa: N803
    BLOCK_N: tl.constexpr,  # noqa: N803
):
    """out[row, cols] = residual + scaling * (up(z[row]))[cols]: the second half of the split adapter site."""
    row = tl.program_id(0)
    units = tl.arange(0, BLOCK_M)
    unit_mask = units < size
    z = tl.load(z_ptr + row * size + units, mask=unit_mask, other=0.0)
    _up_to_out(
        z, residual_ptr, up_ptr, up_bias_ptr, out_ptr, row, units, unit_mask, size, d_out, scaling, HAS_UP_BIAS, BLOCK_N
    )


@triton.jit
def fusion_tail_kernel(
    both_ptr,
    residual_ptr,
    outputs_ptr,
    out_ptr,
    width,
    d,
    flush,
    slope,
    COUNT: tl.constexpr,  # noqa: N803
    SIZE: tl.constexpr,  # noqa: N803
    KIND: tl.constexpr,  # noqa: N803
    FLUSH: tl.constexpr,  # noqa: N803
    BLOCK_C: tl.constexpr,  # noqa: N803
    BLOCK_S: tl.constexpr,  # noqa: N803
    BLOCK_N: tl.constexpr,  # noqa: N803
    BLOCK_R: tl.constexpr,  # noqa: N803
):
    """out[row, cols] = residual + [act(a) * p, p] @ outputs[:, cols], p = softmax(sum_units(act(a) * q) + v):
    lanes._traced_fusion_step from the joint product on (a, q, v: a row of `both`, `width` wide). The output product
    per adapter (BLOCK_R 0: a [BLOCK_S, BLOCK_N] tile each, units padded to a power of two) or over the adapters'
    units as one flat index, BLOCK_R rows of `outputs` at a time (nothing padded)."""
    row = tl.program_id(0)
    total = COUNT * SIZE
    adapters = tl.arange(0, BLOCK_C)
    units = tl.arange(0, BLOCK_S)
    adapter_mask = adapters < COUNT
    unit_mask = units < SIZE
    base = both_ptr + row * width
    a, p = _probabilities(base, flush, slope, COUNT, SIZE, KIND, FLUSH, BLOCK_C, BLOCK_S)
    weighted = a * p[:, None]
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < d
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    if BLOCK_R == 0:
        for adapter in tl.static_range(COUNT):
            mine = tl.sum(tl.where(adapters[:, None] == adapter, weighted, 0.0), axis=0)
            o = tl.load(
                outputs_ptr + (adapter * SIZE + units)[:, None] * d + cols[None, :],
                mask=unit_mask[:, None] & col_mask[None, :],
                other=0.0,
            ).to(tl.float32)
            acc += tl.sum(o * mine[:, None], axis=0)
    else:
        # COUNT * SIZE, not `total`: an assigned value is a runtime int to Triton's compiler (its interpreter takes it)
        for start in tl.static_range(0, COUNT * SIZE, BLOCK_R):
            j = start + tl.arange(0, BLOCK_R)
            j_mask = j < total
            a_j = tl.load(base + j, mask=j_mask, other=0.0).to(tl.float32)
            a_j = tl.where(j_mask, _activate(a_j, KIND, slope), 0.0)
            owner = j // SIZE  # the adapter of each unit, whose weight scales it
            scale = tl.sum(tl.where(owner[:, None] == adapters[None, :], p[None, :], 0.0), axis=1)
            o = tl.load(
                outputs_ptr + j[:, None] * d + cols[None, :], mask=j_mask[:, None] & col_mask[None, :], other=0.0
            ).to(tl.float32)
            acc += tl.sum(o * (a_j * scale)[:, None], axis=0)
    o = tl.load(
        outputs_ptr + (total + adapters)[:, None] * d + cols[None, :],
        mask=adapter_mask[:, None] & col_mask[None, :],
        other=0.0,
    ).to(tl.float32)
    acc += tl.sum(o * p[:, None], axis=0)
    acc += tl.load(residual_ptr + row * d + cols, mask=col_mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * d + cols, acc.to(out_ptr.dtype.element_ty), mask=col_mask)
