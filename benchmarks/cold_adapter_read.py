"""What one adapter costs per layer at a decode step when its weights are not in the cache (issue #23's one-adapter
target, <= 1.03x the bare model per token).

    .venv/bin/python benchmarks/cold_adapter_read.py [--hidden 576] [--bottleneck 36] [--layers 30] [--threads 1 2]

A decode step streams every weight of the model once, so when a layer's adapter runs, the large matrices read since
its last use have pushed its weights out of the caches. This times, per layer and for one token, the adapter's own
operators (down, activation, up, residual add) with its weights hot (just used) and cold (a 64 MB buffer read in
between, as a decode step's other weights would), and the read of its weights alone, cold. SmolLM2-135M's shape by
default: hidden 576, bottleneck 36 (reduction factor 16), 30 layers. The last column puts the cold cost against a
measured bare decode step of the same machine if --bare-ms is given (SmolLM2 fp32: about 53 ms at 1 thread, 34 ms
at 2 threads on this project's 2-core VM).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

FLUSH_MB = 64
Weights = tuple[torch.Tensor, ...]


def per_layer_us(
    layers: Sequence[Weights], run: Callable[[Weights], object], cold: bool, flush: torch.Tensor, rounds: int
) -> float:
    """Median over rounds of the mean time per layer of `run(weights)`, with a cache flush before each if cold."""
    results = []
    for _ in range(rounds):
        total = 0.0
        for weights in layers:
            if cold:
                flush.sum()
            start = time.perf_counter()
            run(weights)
            total += time.perf_counter() - start
        results.append(total / len(layers) * 1e6)
    return statistics.median(results)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--hidden", type=int, default=576)
    parser.add_argument("--bottleneck", type=int, default=36)
    parser.add_argument("--layers", type=int, default=30)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--bare-ms", type=float, nargs="*", default=[], help="bare decode step per --threads entry")
    args = parser.parse_args()
    d, m = args.hidden, args.bottleneck
    generator = torch.Generator().manual_seed(0)
    layers: list[Weights] = [
        (torch.randn(m, d, generator=generator), torch.randn(m, generator=generator),
         torch.randn(d, m, generator=generator), torch.randn(d, generator=generator))
        for _ in range(args.layers)
    ]  # fmt: skip
    x = torch.randn(1, 1, d, generator=generator)
    flush = torch.randn(FLUSH_MB * 1024 * 1024 // 4, generator=generator)

    def adapter(weights: Weights) -> torch.Tensor:
        down, down_bias, up, up_bias = weights
        return F.linear(F.silu(F.linear(x, down, down_bias)), up, up_bias) + x

    def read(weights: Weights) -> None:
        for weight in weights:
            weight.sum()

    kib = sum(w.numel() for w in layers[0]) * 4 / 1024
    print(f"one adapter of hidden {d}, bottleneck {m} ({kib:.0f} KiB of float32 per layer), {args.layers} layers")
    print()
    columns = ["threads", "adapter, hot (us/layer)", "adapter, cold (us/layer)", "its weights read cold (us/layer)"]
    print("| " + " | ".join([*columns, "cold x layers (ms/token)", "x bare step"]) + " |")
    print("|---:|---:|---:|---:|---:|---:|")
    for index, threads in enumerate(args.threads):
        torch.set_num_threads(threads)
        for _ in range(2):  # warm-up
            per_layer_us(layers, adapter, False, flush, 1)
        hot = per_layer_us(layers, adapter, False, flush, args.rounds)
        cold = per_layer_us(layers, adapter, True, flush, args.rounds)
        weights_cold = per_layer_us(layers, read, True, flush, args.rounds)
        per_token = cold * args.layers / 1000
        bare = args.bare_ms[index] if index < len(args.bare_ms) else None
        ratio = f"{1 + per_token / bare:.3f}" if bare else "–"
        print(f"| {threads} | {hot:.1f} | {cold:.1f} | {weights_cold:.1f} | {per_token:.2f} | {ratio} |")


if __name__ == "__main__":
    main()
