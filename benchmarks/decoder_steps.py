"""Decoder speed per step, paired step by step: bare vs one adapter vs fusion, all in one process (issue #23).

    .venv/bin/python benchmarks/decoder_steps.py [--pairs 300] [--sizes 8] [--threads 2] [--batch 1]
        [--prompt 16] [--window 40] [--json PATH]

decoder_fusion.py times each case in its own process, a round of 31 tokens per case, and pairs the cases by round.
On a shared VM the time of a step drifts by 10-20 % within seconds, so those rounds are paired loosely and their
ratios spread wide (0.94-1.19 for one adapter): a target 3 % away is undecided by the interval. Here every case is a
model of its own in one process (each the shipped SmolLM2-135M dequantised to float32, ours wrapped as
`_decoder_worker.build_ours` makes it), each with its own KV cache, and the cases take one cached greedy decode step
in turn (order reversed every other pair), so the steps paired are ~50 ms apart. Each case restarts from its own
prompt's cache every `--window` tokens, so the sequence length stays the same for all. The ratio of a case is the
median over pairs of (its step / the bare step of the same pair), with a bootstrap 95 % interval (`_stats.py`).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import transformers
from _decoder_worker import build_ours
from _stats import RatioEstimate, paired_ratio, verdict
from decoder_fusion import cpu_model, default_gguf

import adapterfusion as af

TARGETS = {"one adapter": 1.03, "fusion N=8": 1.15}  # issue #23, decoding, against the bare model


class Case:
    """One model decoding greedily from its own prompt cache, one step per call."""

    def __init__(self, model: Any, prompt: torch.Tensor, window: int) -> None:
        self.model, self.window = model, window
        with torch.no_grad():
            out = model.model(input_ids=prompt, attention_mask=torch.ones_like(prompt), use_cache=True)
        self.prompt_cache, self.prompt_mask = out.past_key_values, torch.ones_like(prompt)
        self.first = out.logits[:, -1:].argmax(-1)
        self.restart()

    def restart(self) -> None:
        self.cache, self.token = copy.deepcopy(self.prompt_cache), self.first
        self.mask = torch.cat([self.prompt_mask, torch.ones_like(self.first)], dim=1)
        self.steps = 0

    def step(self) -> float:
        """ms of one decode step (the model's forward and the greedy pick, as generate's loop runs them)."""
        if self.steps == self.window:
            self.restart()
        start = time.perf_counter()
        inputs = {"input_ids": self.token, "attention_mask": self.mask, "past_key_values": self.cache}
        out = self.model.model(**inputs, use_cache=True)
        self.token = out.logits[:, -1:].argmax(-1)
        elapsed = (time.perf_counter() - start) * 1000
        self.mask = torch.cat([self.mask, torch.ones_like(self.token)], dim=1)
        self.steps += 1
        return elapsed


def build_cases(args: argparse.Namespace, pieces: Path) -> dict[str, tuple[Any, str]]:
    """name -> (wrapped model, kind), each loaded on its own."""
    kinds = [("bare", "bare", 1), ("one adapter", "adapter", 1)]
    kinds += [(f"fusion N={n}", "fusion", n) for n in args.sizes]
    cases = {}
    for i, (name, kind, n) in enumerate(kinds):
        spec = {"model": str(args.model), "device": "cpu", "kind": kind, "n": n, "seed": args.seed}
        model, _ = build_ours({**spec, "pieces": str(pieces / str(i))})
        cases[name] = (model, kind)
        print(f"  built {name}", flush=True)
    return cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=300, help="timed steps per case, taken in turn")
    parser.add_argument("--sizes", type=int, nargs="+", default=[8], help="fusion sizes N (the target is for 8)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=1, help="rows decoded per step")
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--window", type=int, default=40, help="steps before a case restarts from its prompt")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", type=Path, default=None, help="GGUF file (default: the shipped SmolLM2)")
    parser.add_argument("--json", type=Path, help="also write every step's time here")
    args = parser.parse_args()
    args.model = args.model or default_gguf()
    torch.set_num_threads(args.threads)
    started = time.strftime("%Y-%m-%d %H:%M")
    clock = time.perf_counter()
    prompt = torch.randint(1000, 20000, (args.batch, args.prompt), generator=torch.Generator().manual_seed(args.seed))
    with tempfile.TemporaryDirectory() as pieces, contextlib.ExitStack() as blocks:
        built = build_cases(args, Path(pieces))
        cases = {}
        for name, (model, _) in built.items():
            blocks.enter_context(model.inference_cache())
            cases[name] = Case(model, prompt, args.window)
        names = list(cases)
        for _ in range(5):  # warm-up: the lanes and folds are made on a block's first steps
            for name in names:
                cases[name].step()
        times: dict[str, list[float]] = {name: [] for name in names}
        for pair in range(args.pairs):
            for name in names if pair % 2 == 0 else reversed(names):
                times[name].append(cases[name].step())
    wall = time.perf_counter() - clock
    print(
        f"{started}: {cpu_model()}, {args.threads} threads; {args.model.name} in float32; batch {args.batch}, "
        f"prompt {args.prompt}, restarts every {args.window} tokens; {args.pairs} steps a case in turn after 5 "
        f"warm-up steps; ours {af.__version__} (transformers {transformers.__version__}), torch {torch.__version__}; "
        f"wall {wall:.0f} s"
    )
    print("| case | ms / step (median) | × bare, median of paired steps [95 % CI] |")
    print("|---|---:|---:|")
    estimates: dict[str, RatioEstimate] = {}
    for name in names:
        cell = "1"
        if name != "bare":
            estimates[name] = paired_ratio(times[name], times["bare"])
            e = estimates[name]
            cell = f"{e.median:.3f} [{e.low:.3f}–{e.high:.3f}]"
        print(f"| {name} | {statistics.median(times[name]):.1f} | {cell} |")
    print("\nTargets (issue #23, decoding against the bare model):")
    for name, bound in TARGETS.items():
        if name in estimates:
            print(f"- {name} ≤ {bound}×: {estimates[name]} → {verdict(estimates[name], bound, at_most=True)}")
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "ms": times}))


if __name__ == "__main__":
    main()
