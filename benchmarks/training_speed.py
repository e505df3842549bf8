"""Stage-1 ST-A training speed on the shipped MiniLM: fp32 vs bf16 autocast vs gradient checkpointing vs
torch.compile vs length-grouped batches vs fast dropout masks (and combinations), side by side in one process.

    nice -n 10 .venv/bin/python benchmarks/training_speed.py [--batches 8 32] [--examples 256] [--rounds 3]
        [--modes fp32 bf16 checkpointing compile grouped compile+grouped fast-dropout grouped+fast-dropout
                 bf16+grouped+fast-dropout ...]
        [--threads 2] [--jobs] [--job-task sst2]

Steps: one ST-A model per mode (the `st-a` recipe: Pfeiffer adapter rf 16 + head, AdamW over the trainables as
AdaptedTrainer groups them, grad-norm clipping), all trained on the same real examples (RTE from the shipped demo
data, up to 128 tokens, dynamic padding as TaskCollator pads). A round runs, for every mode in an order that rotates
each round, one pass over `--examples` examples in a seeded random order that all modes share; `grouped` draws the
same examples through HF's LengthGroupedSampler, as TrainingConfig.group_by_length does. The first round is a
warm-up (torch.compile compiles there; its time is shown), the table gives the median of the other rounds.
Each mode sets what the Trainer would: bf16 = torch.autocast("cpu", bfloat16); checkpointing = the encoder's HF
gradient checkpointing (training.gradient_checkpointing.checkpointed_activations); compile = torch.compile(model);
fast-dropout = training.fast_dropout around the step (the Trainer's default, TrainingConfig.fast_dropout; fp32 runs
without it).

--jobs then runs one whole `train()` ST-A job per mode and `--job-seeds` seed (seeds one after another, the modes
alternating within each seed) and prints per mode the mean wall time and the dev accuracy over the seeds.
--skip-steps runs the jobs alone.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

import torch
import transformers
from transformers.trainer_pt_utils import LengthGroupedSampler

import adapterfusion as af
from adapterfusion.demo import demo_data_dir
from adapterfusion.tasks.collator import TaskCollator
from adapterfusion.tasks.encoding import encode_task
from adapterfusion.tasks.loading import load_task_data
from adapterfusion.tasks.registry import resolve_task
from adapterfusion.training.fast_dropout import fast_dropout
from adapterfusion.training.gradient_checkpointing import checkpointed_activations
from adapterfusion.training.hardware import compile_problem
from adapterfusion.training.optimizer import parameter_groups
from adapterfusion.training.setups import SetupContext, get_setup

# The default modes; --modes takes any "+"-joined combination of SWITCH_CONFIG's switches.
MODES = (
    "fp32",
    "bf16",
    "checkpointing",
    "compile",
    "grouped",
    "compile+grouped",
    "fast-dropout",
    "grouped+fast-dropout",
)
# The TrainingConfig fields each switch sets, for --jobs; a mode is "+"-joined switches. fp32 is torch as it comes:
# it turns off fast_dropout, which TrainingConfig turns on by default, and only the fast-dropout switch sets it.
SWITCH_CONFIG = {
    "fp32": {},
    "fast-dropout": {"fast_dropout": True},
    "bf16": {"bf16": True},
    "checkpointing": {"gradient_checkpointing": True},
    "compile": {"torch_compile": True},
    "grouped": {"group_by_length": True},
}


def switches(mode: str) -> set[str]:
    return set(mode.split("+"))


def parse_mode(mode: str) -> str:
    """argparse type for --modes: a "+"-joined combination of known switches (e.g. bf16+grouped)."""
    unknown = switches(mode) - SWITCH_CONFIG.keys()
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown switch {', '.join(sorted(unknown))} in mode {mode!r}; join any of "
            f"{', '.join(SWITCH_CONFIG)} with '+'"
        )
    return mode


def mode_config(mode: str) -> dict[str, bool]:
    return {"fast_dropout": False} | {key: value for s in switches(mode) for key, value in SWITCH_CONFIG[s].items()}


@dataclass
class Case:
    """One mode's model, optimizer and step function, and its measured pass times."""

    mode: str
    step: Callable[[dict], None]
    grouped: bool
    times: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)


