"""Helpers for the training tests: a wrapped copy of a saved encoder and a snapshot of its pretrained weights.
The saved tiny encoder and the task data are fixtures in tests/conftest.py (tiny_encoder_dir, data_dir)."""

from __future__ import annotations

from pathlib import Path

import torch
import transformers

import adapterfusion as af


def fresh_model(encoder_dir: Path) -> af.AdaptedModel:
    return af.wrap(transformers.AutoModel.from_pretrained(encoder_dir))


def encoder_state(model: af.AdaptedModel) -> dict[str, torch.Tensor]:
    """Name -> copy of every pretrained encoder weight (adapters and fusions left out)."""
    ids = {id(p) for p in model.encoder_parameters()}
    return {n: p.detach().clone() for n, p in model.model.named_parameters() if id(p) in ids}
