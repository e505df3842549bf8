"""Where a forward's time goes on a GPU: per call, wall time, GPU busy time (the sum of its kernels' durations),
kernel launches and host-device synchronisations, for the cases the speed targets of #23 and #24 compare.

    python benchmarks/gpu_profile.py --device cuda [--part routing decode] [--json out.json]

The speed tables (routing_speed.py, decoder_fusion.py) say how much slower a case is; this says why. If wall ≈ GPU
busy, the GPU is the limit and only fewer or faster kernels help; if wall ≫ GPU busy, the GPU waits on the host
(dispatch, guards, Python) or on synchronisations. One-off measurements under torch.profiler (which adds its own
overhead to the host side): for explanation, never for the targets.

Parts: `routing`, the shipped MiniLM's shape at batch 32 × 128 (bare, one adapter, every row its own adapter of
32, and fusion rows mixed in; routing_speed.py's model and batch), inside `inference_cache()`; `decode`, a
SmolLM2-135M-shaped decoder (`--decoder-config`, seeded random weights) generating with a static cache, which
transformers compiles into CUDA graphs on a GPU (bare, one adapter, fusion N=8 inside `inference_cache()`, and
fusion N=8 again without the lane kernels), per decoded token, and the time an empty inference_cache() block takes
to open and close (the kept folds' hash: once per generate() call). Decode cases also get their time a token
without the profiler (between generation steps, as decoder_fusion.py takes it), `--cases` picks some, and
`--trace-dir` writes each one's timeline (gzipped Chrome trace: chrome://tracing or Perfetto) to read where a step's
host and GPU time go. Every case lists the host's largest items by self time. On a CPU the same runs with host
timings only, to try the script.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import transformers
from torch.profiler import ProfilerActivity, profile

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _decoder_worker import StepClock  # noqa: E402  (benchmarks/ is not a package)
from routing_speed import build, forward, single  # noqa: E402

import adapterfusion as af  # noqa: E402

SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy ")
LAUNCH_CALLS = ("cudaLaunchKernel", "cuLaunchKernel", "cudaGraphLaunch", "cudaLaunchKernelExC")


def summarise(
    run: Callable[[], Any], device: torch.device, calls: int, per: int = 1, trace_file: Path | None = None
) -> dict[str, Any]:
    """Profile `calls` runs of `run` (after two warm ones); figures per unit (`per` units a run: decoded tokens).
    `trace_file`: also one more run's timeline there, gzipped Chrome trace format (chrome://tracing, Perfetto)."""
    run(), run()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    with profile(activities=activities) as trace:
        for _ in range(calls):
            run()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    wall = time.perf_counter() - start
    units = calls * per
    if trace_file is not None:
        _export_timeline(run, activities, trace_file)
    events = list(trace.events())
    # where the host's time goes (self time: an event's own, its children's excluded), the largest first
    host = sorted(trace.key_averages(), key=lambda e: -e.self_cpu_time_total)[:10]
    kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA and e.device_time_total > 0]
    busy_us = sum(e.device_time_total for e in kernels if not e.name.startswith("Memcpy"))
    by_name: dict[str, float] = {}
    for event in kernels:
        by_name[event.name] = by_name.get(event.name, 0.0) + event.device_time_total
    top = sorted(by_name.items(), key=lambda item: -item[1])[:6]
    return {
        "wall_ms": 1000 * wall / units,
        "gpu_busy_ms": busy_us / 1000 / units if device.type == "cuda" else None,
        "kernels": len(kernels) / units,
        "launch_calls": sum(1 for e in events if e.name.startswith(LAUNCH_CALLS)) / units,
        # CUDA graph replays: one per compiled step, unless the step's graph was cut into pieces
        "graph_launches": sum(1 for e in events if e.name.startswith("cudaGraphLaunch")) / units,
        "syncs": sum(1 for e in events if e.name.startswith(SYNC_CALLS)) / units,
        "host_ops": sum(1 for e in events if e.name.startswith("aten::")) / units,
        "top_kernels_ms": [(name[:80], t / 1000 / units) for name, t in top],
        "top_host_self_ms": [(e.key[:80], e.self_cpu_time_total / 1000 / units, e.count / units) for e in host],
    }


