"""Where a fused decode step spends its time: torch.profiler over cached decode steps, bare vs fusion, one process.

    .venv/bin/python benchmarks/decoder_profile.py [--n 8] [--batches 1 8] [--prompt 16] [--steps 10] [--threads 2]

Ours only, on the shipped SmolLM2-135M (as decoder_fusion.py builds it: Pfeiffer rf 16, dynamic fusion over N,
seed-drawn weights). For each batch, a prompt is prefilled once; then each setting (bare, fusion) decodes from a
copy of that KV cache: a few unprofiled steps, then `--steps` profiled ones, calling the wrapped LlamaForCausalLM
inside `inference_cache()` as `generate` does. Prints the wall time per step and, per operator, calls and self CPU
µs per step in both settings, sorted by what the fusion adds.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
import time
from typing import Any

import torch
from _decoder_worker import build_ours
from decoder_fusion import default_gguf
from torch.profiler import ProfilerActivity, profile


def decode_steps(model: Any, cache: Any, token: torch.Tensor, mask: torch.Tensor, steps: int) -> list[float]:
    """`steps` greedy decode steps of the wrapped model from `cache` (changed in place); wall ms of each."""
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        out = model.model(input_ids=token, attention_mask=mask, past_key_values=cache, use_cache=True)
        token = out.logits[:, -1:].argmax(-1)
        mask = torch.cat([mask, torch.ones_like(token)], dim=1)
        times.append((time.perf_counter() - start) * 1000)
    return times


def per_step_ops(prof: Any, steps: int) -> dict[str, tuple[float, float]]:
    """operator -> (calls per step, self CPU µs per step)."""
    return {e.key: (e.count / steps, e.self_cpu_time_total / steps) for e in prof.key_averages()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--steps", type=int, default=10, help="profiled decode steps per setting")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--top", type=int, default=15, help="operators shown per batch")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    with tempfile.TemporaryDirectory() as pieces:
        model, _ = build_ours(
            {
                "model": str(default_gguf()),
                "device": "cpu",
                "kind": "fusion",
                "n": args.n,
                "pieces": pieces,
                "seed": args.seed,
            }
        )
    settings = {"bare": {}, f"fusion N={args.n}": {"fusion": "f"}}
    generator = torch.Generator().manual_seed(args.seed)
    for batch in args.batches:
        ids = torch.randint(1000, 20000, (batch, args.prompt), generator=generator)
        mask = torch.ones_like(ids)
        with model.inference_cache():
            model.activate()
            prefill = model.model(input_ids=ids, attention_mask=mask, use_cache=True)
            token = prefill.logits[:, -1:].argmax(-1)
            mask = torch.cat([mask, torch.ones_like(token)], dim=1)
            ops, walls = {}, {}
            for name, active in settings.items():
                model.activate(**active)
                cache = copy.deepcopy(prefill.past_key_values)
                walls[name] = decode_steps(model, cache, token, mask, 5)  # warm-up, and a fold for the fusion
                walls[name] = decode_steps(model, cache, token, mask, args.steps)
                with profile(activities=[ProfilerActivity.CPU]) as prof:
                    decode_steps(model, cache, token, mask, args.steps)
                ops[name] = per_step_ops(prof, args.steps)
        bare, fused = ops["bare"], ops[f"fusion N={args.n}"]
        wall_bare, wall_fused = statistics.median(walls["bare"]), statistics.median(walls[f"fusion N={args.n}"])
        total_bare = sum(us for _, us in bare.values())
        total_fused = sum(us for _, us in fused.values())
        print(
            f"\nbatch {batch}: wall per step (unprofiled, median of {args.steps}) bare {wall_bare:.1f} ms, "
            f"fused {wall_fused:.1f} ms ({wall_fused / wall_bare:.2f}×); profiled self CPU per step "
            f"bare {total_bare / 1000:.1f} ms, fused {total_fused / 1000:.1f} ms"
        )
        print(
            "| operator | bare calls/step | bare µs/step | fused calls/step | fused µs/step | fused µs/call "
            "| Δ µs/step |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|")
        delta = {key: fused.get(key, (0, 0))[1] - bare.get(key, (0, 0))[1] for key in {*bare, *fused}}
        for key in sorted(delta, key=lambda k: -abs(delta[k]))[: args.top]:
            b_calls, b_us = bare.get(key, (0.0, 0.0))
            f_calls, f_us = fused.get(key, (0.0, 0.0))
            per_call = f_us / f_calls if f_calls else 0.0
            print(
                f"| {key} | {b_calls:.0f} | {b_us:.0f} | {f_calls:.0f} | {f_us:.0f} | {per_call:.1f} "
                f"| {delta[key]:+.0f} |"
            )


if __name__ == "__main__":
    main()
