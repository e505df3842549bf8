"""One GPU kernel per lane site for decode steps that torch.compile traces (a static cache on CUDA: CUDA graphs).

Inside a CUDA graph an operator costs no dispatch, but every kernel is a launch of a few microseconds, and a decode
step of a small model is made of such launches: an adapter (two matmuls, its activation, the residual add) added four
kernels to each layer, a fusion lane eight. Here an adapter site is one Triton kernel, and a fusion site is its joint
product (one cuBLAS matmul) plus one kernel for everything after it (activation, per-adapter sums, softmax, the output
product and the residual). Each program computes a slice of one row's output and recomputes the few values the slice
needs (a row's bottleneck), so no program waits on another.

Used only where it pays and is safe: on CUDA, with Triton installed, while torch.compile traces, for at most
MAX_ROWS rows (decode steps; a prefill's hundreds of rows run the matmuls), float32/bfloat16/float16, an activation
`activation_kind` knows, and sites small enough (`adapter_fits`). `ADAPTERFUSION_TRITON=0` (or false, off, no) turns
it off (to compare, or to rule it out). A lane asks for its kernel once when it is built (`adapter_kernel`,
`fusion_kernel`: None where the kernels do not take the site) and runs it where its traced step `fits`. The numbers
are those of the traced torch lane up to rounding: sums accumulate in float32 in another order
(tests/decoders/test_lane_kernels.py; on a CPU through Triton's interpreter).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
from collections.abc import Callable, Mapping
from types import ModuleType

import torch
from torch import nn

from adapterfusion.adapters.bottleneck import BottleneckAdapter
from adapterfusion.errors import ConfigError

# kernel(x or the joint product, residual) -> the site's output
SiteKernel = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

TRITON_ENV = "ADAPTERFUSION_TRITON"
MAX_ROWS = 16  # rows a kernel serves: each program recomputes its row's bottleneck, cheap for a decode step's few
BLOCK_N = 32  # output columns a program writes: d / BLOCK_N programs a row
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# Each of a row's d / BLOCK_N programs reads the whole down-projection (d x m) again: past this many numbers read per
# row (d^2 m / BLOCK_N; SmolLM2's 576^2 * 36 / 32 = 373k) the reads cost more than the launches saved, and a
# bottleneck past MAX_UNITS would not fit a program's registers. Larger sites run the torch lane.
MAX_REREAD = 1 << 20
MAX_UNITS = 64
MAX_FUSED = 16  # adapters a fusion kernel takes (its per-adapter loop is unrolled)
# Each kernel's block sizes (powers of two; Triton's default warps). The first lease that ran the kernels
# (benchmarks/README.md, the third lease) measured 6.4 us an adapter site and 7.8 us a fusion tail at SmolLM2's
# shape; benchmarks/lane_kernel_sweep.py times other block sizes and warps on a GPU through `launch=` (warps only
# there, outside a trace). BLOCK_N above stays the size rule's (adapter_fits).
ADAPTER_LAUNCH = {"BLOCK_K": 128, "BLOCK_N": BLOCK_N}
FUSION_LAUNCH = {"BLOCK_N": BLOCK_N}


def activation_kind(activation: nn.Module) -> tuple[int, float] | None:
    """(kind, slope) the kernels compute for `activation`, or None where they have no such activation."""
    if type(activation) is nn.ReLU:
        return 0, 0.0
    if type(activation) is nn.SiLU:
        return 1, 0.0
    if type(activation) is nn.GELU:
        return (2, 0.0) if activation.approximate == "none" else (3, 0.0)
    if type(activation) is nn.Tanh:
        return 4, 0.0
    if type(activation) is nn.LeakyReLU:
        return 5, float(activation.negative_slope)
    return None


def kernels_enabled() -> bool:
    """TRITON_ENV as a switch: unset, empty, 1, true, on or yes leave the kernels on where they apply; 0, false, off
    or no turn them off. Any other value is refused: only "0" turned them off, so "false" or "off" left them on
    without a word."""
    value = os.environ.get(TRITON_ENV, "")
    switch = value.strip().lower()
    if switch in ("0", "false", "off", "no"):
        return False
    if switch in ("", "1", "true", "on", "yes"):
        return True
    raise ConfigError(
        f"the environment variable {TRITON_ENV}={value!r} is not a switch: set it to 0 (or false, off, no) to turn "
        "the Triton kernels of compiled CUDA decode steps off, or to 1 (or unset it) to leave them on"
    )


def prepare(weight: torch.Tensor) -> ModuleType | None:
    """The kernels' module where a lane whose weights are `weight` may use them (CUDA, Triton installed, not turned
    off), else None. Called when the lane is built, outside any trace: the traced step only checks shapes."""
    if not kernels_enabled() or not weight.is_cuda or weight.dtype not in DTYPES:
        return None
    if importlib.util.find_spec("triton") is None or torch.cuda.get_device_capability(weight.device) < (7, 0):
        return None  # Triton compiles for Volta and later
    return importlib.import_module("adapterfusion.injection._lane_triton")


def adapter_kernel(adapter: BottleneckAdapter) -> SiteKernel | None:
    """`adapter`'s site as one kernel, kernel(x, residual) (lanes._adapter_lane), or None where the kernels do not
    take it (an activation they lack, a site too large, no CUDA or Triton)."""
    kind, weight = activation_kind(adapter.activation), adapter.down.weight
    if kind is None or not adapter_fits(weight.shape[1], weight.shape[0]):
        return None
    kernels = prepare(weight)
    if kernels is None:
        return None
    down, up, scaling = adapter.down, adapter.up, adapter.config.scaling
    return functools.partial(adapter_site, kernels, down=down, up=up, scaling=scaling, activation=kind)


def fusion_kernel(
    activation: Callable[[torch.Tensor], torch.Tensor],
    count: int,
    size: int,
    outputs: torch.Tensor,
    flush_below: float | None,
) -> SiteKernel | None:
    """A fusion lane's tail as one kernel, kernel(joint product, residual) (lanes._traced_fusion_step), or None
    where the kernels do not take it (an activation they lack, more than MAX_FUSED adapters or MAX_UNITS units
    each, no CUDA or Triton)."""
    kind = activation_kind(activation) if isinstance(activation, nn.Module) else None
    if kind is None or size > MAX_UNITS or count > MAX_FUSED:
        return None
    kernels = prepare(outputs)
    if kernels is None:
        return None
    return functools.partial(
        fusion_tail, kernels, outputs=outputs, count=count, activation=kind, flush_below=flush_below
    )


def adapter_fits(d: int, units: int) -> bool:
    """Whether an adapter site of width `d` and `units` bottleneck units (a fusion: per adapter) suits the kernels."""
    return units <= MAX_UNITS and d * d * units <= MAX_REREAD * BLOCK_N


def fits(*tensors: torch.Tensor) -> bool:
    """Whether a traced step runs the kernels for these tensors (the first one's rows are the step's rows): while
    torch.compile traces, a decode step's few rows, dtypes the kernels take, all on one CUDA device."""
    first = tensors[0]
    return (
        torch.compiler.is_compiling()
        and first.numel() <= MAX_ROWS * first.shape[-1]
        and all(t.is_cuda and t.dtype in DTYPES and t.device == first.device for t in tensors)
    )


