"""Parallel composition (`model.forward_parallel`) against N + 1 forwards one by one, on the shipped MiniLM.

    .venv/bin/python benchmarks/parallel_composition.py [--sizes 4 12] [--batches 8 32] [--seq 128] [--threads 2]

N Pfeiffer adapters (reduction factor 16, random weights), a head per adapter, a dynamic fusion over them with its
head. "one by one": activate(adapter=n, head=n) and a forward, for every n, then activate(fusion, head) and a
forward; "parallel": one forward_parallel call giving the same N + 1 logits, with the encoder below the first
adapter site run once on the plain batch (the default); "parallel, repeated input": the same call with
share_encoder_prefix=False, the batch repeated per route at the input. All inside inference_cache() and
torch.no_grad(), timed in the same process, interleaved round-robin, median of `repeats` rounds after a warm-up.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Callable
from typing import TypedDict

import torch
from transformers import AutoModel

import adapterfusion as af


class Inputs(TypedDict):
    """One batch, passed as keyword arguments to the model and to forward_parallel."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor


def build(num_adapters: int) -> af.AdaptedModel:
    torch.manual_seed(0)
    model = af.wrap(AutoModel.from_pretrained(af.default_encoder_path()))
    names = [f"task{i}" for i in range(num_adapters)]
    for name in names:
        model.add_adapter(name, af.AdapterConfig.pfeiffer(reduction_factor=16))
        for parameter in model.adapter_parameters(name):  # not near-identity: speed must not depend on it anyway
            torch.nn.init.normal_(parameter, std=0.02)
        model.add_head(name, af.ClassificationHead(num_labels=2))
    model.add_fusion("fusion", names, af.FusionConfig.dynamic())
    model.add_head("fusion", af.ClassificationHead(num_labels=2))
    return model.eval()


def one_by_one(model: af.AdaptedModel, inputs: Inputs) -> list[torch.Tensor]:
    logits = []
    for name in model.fusion_setup("fusion").adapters:
        model.activate(adapter=name, head=name)
        logits.append(model(**inputs).logits)
    model.activate(fusion="fusion", head="fusion")
    return logits + [model(**inputs).logits]


def parallel(model: af.AdaptedModel, inputs: Inputs, share: bool = True) -> list[torch.Tensor]:
    out = model.forward_parallel("fusion", share_encoder_prefix=share, **inputs)
    return list(out.adapter_logits.values()) + [out.fusion_logits]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[4, 12])
    parser.add_argument("--batches", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    print(
        f"MiniLM-L6 (d=384), Pfeiffer rf 16, dynamic fusion, seq {args.seq}, {args.threads} threads, "
        f"median of {args.repeats}, torch {torch.__version__}"
    )
    print(
        "| N | batch | one by one (N + 1 forwards), ms | parallel, repeated input, ms | parallel (1 call), ms "
        "| one by one / parallel | repeated input / parallel | max |Δ logits| |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in args.sizes:
        model = build(n)
        for batch in args.batches:
            generator = torch.Generator().manual_seed(batch)
            inputs = Inputs(
                input_ids=torch.randint(1000, 20000, (batch, args.seq), generator=generator),
                attention_mask=torch.ones(batch, args.seq, dtype=torch.long),
            )
            inputs["attention_mask"][1::2, args.seq * 3 // 4 :] = 0  # half the rows padded
            cases: dict[str, Callable[[], list[torch.Tensor]]] = {
                "one by one": functools.partial(one_by_one, model, inputs),
                "repeated input": functools.partial(parallel, model, inputs, share=False),
                "parallel": functools.partial(parallel, model, inputs),
            }
            times: dict[str, list[float]] = {name: [] for name in cases}
            with model.inference_cache():
                results = {name: fn() for name, fn in cases.items()}  # warm-up, and the outputs to compare
                for _ in range(args.repeats):
                    for name, fn in cases.items():
                        start = time.perf_counter()
                        fn()
                        times[name].append(time.perf_counter() - start)
            gap = max(
                (a - b).abs().max().item()
                for other in ("one by one", "repeated input")
                for a, b in zip(results[other], results["parallel"], strict=True)
            )
            ms = {name: statistics.median(values) * 1000 for name, values in times.items()}
            print(
                f"| {n} | {batch} | {ms['one by one']:.0f} | {ms['repeated input']:.0f} | {ms['parallel']:.0f} | "
                f"{ms['one by one'] / ms['parallel']:.2f}x | {ms['repeated input'] / ms['parallel']:.2f}x | "
                f"{gap:.1e} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
