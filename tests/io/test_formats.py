"""The two translators behind serialization/formats.py. A piece read from a folder and written back gives the same
files (ours byte for byte; AdapterHub's fixtures, written by `adapters` 1.3.0, tensor for tensor with the same
config), and a Piece exported from a model comes back equal through either format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModel

import adapterfusion as af
from adapterfusion.injection.architectures import site_key
from adapterfusion.interop.adapterhub import piece_to_adapterhub
from adapterfusion.interop.adapterhub_config import (
    adapter_config_from_adapterhub,
    fusion_config_from_adapterhub,
    head_config_from_adapterhub,
)
from adapterfusion.interop.adapterhub_files import FILES, read_weights
from adapterfusion.piece import Piece
from adapterfusion.serialization.formats import read_piece, write_piece
from tiny_models import randomise, tiny_encoder

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "adapterhub" / "bert"
PIECES = [("adapter", "a"), ("adapter", "b"), ("fusion", "f"), ("head", "h")]


def _model() -> af.AdaptedModel:
    """Two fusable adapters (one with new LayerNorms before and after, which AdapterHub stores twice), their fusion
    and a head, all with random weights."""
    model = af.wrap(tiny_encoder("bert"))
    model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4, ln_before=True, ln_after=True))
    model.add_adapter("b", af.AdapterConfig.pfeiffer(reduction_factor=8))
    # AdapterHub stores no score dropout below the encoder's attention dropout (0.1): use that, so both formats hold it.
    model.add_fusion("f", ["a", "b"], af.FusionConfig.dynamic(score_dropout=0.1))
    model.add_head("h", af.ClassificationHead(num_labels=3, labels=("x", "y", "z")))
    randomise(model, std=0.2)
    return model


def assert_same_piece(found: Piece, expected: Piece) -> None:
    assert (found.kind, found.name, found.config, found.adapters) == (
        expected.kind,
        expected.name,
        expected.config,
        expected.adapters,
    )
    assert sorted(found.tensors) == sorted(expected.tensors)
    for key, value in expected.tensors.items():
        assert torch.equal(found.tensors[key], value), key


def test_site_keys_are_spelled_by_site_key():
    model = _model()
    assert [site.key for site in model.sites] == [site_key(i, p) for i in (0, 1) for p in ("attention", "output")]
    assert set(model.export_piece("adapter", "a").tensors) == {
        f"{site_key(i, 'output')}.{module}.{leaf}"
        for i in (0, 1)
        for module in ("ln_before", "down", "up", "ln_after")
        for leaf in ("weight", "bias")
    }


# Each format's one writer of a Piece: ours, and AdapterHub's (what export_adapterhub writes a model's piece with).
WRITERS = {"adapterfusion": write_piece, "adapterhub": piece_to_adapterhub}


@pytest.mark.parametrize("fmt", WRITERS)
@pytest.mark.parametrize(("kind", "name"), PIECES)
def test_an_exported_piece_comes_back_equal_through_each_format(tmp_path, fmt, kind, name):
    model = _model()
    piece = model.export_piece(kind, name)
    layout = model.layout()
    read = read_piece(WRITERS[fmt](piece, tmp_path / name, layout), kind, layout)
    # AdapterHub names a fusion by its adapters ('a,b'), which is read back as 'a-b'.
    assert_same_piece(read.renamed("f") if (fmt, kind) == ("adapterhub", "fusion") else read, piece)
    assert read.source == str(tmp_path / name)


@pytest.mark.parametrize(("kind", "name"), PIECES)
def test_our_folder_read_and_written_back_is_byte_identical(tmp_path, kind, name):
    model = _model()
    saved = getattr(model, f"save_{kind}")(name, tmp_path / "saved")
    again = write_piece(read_piece(saved, kind, model.layout()), tmp_path / "again", model.layout())
    assert sorted(p.name for p in again.iterdir()) == sorted(p.name for p in saved.iterdir())
    for path in saved.iterdir():
        assert (again / path.name).read_bytes() == path.read_bytes(), path.name


_TRANSLATE = {
    "adapter": lambda config, hf: adapter_config_from_adapterhub(config),
    "fusion": lambda config, hf: fusion_config_from_adapterhub(config, hf.attention_probs_dropout_prob),
    "head": lambda config, hf: head_config_from_adapterhub(config, hf.hidden_dropout_prob),
}


@pytest.mark.parametrize(
    "folder",
    sorted(
        str(p.relative_to(FIXTURES)) for kind in ("adapters", "fusions", "heads") for p in (FIXTURES / kind).iterdir()
    ),
)
def test_an_adapterhub_folder_read_and_written_back_keeps_every_tensor(tmp_path, folder):
    kind = {"adapters": "adapter", "fusions": "fusion", "heads": "head"}[folder.split("/")[0]]
    layout = af.wrap(AutoModel.from_pretrained(FIXTURES / "base_model")).layout()
    piece = read_piece(FIXTURES / folder, kind, layout)
    assert piece.blame == FIXTURES / folder / FILES[kind][0]
    written = piece_to_adapterhub(piece, tmp_path, layout)
    theirs, ours = read_weights(FIXTURES / folder, kind), load_file(str(written / FILES[kind][1]))
    assert sorted(ours) == sorted(theirs)
    for key, value in theirs.items():
        assert torch.equal(ours[key], value), key
    their_document, our_document = (json.loads((d / FILES[kind][0]).read_text()) for d in (FIXTURES / folder, written))
    for field in ("name", "adapter_names", "model_type", "hidden_size", "model_class", "version"):
        assert our_document.get(field) == their_document.get(field), field
    translate = _TRANSLATE[kind]
    assert translate(our_document["config"], layout.config) == translate(their_document["config"], layout.config)


def test_a_fusion_subset_is_installed_as_a_piece():
    model = _model()
    model.add_adapter("c", af.AdapterConfig.pfeiffer(reduction_factor=8))
    model.add_fusion("abc", ["a", "b", "c"])
    randomise(model, std=0.2)
    af.fusion.add_fusion_subset(model, "abc", ["c", "a"], "ac")
    assert model.fusion_setup("ac").adapters == ("a", "c")
    source, subset = model.export_piece("fusion", "abc"), model.export_piece("fusion", "ac")
    assert list(subset.tensors) == list(source.tensors)
    assert all(torch.equal(subset.tensors[k], v) for k, v in source.tensors.items())
    assert all(subset.tensors[k].data_ptr() != v.data_ptr() for k, v in source.tensors.items())  # copies


def test_install_piece_checks_before_it_replaces_anything():
    model = _model()
    piece = model.export_piece("adapter", "a")
    broken = Piece(
        "adapter",
        "a",
        piece.config,
        {**piece.tensors, "layer.0.attention.down.weight": torch.ones(8, 32)},
        source="somewhere",
    )
    before = {k: v.clone() for k, v in model.export_piece("adapter", "a").tensors.items()}
    with pytest.raises(
        af.SerializationError,
        match=r"somewhere: the adapter holds weights at \['layer.0.attention'\], where its config",
    ):
        model.install_piece(broken, overwrite=True)
    after = model.export_piece("adapter", "a").tensors
    assert all(torch.equal(after[k], v) for k, v in before.items())
    with pytest.raises(af.ConfigError, match="piece kind"):
        model.export_piece("adaptor", "a")
