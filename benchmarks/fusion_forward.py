"""Fusion forward time: fast vs reference path, and fused vs bare encoder, on the shipped MiniLM.

    .venv/bin/python benchmarks/fusion_forward.py [--batch 32] [--seq 128] [--threads 2] [--repeats 5]

Every configuration is timed in the same process, interleaved round-robin, median of `repeats` runs,
so the ratios compare like with like. "x bare encoder" is the median of the per-round paired ratios with a
bootstrap 95 % interval (`_stats.py`). Absolute milliseconds are context only.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Callable

import torch
from _stats import paired_ratio
from transformers import AutoModel

import adapterfusion as af


def build(num_adapters: int, reduction_factor: float) -> af.AdaptedModel:
    torch.manual_seed(0)
    model = af.wrap(AutoModel.from_pretrained(af.default_encoder_path()))
    names = [f"task{i}" for i in range(num_adapters)]
    for name in names:
        model.add_adapter(name, af.AdapterConfig.pfeiffer(reduction_factor=reduction_factor))
    model.add_fusion("fusion", names, af.FusionConfig.dynamic())
    return model.eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--reduction-factor", type=float, default=16)
    parser.add_argument("--sizes", type=int, nargs="+", default=[2, 8, 16])
    parser.add_argument(
        "--implementations",
        nargs="+",
        choices=["fast", "reference"],
        default=["fast", "reference"],
        help="leave out reference to time fused vs bare without the slow path's memory traffic in between",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    inputs = {
        "input_ids": torch.randint(1000, 20000, (args.batch, args.seq)),
        "attention_mask": torch.ones(args.batch, args.seq, dtype=torch.long),
    }
    cases: dict[str, Callable[[], object]] = {}
    models: list[af.AdaptedModel] = []
    bare = build(1, args.reduction_factor)
    bare.activate()
    cases["bare encoder"] = lambda: bare(**inputs)
    single = build(1, args.reduction_factor)
    single.activate(adapter="task0")
    cases["one adapter"] = lambda: single(**inputs)
    for n in args.sizes:
        model = build(n, args.reduction_factor)
        model.activate(fusion="fusion")
        models.append(model)
        for impl in args.implementations:

            def run(model=model, impl=impl):
                model.set_fusion_implementation(impl)
                return model(**inputs)

            cases[f"fusion N={n} {impl}"] = run

    times: dict[str, list[float]] = {name: [] for name in cases}
    with contextlib.ExitStack() as stack:
        for model in models:  # fold fusion weights once per model, as evaluation and serving code do
            stack.enter_context(model.inference_cache())
        for fn in cases.values():  # warm-up
            fn()
        for _ in range(args.repeats):
            for name, fn in cases.items():
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
    median = {name: statistics.median(values) * 1000 for name, values in times.items()}
    print(
        f"MiniLM-L6 (d=384), batch {args.batch} x {args.seq} tokens, {args.threads} threads, "
        f"rf {args.reduction_factor:g}, median of {args.repeats}, torch {torch.__version__}"
    )
    print("| case | ms / forward | x bare encoder | reference / fast |")
    print("|---|---:|---:|---:|")
    for name, ms in median.items():
        reference = name.replace(" fast", " reference")
        speedup = (
            str(paired_ratio(times[reference], times[name])) if name.endswith(" fast") and reference in times else ""
        )
        print(f"| {name} | {ms:.1f} | {paired_ratio(times[name], times['bare encoder'])} | {speedup} |")


if __name__ == "__main__":
    main()
