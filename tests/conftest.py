"""Fixtures for the whole suite: a deterministic seed for every test, inputs for the tiny encoders, the real task
data folder and a tiny random BERT saved with the shipped tokenizer.

Fixtures live in conftest.py files (this one, and one per test folder for that folder's own): test modules take them
as parameters and never import them. Plain helpers live in modules beside this file (tiny_models.py,
tiny_experiments.py, task_data.py, tolerances.py), which test modules import by name; never import from `conftest`,
as every folder's conftest.py is a module named `conftest`."""

from __future__ import annotations

from pathlib import Path

import huggingface_hub
import pytest
import torch
import transformers

import adapterfusion as af
from task_data import DATA_DIR
from tiny_models import tiny_inputs


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _no_hub_lookups(monkeypatch) -> None:
    """No test asks the real Hub whether a model exists (io/hub.reach's one look-up): every Hub id is known, so a
    test's made-up id ('some-org/some-encoder') fails, if at all, where it would with the network on. Tests of the
    look-up itself replace this."""
    monkeypatch.setattr(huggingface_hub, "model_info", lambda repo_id, **kwargs: None)


@pytest.fixture
def inputs() -> dict[str, torch.Tensor]:
    return tiny_inputs()


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not (DATA_DIR / "rte").is_dir():
        pytest.skip(f"offline task data not found at {DATA_DIR} (the 'shared/data' folder beside the repo)")
    return DATA_DIR


@pytest.fixture(scope="session")
def tiny_encoder_dir(tmp_path_factory) -> Path:
    """A tiny random BERT (hidden 32, 2 layers) saved with the shipped tokenizer, for the training recipes."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(af.default_encoder_path())
    config = transformers.BertConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        vocab_size=tokenizer.vocab_size,
        max_position_embeddings=128,
    )
    torch.manual_seed(0)
    model = transformers.BertModel(config)
    path = tmp_path_factory.mktemp("encoders") / "tiny-bert"
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_float64_encoder_dir(tiny_encoder_dir, tmp_path_factory) -> Path:
    """The tiny BERT saved in float64: runs trained from it compare to the float64 row of tests/tolerances.py."""
    path = tmp_path_factory.mktemp("encoders") / "tiny-bert-float64"
    transformers.AutoModel.from_pretrained(tiny_encoder_dir).double().save_pretrained(path)
    transformers.AutoTokenizer.from_pretrained(tiny_encoder_dir).save_pretrained(path)
    return path
