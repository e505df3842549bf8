"""The real task data for tests, the `shared/data` folder beside the repository or the folder named by
ADAPTERFUSION_TEST_DATA_DIR (tests that need it skip when it is absent, and tests/conftest.py says how many; under
CI=true its absence is an error), and JSON-lines writers/readers for hand-made task files.

Tests that only need a task of the shipped demo pack (adapterfusion/demo_data) and none of the real data's sizes
take the `demo_data_dir` fixture instead, so they run in every clone.

A plain module: fixtures in tests/conftest.py and tests/tasks/conftest.py hand these to tests."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

DATA_DIR = Path(
    os.environ.get("ADAPTERFUSION_TEST_DATA_DIR") or Path(__file__).parents[1] / ".." / "shared" / "data"
).resolve()


def real_data_present() -> bool:
    """Whether the real task data is there (its RTE folder: every task folder comes with the same copy)."""
    return (DATA_DIR / "rte").is_dir()


def write_jsonl(path: Path, rows: list[dict], gz: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r) + "\n" for r in rows)
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as handle:
            handle.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def train_and_dev(path: Path | str) -> dict[str, str]:
    """data_files for a task trained and scored on the rows of `path`: the validation split is a copy of the same
    name in a dev/ folder beside it (one file for both roles is refused: dev scores on the training rows)."""
    path = Path(path)
    dev = path.parent / "dev" / path.name
    dev.parent.mkdir(exist_ok=True)
    dev.write_bytes(path.read_bytes())
    return {"train": str(path), "validation": str(dev)}


def read_rows(path: Path) -> list[dict]:
    """Rows of a (gzip'd) JSON-lines file, for comparing loaded data with its source."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]