def _export_timeline(run: Callable[[], Any], activities: list[ProfilerActivity], trace_file: Path) -> None:
    """One run of `run` under the profiler, its timeline written gzipped to `trace_file`."""
    with profile(activities=activities) as trace:
        run()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    plain = trace_file.with_suffix("")
    trace.export_chrome_trace(str(plain))
    with plain.open("rb") as source, gzip.open(trace_file, "wb") as target:
        shutil.copyfileobj(source, target)
    plain.unlink()


def block_entry_ms(model: af.AdaptedModel, device: torch.device, repeats: int = 20) -> float:
    """Median time to open and close an empty inference_cache() block (what every generate() call, served batch or
    evaluation call pays once: each kept fold or lane's weights hashed), without the profiler."""
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        with model.inference_cache():
            pass
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    return 1000 * sorted(times)[len(times) // 2]


def routing_part(device: torch.device, calls: int) -> dict[str, dict[str, Any]]:
    model = build(32, 4).to(device)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 20000, (32, 128), generator=generator)
    inputs = {"input_ids": ids.to(device), "attention_mask": torch.ones_like(ids).to(device)}
    routed: list[str | None] = [f"task{i}" for i in range(32)]
    mixed = [None if i % 8 == 7 else "fusion0" if i % 4 == 3 else name for i, name in enumerate(routed)]
    cases = {
        "bare": functools.partial(single, model, inputs, None),
        "one adapter": functools.partial(single, model, inputs, "task0"),
        "routed": functools.partial(forward, model, inputs, adapter_names=routed),
        "routed + fusion": functools.partial(forward, model, inputs, adapter_names=mixed),
    }
    with model.inference_cache():
        return {name: summarise(run, device, calls) for name, run in cases.items()}


DECODE_CASES = ("bare", "one adapter", "one adapter, frozen", "fusion N=8", "fusion N=8, no lane kernels")


