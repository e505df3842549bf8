"""The lane kernels (injection/lane_kernels.py): one Triton kernel per adapter site, and one after the joint product
per fusion site, in CUDA-graphed decode steps. Each must compute what the traced torch lane computes, up to float32
rounding (they accumulate in float32 in another order).

Triton is not a dependency: these run where it is installed, on a GPU, or on a CPU through Triton's interpreter
(`TRITON_INTERPRET=1`, set here when no GPU is seen). The end-to-end test (a compiled static-cache generate uses the
kernels and gives the eager tokens) needs CUDA."""

from __future__ import annotations

import importlib
import os
from typing import Any

import pytest
import torch
from torch import nn

ON_GPU = torch.cuda.is_available()
if not ON_GPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before Triton and the kernels' module are first imported
pytest.importorskip("triton", reason="needs Triton")

from adapterfusion.injection import lane_kernels  # noqa: E402
from adapterfusion.injection.lanes import _traced_fusion_step  # noqa: E402
from tolerances import assert_close  # noqa: E402

DEVICE = torch.device("cuda" if ON_GPU else "cpu")
KERNELS = importlib.import_module("adapterfusion.injection._lane_triton")
ACTIVATIONS = [nn.ReLU(), nn.SiLU(), nn.GELU(), nn.GELU(approximate="tanh"), nn.Tanh(), nn.LeakyReLU(0.1)]


def _randn(*shape: int, generator: torch.Generator, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, generator=generator, dtype=torch.float64) * scale).to(DEVICE)


@pytest.mark.parametrize("activation", ACTIVATIONS, ids=lambda a: repr(a))
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("rows", [1, 3])
def test_the_adapter_kernel_is_the_adapter(activation: nn.Module, bias: bool, rows: int) -> None:
    generator = torch.Generator().manual_seed(rows)
    d, size = 72, 9  # neither a power of two: every mask acts
    down, up = nn.Linear(d, size, bias=bias), nn.Linear(size, d, bias=bias)
    with torch.no_grad():
        for parameter in [*down.parameters(), *up.parameters()]:
            parameter.copy_(_randn(*parameter.shape, generator=generator, scale=0.3))
    down, up = down.double().to(DEVICE), up.double().to(DEVICE)
    x, residual = _randn(rows, 1, d, generator=generator), _randn(rows, 1, d, generator=generator)
    expected = residual + 0.5 * up(activation(down(x)))  # float64 truth
    kind = lane_kernels.activation_kind(activation)
    assert kind is not None
    got = lane_kernels.adapter_site(KERNELS, x.float(), residual.float(), down.float(), up.float(), 0.5, kind)
    assert got.shape == residual.shape and got.dtype == torch.float32
    assert_close(got, expected, dtype=torch.float32)


@pytest.mark.parametrize("launch", [None, {"BLOCK_R": 16}], ids=["per adapter", "flat"])
@pytest.mark.parametrize("activation", ACTIVATIONS[:3], ids=lambda a: repr(a))
@pytest.mark.parametrize(("count", "size", "flush"), [(8, 6, None), (3, 5, 0.2)])
def test_the_fusion_kernel_is_the_traced_fusion_step(
    activation: nn.Module, count: int, size: int, flush: float | None, launch: dict[str, int] | None
) -> None:
    generator = torch.Generator().manual_seed(count)
    d, rows, total = 40, 2, count * size
    both = _randn(rows, 2 * total + count + 1, generator=generator)
    outputs = _randn(total + count, d, generator=generator, scale=0.3)
    residual = _randn(rows, 1, d, generator=generator)
    expected = _traced_fusion_step(both, residual, activation, outputs, count, flush)  # float64
    kind = lane_kernels.activation_kind(activation)
    assert kind is not None
    got = lane_kernels.fusion_tail(
        KERNELS, both.float(), residual.float(), outputs.float(), count, kind, flush, launch=launch
    )
    assert_close(got.view(expected.shape), expected, dtype=torch.float32)
    if flush is not None:  # the case tests the flush: it cut some adapter's weight to 0
        assert not torch.allclose(_traced_fusion_step(both, residual, activation, outputs, count, None), expected)


@pytest.mark.parametrize(
    "launch",
    [{"BLOCK_K": 64, "BLOCK_N": 16}, {"BLOCK_K": 256, "BLOCK_N": 128}, {"BLOCK_U": 4, "BLOCK_K": 32, "BLOCK_N": 16}],
    ids=["narrow", "wide", "split in two kernels"],
)
def test_other_block_sizes_compute_the_same_sites(launch: dict[str, int]) -> None:
    """lane_kernel_sweep.py times other launches: each must still be the site (masks at other block edges)."""
    generator = torch.Generator().manual_seed(7)
    d, size, count = 72, 9, 3
    down, up = nn.Linear(d, size).double().to(DEVICE), nn.Linear(size, d).double().to(DEVICE)
    x, residual = _randn(2, 1, d, generator=generator), _randn(2, 1, d, generator=generator)
    expected = residual + up(nn.SiLU()(down(x)))  # float64 truth, before .float() casts the modules in place
    kind = lane_kernels.activation_kind(nn.SiLU())
    assert kind is not None
    got = lane_kernels.adapter_site(
        KERNELS, x.float(), residual.float(), down.float(), up.float(), 1.0, kind, launch=launch
    )
    assert_close(got, expected, dtype=torch.float32)
    both = _randn(2, 2 * count * size + count + 1, generator=generator)
    outputs = _randn(count * size + count, d, generator=generator, scale=0.3)
    expected = _traced_fusion_step(both, residual, nn.SiLU(), outputs, count, None)
    tail_launch = {"BLOCK_N": launch["BLOCK_N"], **({"BLOCK_R": 8} if "BLOCK_U" in launch else {})}  # flat, runs of 8
    tail = lane_kernels.fusion_tail(
        KERNELS, both.float(), residual.float(), outputs.float(), count, kind, None, launch=tail_launch
    )
    assert_close(tail.view(expected.shape), expected, dtype=torch.float32)