def build_case(mode: str, encoder: str, stack: contextlib.ExitStack, learning_rate: float) -> Case:
    """A fresh ST-A model (same seed for every mode) and the optimisation step the Trainer would run for `mode`."""
    torch.manual_seed(0)
    model = af.wrap(transformers.AutoModel.from_pretrained(encoder))
    recipe = get_setup("st-a")
    recipe.prepare(
        model, SetupContext(task=resolve_task("rte"), options=recipe.resolve_options(None), seed=0, encoder=encoder)
    )
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(parameter_groups(model, 0.01), lr=learning_rate)
    if "checkpointing" in switches(mode):
        stack.enter_context(checkpointed_activations(model))
    forward = torch.compile(model) if "compile" in switches(mode) else model

    def step(batch: dict) -> None:
        # fast_dropout swaps torch functions process-wide, so it is open only during this mode's own step.
        with fast_dropout("fast-dropout" in switches(mode)):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled="bf16" in switches(mode)):
                loss = forward(**batch).loss
            loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return Case(mode, step, grouped="grouped" in switches(mode))


def batches_of(dataset, collator: TaskCollator, batch: int, seed: int, grouped: bool) -> list[dict]:
    """One pass over `dataset`: a seeded random order, or HF's length-grouped order with the same seed."""
    generator = torch.Generator().manual_seed(seed)
    if grouped:
        order = list(
            LengthGroupedSampler(batch, lengths=[len(ids) for ids in dataset["input_ids"]], generator=generator)
        )
    else:
        order = torch.randperm(len(dataset), generator=generator).tolist()
    return [collator([dataset[i] for i in order[start : start + batch]]) for start in range(0, len(order), batch)]


def time_pass(case: Case, batches: list[dict]) -> float:
    start = time.perf_counter()
    for batch in batches:
        case.step(batch)
    return time.perf_counter() - start


