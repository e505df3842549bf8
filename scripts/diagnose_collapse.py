"""Why did the old main job's fusions predict one class? A small grid of runs on the demo data pack, printed as a
Markdown table (docs/fidelity.md holds the table of the run we committed).

Each row trains stage-1 adapters for the sources (or reuses them from an earlier row with the same stage-1
settings), then one fusion on the target, and reports dev accuracy and `top_prediction_share` (1.00 = the
fusion predicts one class for every dev example). The first row is the old paper-small.yaml recipe.

    .venv/bin/python scripts/diagnose_collapse.py --out /tmp/diagnose [--target rte] [--rows baseline,mean,...]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import time
import warnings
from pathlib import Path

from adapterfusion.training import train

DEMO = Path(__file__).resolve().parents[1] / "adapterfusion" / "demo_data"
SOURCES = ["sick", "mnli", "sst2", "mrpc", "cb", "rte"]
OLD = {"epochs": 1, "batch_size": 16, "max_length": 64, "patience": None}  # the old paper-small sizes
LIMITS = {"train": 512, "validation": 200}

# name -> (pooling, stage-1 training overrides, fusion training overrides)
ROWS = {
    "baseline": ("cls", {"learning_rate": 1e-3}, {"learning_rate": 1e-3}),
    "mean": ("mean", {"learning_rate": 1e-3}, {"learning_rate": 1e-3}),
    "cls-5ep": ("cls", {"learning_rate": 1e-3, "epochs": 5}, {"learning_rate": 1e-3, "epochs": 5}),
    "mean-5ep": ("mean", {"learning_rate": 1e-3, "epochs": 5}, {"learning_rate": 1e-3, "epochs": 5}),
    "mean-lr5e-5": ("mean", {"learning_rate": 1e-3}, {"learning_rate": 5e-5}),
    "mean-5ep-lr1e-4": ("mean", {"learning_rate": 1e-3, "epochs": 5}, {"learning_rate": 1e-4, "epochs": 5}),
}


def _best(run) -> dict[str, float]:
    return {k: round(v, 4) for k, v in run.metrics.items() if k in ("accuracy", "top_prediction_share")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--target", default="rte")
    parser.add_argument("--rows", default=",".join(ROWS))
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    results = []
    for name in args.rows.split(","):
        pooling, stage1, fusion = ROWS[name]
        stage1_key = json.dumps([pooling, stage1], sort_keys=True)
        store = args.out / "stores" / hashlib.sha256(stage1_key.encode()).hexdigest()[:8]
        start = time.perf_counter()
        sources = {}
        for task in SOURCES:
            run = train(task, "st-a", seed=1, data_dir=DEMO, output_dir=store.parent / "runs" / store.name,
                        store=store, training_config={**OLD, **stage1}, max_examples=LIMITS,
                        setup_options={"pooling": pooling}) if not (store / "done" / task).exists() else None
            if run is not None:
                (store / "done").mkdir(parents=True, exist_ok=True)
                (store / "done" / task).write_text(json.dumps(_best(run)))
            sources[task] = json.loads((store / "done" / task).read_text())
        fused = train(args.target, "fusion-st-a", seed=1, data_dir=DEMO, output_dir=args.out / "fusion" / name,
                      store=store, training_config={**OLD, **fusion}, max_examples=LIMITS,
                      setup_options={"pooling": pooling, "sources": [s for s in SOURCES if s != args.target]})
        row = {"row": name, "pooling": pooling, "stage1": stage1, "fusion": fusion, "sources": sources,
               "fused": _best(fused), "seconds": round(time.perf_counter() - start)}
        results.append(row)
        print(json.dumps(row), flush=True)
    print(f"\n| row | pooling | stage 1 | fusion | source acc. ({', '.join(SOURCES)}) | {args.target} fusion acc. | "
          "top-prediction share |\n|---|---|---|---|---|---:|---:|")
    for r in results:
        accs = " / ".join(f"{100 * r['sources'][t]['accuracy']:.0f}" for t in SOURCES)
        print(f"| {r['row']} | {r['pooling']} | {r['stage1']} | {r['fusion']} | {accs} | "
              f"{100 * r['fused']['accuracy']:.1f} | {r['fused']['top_prediction_share']:.2f} |")
    (args.out / "diagnose.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