def test_the_kernels_stay_out_of_eager_calls_cpu_tensors_and_when_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    tensor = torch.zeros(4, 8, device=DEVICE)
    assert not lane_kernels.fits(tensor)  # not compiling: the eager lane runs
    assert lane_kernels.prepare(torch.zeros(2, 2)) is None  # a CPU lane
    assert lane_kernels.activation_kind(nn.Softplus()) is None  # an activation the kernels lack: the torch lane
    if ON_GPU:
        assert lane_kernels.prepare(torch.zeros(2, 2, device=DEVICE)) is KERNELS
        monkeypatch.setenv("ADAPTERFUSION_TRITON", "0")
        assert lane_kernels.prepare(torch.zeros(2, 2, device=DEVICE)) is None


@pytest.mark.skipif(not ON_GPU, reason="compiles for CUDA")
@pytest.mark.parametrize("active", ["adapter", "fusion"])
def test_a_compiled_static_cache_decode_runs_the_kernels_and_the_eager_tokens(
    active: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import adapterfusion as af
    from tiny_decoders import tiny_decoder, tiny_decoder_inputs

    calls: list[str] = []
    for name in ("adapter_site", "fusion_tail"):
        original = getattr(lane_kernels, name)

        def spy(*args: Any, _original: Any = original, _name: str = name, **kwargs: Any) -> Any:
            calls.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(lane_kernels, name, spy)
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = af.wrap(tiny_decoder("llama")).to(DEVICE)
    for name in "abc":
        model.add_adapter(name, af.AdapterConfig.pfeiffer(reduction_factor=4))
        for parameter in model.adapter_parameters(name):
            nn.init.normal_(parameter, std=0.1)
    model.add_fusion("f", list("abc"), af.FusionConfig.dynamic(value_init_noise=0.05))
    model.activate(**({"fusion": "f"} if active == "fusion" else {"adapter": "a"}))
    model.eval()
    inputs = {key: value.to(DEVICE) for key, value in tiny_decoder_inputs("llama", padding_side="left").items()}
    options = dict(max_new_tokens=8, min_new_tokens=8, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        eager = model.generate(**inputs, **options)
        compiled = model.generate(**inputs, cache_implementation="static", **options)
    torch._dynamo.reset()
    assert calls and set(calls) == {"fusion_tail" if active == "fusion" else "adapter_site"}
    assert torch.equal(compiled, eager)


def test_relu_keeps_a_nan_as_torch_does() -> None:
    """A NaN pre-activation stays NaN through the kernel's ReLU (a maximum with 0 would hide it as 0)."""
    d, size = 8, 4
    down, up = nn.Linear(d, size).to(DEVICE), nn.Linear(size, d).to(DEVICE)
    x = torch.zeros(1, d, device=DEVICE)
    with torch.no_grad():
        down.bias[0] = float("nan")
        got = lane_kernels.adapter_site(KERNELS, x, torch.zeros_like(x), down, up, 1.0, (0, 0.0))
        expected = up(torch.relu(down(x)))
    assert torch.isnan(expected).all() and torch.isnan(got).all()


def test_large_sites_run_the_torch_lane() -> None:
    """Each program rereads the down-projection: past a size that costs more than the launches it saves."""
    assert lane_kernels.adapter_fits(576, 36)  # SmolLM2 at reduction factor 16
    assert not lane_kernels.adapter_fits(4096, 256)  # a 7B model's: the torch lane
    assert not lane_kernels.adapter_fits(64, lane_kernels.MAX_UNITS + 1)


def test_the_kernels_take_bfloat16_and_round_once() -> None:
    """bf16 weights and activations: sums in float32, one rounding of the output (the float64 truth of the same
    bf16-rounded inputs, within 4 bf16 ulps)."""
    generator = torch.Generator().manual_seed(7)
    d, size, count = 72, 9, 3
    down, up = nn.Linear(d, size), nn.Linear(size, d)
    with torch.no_grad():
        for parameter in [*down.parameters(), *up.parameters()]:
            parameter.copy_(_randn(*parameter.shape, generator=generator, scale=0.3).cpu())
    down, up = down.bfloat16().to(DEVICE), up.bfloat16().to(DEVICE)
    x, residual = (_randn(2, d, generator=generator).bfloat16() for _ in range(2))
    truth = residual.double() + up.double()(torch.relu(down.double()(x.double())))
    got = lane_kernels.adapter_site(KERNELS, x, residual, down, up, 1.0, (0, 0.0))
    assert got.dtype == torch.bfloat16
    assert_close(got, truth, dtype=torch.bfloat16)
    both = _randn(2, 2 * count * size + count + 1, generator=generator).bfloat16()
    outputs = _randn(count * size + count, d, generator=generator, scale=0.3).bfloat16()
    truth = _traced_fusion_step(both.double(), residual.double(), nn.ReLU(), outputs.double(), count, None)
    got = lane_kernels.fusion_tail(KERNELS, both, residual, outputs, count, (0, 0.0), None)
    assert got.dtype == torch.bfloat16
    assert_close(got.view(truth.shape), truth, dtype=torch.bfloat16)
