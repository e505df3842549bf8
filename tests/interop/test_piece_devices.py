"""Where loaded weights land. The loaders take no map_location or device: a piece is read to the CPU (safetensors;
AdapterHub's .bin with torch.load(map_location='cpu')) and copied into modules built on the model's own device and
dtype, so a piece saved on another device or in another dtype loads where the model is. The one device map_location
cannot undo is 'meta': a pickle of tensors with no values stays there, and is refused as such, before the model
changes (it was a RuntimeError 'Tensor.item() cannot be called on meta tensors')."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import adapterfusion as af
from adapterfusion.interop import export_adapterhub
from tiny_models import tiny_encoder


def _model() -> af.AdaptedModel:
    model = af.wrap(tiny_encoder("bert"))
    model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4))
    model.add_adapter("b", af.AdapterConfig.pfeiffer(reduction_factor=4))
    model.add_fusion("f", ["a", "b"])
    return model


@pytest.mark.parametrize("kind, name", [("adapter", "a"), ("fusion", "f")])
def test_an_adapterhub_pickle_of_meta_tensors_is_refused(tmp_path, kind, name):
    folder = export_adapterhub(_model(), kind, name, tmp_path / "hub", use_safetensors=False)
    (path,) = [p for p in folder.iterdir() if p.suffix == ".bin"]
    state = torch.load(path, weights_only=True)
    torch.save({key: value.to("meta") for key, value in state.items()}, path)
    model = _model()
    model.delete_fusion("f")
    with pytest.raises(af.SerializationError, match="is on the meta device, which holds shapes but no values"):
        getattr(model, f"load_{kind}")(folder, name="x")
    assert model.adapter_names == ["a", "b"] and model.fusion_names == []


def test_a_piece_of_meta_tensors_is_refused_by_install_piece():
    model = _model()
    piece = model.export_piece("adapter", "a")
    meta = dataclasses.replace(piece, name="m", tensors={k: v.to("meta") for k, v in piece.tensors.items()})
    with pytest.raises(af.SerializationError, match="meta device"):
        model.install_piece(meta)
    assert model.adapter_names == ["a", "b"]


def test_a_piece_of_another_dtype_loads_in_the_models_dtype(tmp_path):
    """A float64 adapter (saved from a float64 model) into a float32 model: float32 weights, no dtype mix."""
    source = _model().double()
    saved = source.save_adapter("a", tmp_path / "a")
    model = af.wrap(tiny_encoder("bert"))
    model.load_adapter(saved)
    loaded = model.sites_with_adapter("a")[0].adapters["a"]
    assert {p.dtype for p in loaded.parameters()} == {torch.float32} and model.pieces_of_other_dtype() == {}
    expected = source.sites_with_adapter("a")[0].adapters["a"].up.weight.float()
    assert torch.equal(loaded.up.weight, expected)


@pytest.mark.parametrize("method", ["load_adapter", "load_fusion", "load_head"])
@pytest.mark.parametrize("option", ["map_location", "device", "device_map"])
def test_device_options_are_not_taken(tmp_path, method, option):
    """No loader has a device option (pieces follow the model): one passed is Python's TypeError before any file is
    read, so the model is untouched."""
    model = _model()
    with pytest.raises(TypeError, match=option):
        getattr(model, method)(tmp_path / "missing", **{option: "cuda:7"})
    assert model.adapter_names == ["a", "b"] and model.fusion_names == ["f"]