def stamped_token_ms(generate: Callable[..., Any], device: torch.device, repeats: int = 5) -> float:
    """Median time between decode steps without the profiler, as decoder_fusion.py measures it (the prompt's step
    left out): the figure the tables compare, in this process beside the profile's explanation of it."""
    figures = []
    for _ in range(repeats):
        clock = StepClock(device.type)  # decoder_fusion.py's own stamps
        generate(logits_processor=transformers.LogitsProcessorList([clock]))
        stamps = clock.stamps
        figures.append(1000 * (stamps[-1] - stamps[0]) / (len(stamps) - 1))
    return sorted(figures)[len(figures) // 2]


def decode_part(
    device: torch.device,
    calls: int,
    config_file: Path,
    tokens: int,
    cases: tuple[str, ...] = DECODE_CASES,
    trace_dir: Path | None = None,
) -> dict[str, dict[str, Any]]:
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(config_file.parent if config_file.name == "config.json" else config_file)
    results = {}
    given = os.environ.get("ADAPTERFUSION_TRITON", "1")
    # "one adapter, frozen": its weights without requires_grad. The third lease timed one adapter's token at 1.57x bare
    # against fusion N=8's 1.37x, though one adapter adds less GPU time; the trainable weights are one difference.
    for case in cases:
        # the last case without injection/lane_kernels.py (read when the lanes are built): what its kernels save
        os.environ["ADAPTERFUSION_TRITON"] = "0" if case.endswith("no lane kernels") else given
        torch.manual_seed(0)
        model = af.wrap(AutoModelForCausalLM.from_config(config).to(device)).eval()
        names = [f"a{i}" for i in range(8 if case.startswith("fusion") else 1 if case.startswith("one") else 0)]
        for name in names:
            model.add_adapter(name, af.AdapterConfig.pfeiffer(reduction_factor=16))
        if case.startswith("one adapter"):
            model.activate(adapter="a0")
            if case.endswith("frozen"):
                for parameter in model.adapter_parameters("a0"):
                    parameter.requires_grad_(False)
        elif names:
            model.add_fusion("f", names, af.FusionConfig.dynamic())
            model.activate(fusion="f")
        prompt = torch.randint(1000, 20000, (1, 16), generator=torch.Generator().manual_seed(0)).to(device)
        options: dict[str, Any] = dict(max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, pad_token_id=0)
        trace_file = None
        if trace_dir is not None:
            trace_file = trace_dir / f"trace_{case.replace(' ', '_').replace(',', '').replace('=', '')}.json.gz"
        with model.inference_cache():
            run = functools.partial(model.generate, input_ids=prompt, cache_implementation="static", **options)
            results[case] = summarise(run, device, calls, per=tokens, trace_file=trace_file)
            results[case]["stamped_token_ms"] = stamped_token_ms(run, device)
        results[case]["entry_ms"] = block_entry_ms(model, device)
        del model
        torch._dynamo.reset()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--part", nargs="+", choices=["routing", "decode"], default=["routing", "decode"])
    parser.add_argument("--calls", type=int, default=5, help="profiled calls per case")
    parser.add_argument("--tokens", type=int, default=16, help="decoded tokens per generate call (decode part)")
    parser.add_argument("--decoder-config", type=Path, default=None, help="config.json of the decoder's shape")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--cases", nargs="+", choices=DECODE_CASES, default=DECODE_CASES, help="decode part's cases")
    parser.add_argument("--trace-dir", type=Path, help="decode part: each case's timeline here (gzipped Chrome trace)")
    args = parser.parse_args()
    device = torch.device(args.device)
    results: dict[str, Any] = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"}
    if "routing" in args.part:
        results["routing"] = routing_part(device, args.calls)
    if "decode" in args.part:
        if args.decoder_config is None:
            raise SystemExit("--decoder-config: the config.json of the decoder's shape (SmolLM2-135M's)")
        results["decode"] = decode_part(
            device, args.calls, args.decoder_config, args.tokens, tuple(args.cases), args.trace_dir
        )
    for part in ("routing", "decode"):
        if part not in results:
            continue
        unit = "per forward" if part == "routing" else "per decoded token"
        print(f"\n{part} ({results['device']}, {unit}; under torch.profiler)")
        print(
            "| case | wall ms | GPU busy ms | kernels | launch calls | graph launches | syncs | host aten ops "
            "| unprofiled ms |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for case, figures in results[part].items():
            busy = f"{figures['gpu_busy_ms']:.2f}" if figures["gpu_busy_ms"] is not None else "-"
            print(
                f"| {case} | {figures['wall_ms']:.2f} | {busy} | {figures['kernels']:.0f} | "
                f"{figures['launch_calls']:.0f} | {figures['graph_launches']:.1f} | {figures['syncs']:.1f} | "
                f"{figures['host_ops']:.0f} | {figures.get('stamped_token_ms', float('nan')):.2f} |"
            )
        entries = [f"{case} {fig['entry_ms']:.2f}" for case, fig in results[part].items() if "entry_ms" in fig]
        if entries:
            print(f"- an empty inference_cache() block, ms (each generate() opens one): {', '.join(entries)}")
        for case, figures in results[part].items():
            top = ", ".join(f"{name} {ms:.3f}" for name, ms in figures["top_kernels_ms"][:4])
            if top:
                print(f"- {case}: {top}")
        for case, figures in results[part].items():
            host = ", ".join(f"{name} {ms:.3f} ({count:.1f}x)" for name, ms, count in figures["top_host_self_ms"][:8])
            print(f"- {case}, host self time ms: {host}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
