"""Per-example routing (`model(**batch, adapter_names=[...])`) against the bare encoder and one adapter for every row,
on the shipped MiniLM (issue #24 item 1).

    .venv/bin/python benchmarks/routing_speed.py [--batch 32] [--seq 128] [--adapters 32] [--fusion-size 4]
        [--fusions 1] [--repeats 9] [--threads 2] [--device cpu]

N Pfeiffer adapters (reduction factor 16, random weights) and one classification head. Cases, each one forward of
the same batch: "bare" (the head on the bare encoder), "one adapter" (adapter 0 for every row), "routed" (row i runs
adapter i mod N: with batch 32 and N 32, every row a different adapter), "routed + fusion" (as routed, but every
fourth row runs a dynamic fusion over --fusion-size adapters, the --fusions fusions in turn, each over its own
adapters, and every eighth row the plain model). All inside
inference_cache() and torch.no_grad(), in one process, interleaved round-robin after a warm-up round. Ratios are
per-round paired ratios to "bare" with a bootstrap 95 % interval (_stats.py); absolute times depend on whatever else
the machine is doing, so only ratios from one run mean anything. Before timing, routed rows (adapter, fusion and
plain ones) are checked against the same rows run alone (max |Δ logits|).

Targets (issue #24): routed ≤ 1.05x the bare encoder, where one adapter for all rows costs about 1.02x.
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Callable
from typing import Any

import torch
from _stats import paired_ratio, verdict
from transformers import AutoModel

import adapterfusion as af


def build(num_adapters: int, fusion_size: int, fusions: int = 1) -> af.AdaptedModel:
    torch.manual_seed(0)
    model = af.wrap(AutoModel.from_pretrained(af.default_encoder_path()))
    for i in range(num_adapters):
        model.add_adapter(f"task{i}", af.AdapterConfig.pfeiffer(reduction_factor=16))
        for parameter in model.adapter_parameters(f"task{i}"):  # not near-identity: speed must not depend on it
            torch.nn.init.normal_(parameter, std=0.02)
    for k in range(fusions):  # fusion k over the fusion_size adapters from k * fusion_size on
        fused = [f"task{(k * fusion_size + i) % num_adapters}" for i in range(fusion_size)]
        model.add_fusion(f"fusion{k}", fused, af.FusionConfig.dynamic())
    model.add_head("head", af.ClassificationHead(num_labels=2))
    model.activate(head="head")
    return model.eval()


def forward(model: af.AdaptedModel, inputs: dict[str, torch.Tensor], **options: Any) -> torch.Tensor:
    return model(**inputs, **options).logits


def single(model: af.AdaptedModel, inputs: dict[str, torch.Tensor], adapter: str | None) -> torch.Tensor:
    with model.activated(adapter=adapter, head="head"):
        return model(**inputs).logits


def check_rows(model: af.AdaptedModel, inputs: dict[str, torch.Tensor], names: list[str | None]) -> float:
    """max |Δ logits| of routed rows (the first two, and the first fusion and plain rows) against the same rows run
    alone with their choice."""
    routed = forward(model, inputs, adapter_names=names)
    gap = 0.0
    for row in sorted({0, 1, *(row for row in (3, 7, 11) if row < len(names))}):
        one = {key: value[row : row + 1] for key, value in inputs.items()}
        name = names[row]
        fusion = name if name is not None and name.startswith("fusion") else None
        with model.activated(adapter=None if fusion else name, fusion=fusion, head="head"):
            gap = max(gap, (model(**one).logits[0] - routed[row]).abs().max().item())
    return gap


def clock(device: torch.device) -> float:
    """The wall clock once the device has finished what was queued (CUDA runs asynchronously)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--adapters", type=int, default=32)
    parser.add_argument("--fusion-size", type=int, default=4)
    parser.add_argument("--fusions", type=int, default=1, help="distinct fusions among the fusion rows")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", help="torch device of the model and the batch")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    model = build(args.adapters, min(args.fusion_size, args.adapters), args.fusions).to(device)
    generator = torch.Generator().manual_seed(0)
    inputs = {
        "input_ids": torch.randint(1000, 20000, (args.batch, args.seq), generator=generator),
        "attention_mask": torch.ones(args.batch, args.seq, dtype=torch.long),
    }
    inputs = {key: value.to(device) for key, value in inputs.items()}
    routed: list[str | None] = [f"task{i % args.adapters}" for i in range(args.batch)]
    mixed: list[str | None] = [
        None if i % 8 == 7 else f"fusion{(i // 8) % args.fusions}" if i % 4 == 3 else name
        for i, name in enumerate(routed)
    ]
    cases: dict[str, Callable[[], torch.Tensor]] = {
        "bare": functools.partial(single, model, inputs, None),
        "one adapter": functools.partial(single, model, inputs, "task0"),
        "routed": functools.partial(forward, model, inputs, adapter_names=routed),
        "routed + fusion": functools.partial(forward, model, inputs, adapter_names=mixed),
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    with model.inference_cache():
        gaps = {"routed": check_rows(model, inputs, routed), "routed + fusion": check_rows(model, inputs, mixed)}
        for fn in cases.values():  # warm-up
            fn()
        for _ in range(args.repeats):
            for name, fn in cases.items():
                start = clock(device)
                fn()
                times[name].append(clock(device) - start)
    distinct = len(set(routed))
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu, {args.threads} threads"
    print(
        f"MiniLM-L6 (d=384), batch {args.batch} x {args.seq} tokens, {distinct} distinct adapters of {args.adapters} "
        f"(Pfeiffer rf 16), fusion rows of {args.fusions} fusion(s) over {args.fusion_size}, {where}, {args.repeats} "
        f"rounds, torch {torch.__version__}"
    )
    print("| case | median ms | / bare (95 % CI) | target | max |Δ logits| vs rows alone |")
    print("|---|---:|---|---|---:|")
    targets = {"routed": 1.05}
    for name, values in times.items():
        ratio = paired_ratio(values, times["bare"])
        target = f"≤ {targets[name]:.2f}x: {verdict(ratio, targets[name], at_most=True)}" if name in targets else ""
        gap = f"{gaps[name]:.1e}" if name in gaps else ""
        median = sorted(values)[len(values) // 2] * 1000
        print(f"| {name} | {median:.1f} | {ratio} | {target} | {gap} |", flush=True)


if __name__ == "__main__":
    main()
