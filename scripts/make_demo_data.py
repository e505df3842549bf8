"""Build the demo data pack shipped in `adapterfusion/demo_data/` from an offline copy of the Hub data.

    .venv/bin/python scripts/make_demo_data.py [--source ../shared/data] [--out adapterfusion/demo_data]

Input: a folder of `<task>/<split>.jsonl.gz` files in the HuggingFace Hub field layout (for us ../shared/data,
beside the clone).
Output, same layout (what `load_task_data(task, data_dir=demo_data_dir())` reads):

    rte, cb, mrpc, sick: train + validation, complete (SICK's test split is left out)
    sst2:                2,000 seeded train rows + the complete validation (872)
    mnli:                3,000 seeded rows of validation_matched, kept under that name: MNLI has no train split
                         here, so the loader carves train/validation out of it (seeded by the run's seed)
    sick-r:              SICK's rows again (1,000 seeded train rows + the complete validation), for the regression
                         task on its relatedness_score (the task's data folder is named after the task)

Rows are copied byte for byte (Hub field names and label ids); sliced rows keep their source order. Gzip files are
written with mtime 0 and no file name, so running the script twice gives identical bytes.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SEED = 20240601

# task -> {split: row count to keep (None = all)}
PACK: dict[str, dict[str, int | None]] = {
    "rte": {"train": None, "validation": None},
    "cb": {"train": None, "validation": None},
    "mrpc": {"train": None, "validation": None},
    "sick": {"train": None, "validation": None},
    "sst2": {"train": 2000, "validation": None},
    "mnli": {"validation_matched": 3000},
    "sick-r": {"train": 1000, "validation": None},
}
SOURCE_FOLDER = {"sick-r": "sick"}  # a task whose rows come from another task's data


def read_lines(path: Path) -> list[bytes]:
    with gzip.open(path, "rb") as handle:
        return [
            line if line.endswith(b"\n") else line + b"\n"
            for line in handle.read().splitlines(keepends=True)
            if line.strip()
        ]


def slice_rows(lines: list[bytes], count: int | None, task: str, split: str) -> list[bytes]:
    """All rows, or `count` rows drawn with a fixed seed per (task, split), kept in source order."""
    if count is None or count >= len(lines):
        return lines
    rng = random.Random(f"{SEED}/{task}/{split}")
    keep = sorted(rng.sample(range(len(lines)), count))
    return [lines[i] for i in keep]


def write_lines(path: Path, lines: list[bytes]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as out:
        out.writelines(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--out", type=Path, default=ROOT / "adapterfusion" / "demo_data")
    args = parser.parse_args()
    total = 0
    for task, splits in PACK.items():
        for split, count in splits.items():
            source = args.source / SOURCE_FOLDER.get(task, task) / f"{split}.jsonl.gz"
            if not source.is_file():
                raise SystemExit(f"{source} not found: pass --source with <task>/<split>.jsonl.gz files")
            lines = read_lines(source)
            kept = slice_rows(lines, count, task, split)
            target = args.out / task / f"{split}.jsonl.gz"
            write_lines(target, kept)
            size = target.stat().st_size
            total += size
            digest = hashlib.sha256(target.read_bytes()).hexdigest()[:12]
            print(f"{task}/{split}: {len(kept)} of {len(lines)} rows, {size / 1024:.0f} KiB, sha256 {digest}")
    print(f"total {total / 1024 / 1024:.2f} MiB in {args.out}")


if __name__ == "__main__":
    main()
