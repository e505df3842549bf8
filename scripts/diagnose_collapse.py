"""Why did the old main job's fusions predict one class? Reruns its recipe with [CLS] and with mean pooling, and
measures what the shipped encoder's [CLS] vector carries. docs/fidelity.md holds the committed output.

    .venv/bin/python scripts/diagnose_collapse.py --out runs/diagnose            # both parts, ~15 min on 2 cores
    .venv/bin/python scripts/diagnose_collapse.py --out runs/diagnose --part features

Part "recipe": the old examples/paper-small.yaml recipe for stage 1 and stage 2 (six tasks of the demo pack, 512
training examples seen once, batch 16, 64 tokens, lr 1e-3, two seeds), once with the heads on [CLS] (what the old
job did) and once with mean pooling, everything else equal. Prints each fusion's dev accuracy and
top_prediction_share (1.00 = one class for every dev example) and the source adapters' mean accuracy.

Part "features": for RTE and SST-2 dev/train slices, how alike the frozen encoder's [CLS] and mean-pooled vectors
of different examples are (mean pairwise cosine; |std| / |mean| over examples) and what a regularised linear probe
on standardised features reaches, so the cause can be told apart from "the features carry no information".
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path

import numpy as np

DEMO = Path(__file__).resolve().parents[1] / "adapterfusion" / "demo_data"
TASKS = ["rte", "cb", "mrpc", "sick", "sst2", "mnli"]
TARGETS = ["rte", "cb"]


def recipe(out: Path) -> list[dict]:
    from adapterfusion.experiments import run_experiment

    rows = []
    for pooling in ("cls", "mean"):
        spec = {
            "name": f"old-recipe-{pooling}",
            "data_dir": str(DEMO),
            "output_dir": str(out / pooling),
            "tasks": TASKS,
            "seeds": [1, 2],
            "max_examples": {"train": 512, "validation": 200},
            "training": {"epochs": 1, "batch_size": 16, "max_length": 64, "patience": None},
            "setups": [
                {"name": "st-a", "reduction_factor": 16, "learning_rate": 1e-3, "pooling": pooling},
                {"name": "fusion-st-a", "tasks": TARGETS, "learning_rate": 1e-3, "pooling": pooling},
            ],
            "fusion": {t: TASKS for t in TARGETS},
        }
        run_experiment(spec, progress=False, report=False)
        runs = out / pooling / "runs"
        sources = {
            t: [
                json.loads((runs / "st-a-rf16" / t / "st-a" / f"seed-{s}" / "metrics.json").read_text())["best"][
                    "accuracy"
                ]
                for s in (1, 2)
            ]
            for t in TASKS
        }
        for target in TARGETS:
            for seed in (1, 2):
                best = json.loads(
                    (runs / "fusion-st-a" / target / "fusion-st-a" / f"seed-{seed}" / "metrics.json").read_text()
                )["best"]
                rows.append(
                    {
                        "pooling": pooling,
                        "target": target,
                        "seed": seed,
                        "accuracy": best["accuracy"],
                        "top_prediction_share": best["top_prediction_share"],
                        "source_accuracy": {t: float(np.mean(v)) for t, v in sources.items()},
                    }
                )
    print("\n| pooling | target | seed | fusion dev acc. | top-prediction share | source ST-A acc. (mean of 2 seeds) |")
    print("|---|---|---:|---:|---:|---|")
    for r in rows:
        src = ", ".join(f"{t} {100 * a:.0f}" for t, a in r["source_accuracy"].items())
        print(
            f"| {r['pooling']} | {r['target']} | {r['seed']} | {100 * r['accuracy']:.2f} | "
            f"{r['top_prediction_share']:.2f} | {src} |"
        )
    return rows


def _probe(train_x, train_y, dev_x, dev_y) -> float:
    """L2-regularised logistic regression on standardised features (LBFGS), dev accuracy."""
    import torch

    mu, sd = train_x.mean(0), train_x.std(0) + 1e-6
    z, zd = (train_x - mu) / sd, (dev_x - mu) / sd
    classes = int(max(train_y.max(), dev_y.max())) + 1
    weight = torch.zeros(z.shape[1], classes, requires_grad=True)
    bias = torch.zeros(classes, requires_grad=True)
    optimizer = torch.optim.LBFGS([weight, bias], max_iter=200)

    def closure():
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(z @ weight + bias, train_y) + 1e-2 * (weight**2).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    return float(((zd @ weight + bias).argmax(1) == dev_y).float().mean())


def features() -> list[dict]:
    import torch
    import transformers
    from torch.utils.data import DataLoader

    import adapterfusion as af
    from adapterfusion.tasks import encode_task, load_task_data
    from adapterfusion.tasks.collator import TaskCollator

    tokenizer = transformers.AutoTokenizer.from_pretrained(af.default_encoder_path())
    encoder = transformers.AutoModel.from_pretrained(af.default_encoder_path()).eval()
    rows = []
    for task in ("rte", "sst2"):
        data, _ = load_task_data(task, DEMO, 1, max_examples={"train": 400, "validation": 200})
        encoded, _ = encode_task(task, data, tokenizer, 64)
        pooled = {}
        for split in ("train", "validation"):
            cls, mean, labels = [], [], []
            for batch in DataLoader(encoded[split], batch_size=50, collate_fn=TaskCollator(tokenizer)):
                with torch.no_grad():
                    hidden = encoder(**{k: v for k, v in batch.items() if k != "labels"}).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).float()
                cls.append(hidden[:, 0])
                mean.append((hidden * mask).sum(1) / mask.sum(1))
                labels.append(batch["labels"])
            pooled[split] = {"cls": torch.cat(cls), "mean": torch.cat(mean), "labels": torch.cat(labels)}
        for pooling in ("cls", "mean"):
            x = pooled["train"][pooling]
            unit = torch.nn.functional.normalize(x, dim=1)
            off_diagonal = ~torch.eye(len(x), dtype=torch.bool)
            rows.append(
                {
                    "task": task,
                    "pooling": pooling,
                    "mean_pairwise_cosine": float((unit @ unit.T)[off_diagonal].mean()),
                    "spread": float(x.std(0).norm() / x.mean(0).norm()),
                    "probe_dev_accuracy": _probe(
                        x, pooled["train"]["labels"], pooled["validation"][pooling], pooled["validation"]["labels"]
                    ),
                }
            )
    print("\n| task | pooling | mean pairwise cosine | spread (|std| / |mean|) | linear probe dev acc. |")
    print("|---|---|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['task']} | {r['pooling']} | {r['mean_pairwise_cosine']:.3f} | {r['spread']:.2f} | "
            f"{100 * r['probe_dev_accuracy']:.1f} |"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--part", choices=("all", "recipe", "features"), default="all")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    args.out.mkdir(parents=True, exist_ok=True)
    result = {}
    if args.part in ("all", "features"):
        result["features"] = features()
    if args.part in ("all", "recipe"):
        result["recipe"] = recipe(args.out)
    (args.out / f"diagnose-{args.part}.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
