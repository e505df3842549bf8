"""The real task data for tests, the `shared/data` folder beside the repository (tests that need it skip when it is
absent), and JSON-lines writers/readers for hand-made task files.

A plain module: fixtures in tests/conftest.py and tests/tasks/conftest.py hand these to tests."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

DATA_DIR = (Path(__file__).parents[1] / ".." / "shared" / "data").resolve()


def write_jsonl(path: Path, rows: list[dict], gz: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r) + "\n" for r in rows)
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as handle:
            handle.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def read_rows(path: Path) -> list[dict]:
    """Rows of a (gzip'd) JSON-lines file, for comparing loaded data with its source."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]
