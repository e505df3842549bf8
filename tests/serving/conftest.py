"""Fixtures of every server test: the shipped MiniLM tokenizer (read once a module) and serve_helpers' tiny served
model (a new one a test, since tests load pieces into it and change its weights)."""

from __future__ import annotations

from typing import Any

import pytest
from serve_helpers import load_tokenizer, tiny_served_model

import adapterfusion as af


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return load_tokenizer()


@pytest.fixture()
def model(tokenizer: Any) -> af.AdaptedModel:
    return tiny_served_model(tokenizer)
