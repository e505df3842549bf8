"""Fusion training step time when each step fuses a random subset of the adapters (training/adapter_subsets.py)
against fusing all of them, on the shipped MiniLM.

    .venv/bin/python benchmarks/fusion_subset_training.py [--adapters 12] [--subsets 12 4 2] [--batch 16]
        [--seq 128] [--threads 2] [--repeats 5]

One model per subset size (N Pfeiffer rf-16 adapters, randomly initialised, and a dynamic fusion over them, frozen
encoder and adapters, AdamW over Q/K/V and a head), all timed in one process, interleaved round-robin, median of
`repeats` steps after a warm-up: forward, backward and optimizer step on the same random batch. The subset is drawn
per step as training draws it. Absolute milliseconds are context only; the ratios are the result.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import AutoModel

import adapterfusion as af
from adapterfusion.training.adapter_subsets import draw_subset


def build(num_adapters: int) -> tuple[af.AdaptedModel, torch.optim.Optimizer, list[str]]:
    torch.manual_seed(0)
    model = af.wrap(AutoModel.from_pretrained(af.default_encoder_path()))
    names = [f"task{i}" for i in range(num_adapters)]
    for name in names:
        model.add_adapter(name, af.AdapterConfig.pfeiffer(reduction_factor=16))
    model.add_fusion("fusion", names, af.FusionConfig.dynamic())
    model.add_head("head", af.ClassificationHead(num_labels=2))
    model.train_fusion("fusion", head="head")
    trainable = [p for p in model.parameters() if p.requires_grad]
    return model.train(), torch.optim.AdamW(trainable, lr=1e-4), names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--adapters", type=int, default=12)
    parser.add_argument("--subsets", type=int, nargs="+", default=[12, 4, 2])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    batch = {
        "input_ids": torch.randint(1000, 20000, (args.batch, args.seq)),
        "attention_mask": torch.ones(args.batch, args.seq, dtype=torch.long),
        "labels": torch.randint(0, 2, (args.batch,)),
    }
    cases = {size: build(args.adapters) for size in args.subsets}
    times: dict[int, list[float]] = {size: [] for size in cases}
    for step in range(args.repeats + 1):  # step 0 warms up
        for size, (model, optimizer, names) in cases.items():
            start = time.perf_counter()
            model.set_fusion_mask(
                "fusion", None if size >= len(names) else draw_subset(names, size, names[:1], seed=0, step=step)
            )
            model(**batch).loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            model.set_fusion_mask("fusion", None)
            if step:
                times[size].append(time.perf_counter() - start)
    median = {size: statistics.median(values) * 1000 for size, values in times.items()}
    full = median[max(median)]
    print(
        f"MiniLM-L6 (d=384), fusion over {args.adapters} Pfeiffer rf-16 adapters, training step (forward, backward, "
        f"AdamW) on batch {args.batch} x {args.seq} tokens, {args.threads} threads, median of {args.repeats}, "
        f"torch {torch.__version__}"
    )
    print("| adapters fused per step | ms / step | speed-up vs all |")
    print("|---:|---:|---:|")
    for size, ms in median.items():
        print(f"| {min(size, args.adapters)} of {args.adapters} | {ms:.0f} | {full / ms:.2f}x |")


if __name__ == "__main__":
    main()
