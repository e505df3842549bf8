"""How much a source adapter knows of a target task before any fusion: its own head's predictions on the target's dev
set, with the source's labels mapped onto the target's (no training on the target).

    .venv/bin/python examples/transfer_check.py examples/results/decoder-smollm2-mnli --source mnli \
        --targets cb rte --data-dir ../shared/data

For an NLI source the map is by label name: entailment -> entailment, contradiction -> contradiction, neutral ->
neutral, and any source label the target lacks -> the target's "not_entailment" (RTE's two classes). If a fusion
cannot beat its target's own adapter while the source alone already scores above it, the source was not the limit;
if the source alone sits at the target's majority share, there was little to borrow. Prints a Markdown table: per
seed, the source run's accuracy on each target's dev set, the target's majority share, and its dev size.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from adapterfusion.evaluation import load_run_split, run_batches
from adapterfusion.scoring import predict
from adapterfusion.tasks import get_task
from adapterfusion.training.rebuild import rebuild_run

FALLBACK = "not_entailment"


def label_map(source: list[str], target: list[str]) -> np.ndarray:
    """For each source label id, the target label id of the same name, else the target's FALLBACK label."""
    if FALLBACK not in target and not set(source) <= set(target):
        raise SystemExit(f"cannot map labels {source} onto {target}: name them alike or give the target {FALLBACK!r}")
    return np.array([target.index(name) if name in target else target.index(FALLBACK) for name in source])


def source_runs(results: Path, source: str) -> list[Path]:
    """The finished ST-A run folders of `source` under the experiment's results folder, one per seed."""
    runs = sorted(path.parent for path in results.glob(f"runs/*/{source}/st-a/seed-*/metrics.json"))
    if not runs:
        raise SystemExit(f"no finished ST-A run of {source!r} under {results}/runs")
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="an experiment's results folder (holding runs/ and adapters/)")
    parser.add_argument("--source", required=True, help="the source task whose ST-A runs are checked")
    parser.add_argument("--targets", nargs="+", required=True)
    parser.add_argument(
        "--data-dir", default=None, help="the targets' data (default: where the source run read its own)"
    )
    args = parser.parse_args()
    print("| source run | target | dev examples | majority share | source alone |")
    print("|---|---|---:|---:|---:|")
    for run_dir in source_runs(args.results, args.source):
        run = rebuild_run(run_dir)
        for target in args.targets:
            spec = get_task(target)
            mapping = label_map(list(run.task.label_names), list(spec.label_names))
            dev = load_run_split(run, "validation", args.data_dir, task=spec)
            logits = predict(run.model, run_batches(run, dev)).logits
            gold = np.asarray(dev["label"])
            accuracy = float((mapping[logits.argmax(-1)] == gold).mean())
            majority = float(np.bincount(gold).max() / len(gold))
            name = f"{run.task.name} seed {run.seed}"
            print(f"| {name} | {target} | {len(gold)} | {100 * majority:.2f} | {100 * accuracy:.2f} |")


if __name__ == "__main__":
    main()
