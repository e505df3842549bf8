"""The lane kernels' launch settings, timed one site at a time on a GPU: which block sizes and warps make an adapter
site's kernel and a fusion site's tail kernel fastest at a decoder's shape, against the same site as torch operators.

    python benchmarks/lane_kernel_sweep.py --device cuda [--d 576 --size 36 --count 8 --rows 1 8] [--json out.json]
    python benchmarks/lane_kernel_sweep.py --device cpu   # Triton's interpreter: each setting checked, nothing timed

Each case is captured in a CUDA graph of LAUNCHES launches and replayed (as a compiled decode step runs it: no
dispatch, a launch's own latency included), microseconds per launch, median of REPLAYS replays. The torch rows are
the same site as eager operators captured the same way (the traced lanes' operators before Inductor fuses any: an
upper bound on what the compiled torch lane costs). Every setting's output is checked against the torch site first.
The settings in use are lane_kernels.ADAPTER_LAUNCH / FUSION_LAUNCH (marked in the table).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

if "--device" in sys.argv and sys.argv[sys.argv.index("--device") + 1] == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before Triton is imported

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from adapterfusion.injection import lane_kernels  # noqa: E402
from adapterfusion.injection.lanes import _traced_fusion_step  # noqa: E402

LAUNCHES = 50
REPLAYS = 20


def time_us(run: Callable[[], Any], device: torch.device) -> float | None:
    """Microseconds per call of `run` replayed from a CUDA graph (None on a CPU: nothing timed there)."""
    if device.type != "cuda":
        run()
        return None
    run()  # compiles Triton's kernel outside the capture
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(LAUNCHES):
            run()
    graph.replay()
    torch.cuda.synchronize(device)
    times = []
    for _ in range(REPLAYS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000 / LAUNCHES)
    return statistics.median(times)


def adapter_cases(args: argparse.Namespace, device: torch.device, rows: int, kernels: Any) -> Iterator[dict[str, Any]]:
    generator = torch.Generator().manual_seed(rows)
    down, up = nn.Linear(args.d, args.size).to(device), nn.Linear(args.size, args.d).to(device)
    with torch.no_grad():
        for parameter in [*down.parameters(), *up.parameters()]:
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.1)
    x = torch.randn(rows, 1, args.d, generator=generator).to(device)
    residual = torch.randn(rows, 1, args.d, generator=generator).to(device)
    activation = nn.SiLU()
    kind = lane_kernels.activation_kind(activation)
    assert kind is not None

    def torch_site() -> torch.Tensor:
        return residual + up(activation(down(x)))

    expected = torch_site()
    yield {"site": "adapter", "rows": rows, "setting": "torch operators", "us": time_us(torch_site, device)}
    settings = [
        {"BLOCK_K": k, "BLOCK_N": n, "num_warps": w}
        for k, n, w in itertools.product(args.block_k, args.block_n, args.warps)
    ]
    settings += [  # the site as two kernels: BLOCK_U units a program, then the output columns
        {"BLOCK_U": u, "BLOCK_K": k, "BLOCK_N": n, "num_warps": 4}
        for u, k, n in itertools.product(args.split_units, args.block_k[-2:], [32, 64])
    ]
    for setting in settings:
        run = lambda setting=setting: lane_kernels.adapter_site(  # noqa: E731
            kernels, x, residual, down, up, 1.0, kind, launch=setting
        )
        torch.testing.assert_close(run(), expected, rtol=1e-4, atol=1e-4)
        in_use = {key: setting[key] for key in setting if key != "num_warps"} == lane_kernels.ADAPTER_LAUNCH
        yield _row("adapter", rows, setting, time_us(run, device), in_use and setting["num_warps"] == 4)


def fusion_cases(args: argparse.Namespace, device: torch.device, rows: int, kernels: Any) -> Iterator[dict[str, Any]]:
    generator = torch.Generator().manual_seed(100 + rows)
    total = args.count * args.size
    both = torch.randn(rows, 2 * total + args.count + 1, generator=generator).to(device)
    outputs = (torch.randn(total + args.count, args.d, generator=generator) * 0.1).to(device)
    residual = torch.randn(rows, 1, args.d, generator=generator).to(device)
    activation = nn.SiLU()
    kind = lane_kernels.activation_kind(activation)
    assert kind is not None

    def torch_tail() -> torch.Tensor:
        return _traced_fusion_step(both, residual, activation, outputs, args.count, None)

    expected = torch_tail()
    yield {"site": "fusion tail", "rows": rows, "setting": "torch operators", "us": time_us(torch_tail, device)}
    settings: list[dict[str, int]] = [
        {"BLOCK_N": n, "num_warps": w} for n, w in itertools.product(args.block_n, args.warps)
    ]
    settings += [  # the output product over a flat unit index, BLOCK_R rows of the outputs at a time
        {"BLOCK_R": r, "BLOCK_N": n, "num_warps": w}
        for r, n, w in itertools.product(args.flat_rows, args.block_n[:3], args.warps[:2])
    ]
    for setting in settings:
        run = lambda setting=setting: lane_kernels.fusion_tail(  # noqa: E731
            kernels, both, residual, outputs, args.count, kind, None, launch=setting
        )
        torch.testing.assert_close(run().view(expected.shape), expected, rtol=1e-4, atol=1e-4)
        in_use = setting == {**lane_kernels.FUSION_LAUNCH, "num_warps": 4}
        yield _row("fusion tail", rows, setting, time_us(run, device), in_use)


def _row(site: str, rows: int, setting: dict[str, int], us: float | None, in_use: bool) -> dict[str, Any]:
    label = ", ".join(f"{key}={value}" for key, value in setting.items()) + (" (in use)" if in_use else "")
    return {"site": site, "rows": rows, "setting": label, "us": us}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--d", type=int, default=576, help="model width (SmolLM2-135M's)")
    parser.add_argument("--size", type=int, default=36, help="bottleneck units (Pfeiffer, reduction factor 16)")
    parser.add_argument("--count", type=int, default=8, help="fused adapters")
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 8], help="decode batch sizes")
    parser.add_argument("--block-k", type=int, nargs="+", default=[64, 128, 256])
    parser.add_argument("--block-n", type=int, nargs="+", default=[16, 32, 64, 128, 256])
    parser.add_argument("--warps", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--split-units", type=int, nargs="+", default=[4, 8], help="BLOCK_U of the two-kernel site")
    parser.add_argument("--flat-rows", type=int, nargs="+", default=[16, 32, 64], help="BLOCK_R of the flat tail")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cpu":  # the interpreter: a few settings, to check the plumbing
        args.block_k, args.block_n, args.warps = args.block_k[:2], args.block_n[:2], args.warps[:1]
        args.split_units, args.flat_rows = args.split_units[:1], args.flat_rows[:1]
    kernels = __import__("adapterfusion.injection._lane_triton", fromlist=["_"])
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (Triton's interpreter: untimed)"
    print(f"{name}; d={args.d}, {args.size} units, fusion of {args.count}; float32; µs per launch from a CUDA graph")
    print("| site | rows | setting | µs |")
    print("|---|---:|---|---:|", flush=True)
    results: list[dict[str, Any]] = []  # each row printed as it comes: a run cut short keeps what it timed
    with torch.no_grad():
        for rows in args.rows:
            for row in itertools.chain(
                adapter_cases(args, device, rows, kernels), fusion_cases(args, device, rows, kernels)
            ):
                results.append(row)
                us = f"{row['us']:.2f}" if row["us"] is not None else "-"
                print(f"| {row['site']} | {row['rows']} | {row['setting']} | {us} |", flush=True)
                if args.json:
                    args.json.write_text(json.dumps({"device": name, "results": results}, indent=1))


if __name__ == "__main__":
    main()
