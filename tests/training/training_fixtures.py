"""Fixtures for the training recipes: a tiny random BERT saved with the shipped tokenizer, and the real task data
folder beside the repository (tests that need it are skipped when it is absent).

Not a conftest.py, for the reason given in tests/tasks/task_fixtures.py; test modules import from here."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers

import adapterfusion as af

DATA_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "data"


@pytest.fixture(scope="session")
def tiny_encoder_dir(tmp_path_factory) -> Path:
    tokenizer = transformers.AutoTokenizer.from_pretrained(af.default_encoder_path())
    config = transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                     vocab_size=tokenizer.vocab_size, max_position_embeddings=128)
    torch.manual_seed(0)
    model = transformers.BertModel(config)
    path = tmp_path_factory.mktemp("encoders") / "tiny-bert"
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not (DATA_DIR / "rte").is_dir():
        pytest.skip(f"no task data at {DATA_DIR}")
    return DATA_DIR


def fresh_model(encoder_dir: Path) -> af.AdaptedModel:
    return af.wrap(transformers.AutoModel.from_pretrained(encoder_dir))


def encoder_state(model: af.AdaptedModel) -> dict[str, torch.Tensor]:
    """Name -> copy of every pretrained encoder weight (adapters and fusions left out)."""
    ids = {id(p) for p in model.encoder_parameters()}
    return {n: p.detach().clone() for n, p in model.model.named_parameters() if id(p) in ids}


@pytest.fixture(scope="session")
def tiny_float64_encoder_dir(tiny_encoder_dir, tmp_path_factory) -> Path:
    """The tiny BERT saved in float64: runs trained from it compare to the float64 row of tests/tolerances.py."""
    path = tmp_path_factory.mktemp("encoders") / "tiny-bert-float64"
    transformers.AutoModel.from_pretrained(tiny_encoder_dir).double().save_pretrained(path)
    transformers.AutoTokenizer.from_pretrained(tiny_encoder_dir).save_pretrained(path)
    return path