def adapter_site(
    kernels: ModuleType,
    x: torch.Tensor,
    residual: torch.Tensor,
    down: nn.Linear,
    up: nn.Linear,
    scaling: float,
    activation: tuple[int, float],
    launch: Mapping[str, int] | None = None,
) -> torch.Tensor:
    """residual + scaling * up(act(down(x))), one kernel: as lanes._adapter_lane computes it. `launch`: block sizes and
    warps other than ADAPTER_LAUNCH (the sweep's); with BLOCK_U, the site as two kernels (`_split_adapter_site`)."""
    settings = {**ADAPTER_LAUNCH, **(launch or {})}
    rows = x.reshape(-1, x.shape[-1]).contiguous()
    res = residual.reshape(rows.shape[0], -1).contiguous()
    out = torch.empty_like(res)
    if "BLOCK_U" in settings:
        _split_adapter_site(kernels, rows, res, out, down, up, scaling, activation, settings)
        return out.view(residual.shape)
    d_in, size, d_out = rows.shape[1], down.weight.shape[0], up.weight.shape[0]
    grid = (rows.shape[0], -(-d_out // settings["BLOCK_N"]))
    kernels.adapter_kernel[grid](
        rows,
        res,
        *_weight_and_bias(down),
        *_weight_and_bias(up),
        out,
        d_in,
        size,
        d_out,
        float(scaling),
        float(activation[1]),
        HAS_DOWN_BIAS=down.bias is not None,
        HAS_UP_BIAS=up.bias is not None,
        KIND=activation[0],
        BLOCK_M=_power_of_two(size),
        **settings,
    )
    return out.view(residual.shape)


def _split_adapter_site(
    kernels: ModuleType,
    rows: torch.Tensor,
    res: torch.Tensor,
    out: torch.Tensor,
    down: nn.Linear,
    up: nn.Linear,
    scaling: float,
    activation: tuple[int, float],
    settings: Mapping[str, int],
) -> None:
    """adapter_site in two kernels: BLOCK_U bottleneck units a program (no program reads the whole down-projection,
    as each of the one kernel's does), then BLOCK_N output columns a program from the activations in float32."""
    d_in, size, d_out = rows.shape[1], down.weight.shape[0], up.weight.shape[0]
    warps = {key: settings[key] for key in ("num_warps", "num_stages") if key in settings}
    z = torch.empty(rows.shape[0], size, device=rows.device, dtype=torch.float32)
    kernels.adapter_down_kernel[(rows.shape[0], -(-size // settings["BLOCK_U"]))](
        rows,
        *_weight_and_bias(down),
        z,
        d_in,
        size,
        float(activation[1]),
        HAS_DOWN_BIAS=down.bias is not None,
        KIND=activation[0],
        BLOCK_U=settings["BLOCK_U"],
        BLOCK_K=settings["BLOCK_K"],
        **warps,
    )
    kernels.adapter_up_kernel[(rows.shape[0], -(-d_out // settings["BLOCK_N"]))](
        z,
        res,
        *_weight_and_bias(up),
        out,
        size,
        d_out,
        float(scaling),
        HAS_UP_BIAS=up.bias is not None,
        BLOCK_M=_power_of_two(size),
        BLOCK_N=settings["BLOCK_N"],
        **warps,
    )


def fusion_tail(
    kernels: ModuleType,
    both: torch.Tensor,
    residual: torch.Tensor,
    outputs: torch.Tensor,
    count: int,
    activation: tuple[int, float],
    flush_below: float | None,
    launch: Mapping[str, int] | None = None,
) -> torch.Tensor:
    """lanes._traced_fusion_step in one kernel: from the joint product `both` ([rows, 2 * total + count + 1]: the
    adapters' pre-activations, the projected query, the value term, the cancelled key-bias column) and `outputs`
    ([by_activation; by_probability], [total + count, d]) to residual + the fused output. `launch`: block sizes and
    warps other than FUSION_LAUNCH; with BLOCK_R, the output product over the adapters' units as one flat index in
    runs of BLOCK_R (no per-adapter tile padded to a power of two)."""
    settings = {**FUSION_LAUNCH, **(launch or {})}
    both = both.contiguous()
    res = residual.reshape(both.shape[0], -1).contiguous()
    out = torch.empty_like(res)
    total, d = outputs.shape[0] - count, outputs.shape[1]
    size = total // count
    grid = (both.shape[0], -(-d // settings["BLOCK_N"]))
    kernels.fusion_tail_kernel[grid](
        both,
        res,
        outputs.contiguous(),
        out,
        both.shape[1],
        d,
        float(flush_below or 0.0),
        float(activation[1]),
        COUNT=count,
        SIZE=size,
        KIND=activation[0],
        FLUSH=flush_below is not None,
        BLOCK_C=_power_of_two(count),
        BLOCK_S=_power_of_two(size),
        BLOCK_R=settings.pop("BLOCK_R", 0),  # 0: the output product per adapter
        **settings,
    )
    return out


def _weight_and_bias(linear: nn.Linear) -> tuple[torch.Tensor, torch.Tensor]:
    """A projection's weight and bias as a kernel takes them: the weight again in place of a missing bias (the kernel
    reads it only where its HAS_*_BIAS flag is set)."""
    return linear.weight.contiguous(), linear.bias if linear.bias is not None else linear.weight


def _power_of_two(n: int) -> int:
    return max(2, 1 << (n - 1).bit_length())
