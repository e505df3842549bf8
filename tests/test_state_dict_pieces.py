"""AdaptedModel.load_state_dict: a state dict of a model that held adapters, fusions or heads this one lacks is
refused naming those pieces (torch listed every unexpected tensor, without saying that the pieces must be added
first); with them added it loads exactly, and strict=False behaves as torch's."""

from __future__ import annotations

import pytest
import torch

import adapterfusion as af
from tiny_models import tiny_encoder


def _full(seed: int = 0) -> af.AdaptedModel:
    model = af.wrap(tiny_encoder(seed=seed))
    model.add_adapter("x")
    model.add_adapter("y")
    model.add_fusion("f", ["x", "y"])
    model.add_head("cls", af.ClassificationHead(num_labels=2))
    return model


def test_pieces_the_model_lacks_are_named() -> None:
    state = _full().state_dict()
    bare = af.wrap(tiny_encoder(seed=1))
    bare.add_adapter("x")
    with pytest.raises(af.NameNotFoundError) as caught:
        bare.load_state_dict(state)
    message = str(caught.value)
    assert "adapters ['y']" in message and "fusions ['f']" in message and "heads ['cls']" in message
    assert "'x'" not in message and "add_adapter" in message


def test_with_the_pieces_added_it_loads_every_tensor() -> None:
    source = _full(seed=0)
    target = _full(seed=1)
    assert target.load_state_dict(source.state_dict()) is not None
    for (name, mine), (_, theirs) in zip(target.state_dict().items(), source.state_dict().items(), strict=True):
        assert torch.equal(mine, theirs), name


def test_not_strict_loads_the_rest_and_reports_the_pieces_keys_as_unexpected() -> None:
    source = _full(seed=0)
    target = af.wrap(tiny_encoder(seed=1))
    result = target.load_state_dict(source.state_dict(), strict=False)
    assert result.unexpected_keys and all(
        ".adapters." in key or ".fusions." in key or key.startswith("heads.") for key in result.unexpected_keys
    )
    assert torch.equal(target.model.embeddings.word_embeddings.weight, source.model.embeddings.word_embeddings.weight)


def test_other_mismatches_keep_torchs_error() -> None:
    state = _full().state_dict()
    first = next(iter(state))
    del state[first]
    with pytest.raises(RuntimeError, match="Missing key"):
        _full(seed=1).load_state_dict(state)