def step_table(args: argparse.Namespace, encoder: str, modes: list[str]) -> list[str]:
    tokenizer = transformers.AutoTokenizer.from_pretrained(encoder)
    data, _ = load_task_data("rte", demo_data_dir(), seed=0, max_examples={"train": args.examples})
    train = encode_task("rte", data, tokenizer, max_length=128).splits["train"]
    collator = TaskCollator(tokenizer)
    lines = [
        "| batch | mode | steps/s | × fp32 | padded tokens / step | s / pass (median) | warm-up pass s |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for batch in args.batches:
        with contextlib.ExitStack() as stack:
            cases = [build_case(mode, encoder, stack, args.learning_rate) for mode in modes]
            warmups: dict[str, float] = {}
            for round_index in range(args.rounds + 1):
                passes = {
                    grouped: batches_of(train, collator, batch, seed=round_index, grouped=grouped)
                    for grouped in (False, True)
                }
                shift = round_index % len(cases)
                for case in cases[shift:] + cases[:shift]:
                    seconds = time_pass(case, passes[case.grouped])
                    if round_index == 0:
                        warmups[case.mode] = seconds
                    else:
                        case.times.append(seconds)
                        case.tokens.append(sum(b["input_ids"].numel() for b in passes[case.grouped]))
                print(
                    f"  batch {batch} round {round_index}/{args.rounds} done (load {os.getloadavg()[0]:.1f})",
                    flush=True,
                )
            steps = -(-len(train) // batch)
            base = statistics.median(cases[0].times)
            for case in cases:
                median = statistics.median(case.times)
                lines.append(
                    f"| {batch} | {case.mode} | {steps / median:.2f} | {base / median:.2f} | "
                    f"{statistics.mean(case.tokens) / steps:.0f} | {median:.2f} | {warmups[case.mode]:.1f} |"
                )
    return lines


def job_table(args: argparse.Namespace, encoder: str, modes: list[str]) -> list[str]:
    """One whole train() ST-A job per mode and seed; per mode the mean wall time and dev accuracy over the seeds
    (± the sample standard deviation when there are several), and the per-seed accuracies."""
    from adapterfusion.training import train

    walls: dict[str, list[float]] = {mode: [] for mode in modes}
    accuracies: dict[str, list[float]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory() as output:
        for seed in args.job_seeds:
            for mode in modes:
                config = dict(
                    epochs=args.job_epochs,
                    batch_size=args.job_batch,
                    max_length=128,
                    patience=None,
                    learning_rate=args.job_learning_rate,
                    logging_steps=1000,
                    **mode_config(mode),
                )
                start = time.perf_counter()
                result = train(
                    args.job_task,
                    "st-a",
                    seed=seed,
                    encoder=encoder,
                    data_dir=demo_data_dir(),
                    output_dir=os.path.join(output, f"{mode}-{seed}"),
                    training_config=config,
                    max_examples={"train": args.job_examples},
                )
                walls[mode].append(time.perf_counter() - start)
                accuracies[mode].append(100 * result.metrics["accuracy"])
                print(f"  job {mode} seed {seed} done (load {os.getloadavg()[0]:.1f})", flush=True)
    steps = -(-args.job_examples // args.job_batch) * args.job_epochs
    lines = [
        "| mode | wall s (mean) | × fp32 | dev accuracy (mean) | − fp32 | per seed | steps |",
        "|---|---:|---:|---:|---:|---|---:|",
    ]
    base_wall, base_accuracy = statistics.mean(walls[modes[0]]), statistics.mean(accuracies[modes[0]])
    for mode in modes:
        wall, accuracy = statistics.mean(walls[mode]), statistics.mean(accuracies[mode])
        spread = f" ± {statistics.stdev(accuracies[mode]):.2f}" if len(accuracies[mode]) > 1 else ""
        per_seed = " / ".join(f"{value:.2f}" for value in accuracies[mode])
        lines.append(
            f"| {mode} | {wall:.0f} | {base_wall / wall:.2f} | {accuracy:.2f}{spread} | "
            f"{accuracy - base_accuracy:+.2f} | {per_seed} | {steps:g} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[8, 32])
    parser.add_argument(
        "--examples",
        type=int,
        default=256,
        help="RTE training examples per pass (default 256; HF's length grouping sorts within "
        "megabatches of min(examples // (4 * batch), 50) batches, so below 8 batches' worth "
        "`grouped` cannot differ from a random order)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds after the warm-up (default 3)")
    parser.add_argument(
        "--modes", nargs="+", type=parse_mode, default=list(MODES), help="modes: switches joined with '+'"
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--jobs", action="store_true", help="also run one whole train() job per mode")
    parser.add_argument("--job-task", default="sst2")
    parser.add_argument("--job-examples", type=int, default=500)
    parser.add_argument("--job-epochs", type=float, default=2)
    parser.add_argument("--job-batch", type=int, default=32)
    parser.add_argument("--job-learning-rate", type=float, default=1e-3)
    parser.add_argument("--job-seeds", type=int, nargs="+", default=[1], help="one job per mode and seed")
    parser.add_argument("--skip-steps", action="store_true", help="only the whole jobs (with --jobs)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    modes = list(dict.fromkeys(["fp32", *args.modes]))  # fp32 first: the ratios are against it
    if any("compile" in switches(mode) for mode in modes) and (problem := compile_problem()) is not None:
        print(f"compile modes left out: torch.compile does not work here ({problem})")
        modes = [mode for mode in modes if "compile" not in switches(mode)]
    encoder = str(af.default_encoder_path())
    loads = [os.getloadavg()]
    start = time.perf_counter()
    steps = [] if args.skip_steps else step_table(args, encoder, modes)
    loads.append(os.getloadavg())
    jobs = job_table(args, encoder, modes) if args.jobs else []
    loads.append(os.getloadavg())
    print(
        f"\n{datetime.now():%Y-%m-%d %H:%M}; {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, CPU capability {torch.backends.cpu.get_cpu_capability()}, {args.threads} threads; "
        f"torch {torch.__version__}, transformers {transformers.__version__}; MiniLM-L6 ST-A (rf 16); "
        + (
            ""
            if args.skip_steps
            else f"RTE demo data, {args.examples} examples per pass, median of {args.rounds} rounds after a warm-up; "
        )
        + f"wall {time.perf_counter() - start:.0f} s; 1-min load average at start / after steps / end: "
        + " / ".join(f"{load[0]:.1f}" for load in loads)
    )
    if steps:
        print("\n".join(steps))
    if jobs:
        print(
            f"\nWhole ST-A jobs: {args.job_task} (demo data), {args.job_examples} training examples, full dev set, "
            f"{args.job_epochs:g} epochs, batch {args.job_batch}, lr {args.job_learning_rate:g}, seeds "
            f"{', '.join(map(str, args.job_seeds))}; one run per mode and seed, one after another (modes "
            "alternate within each seed)"
        )
        print("\n".join(jobs))


if __name__ == "__main__":
    main()
