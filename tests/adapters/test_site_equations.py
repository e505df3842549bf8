"""A BERT layer with Pfeiffer and Houlsby adapters against the papers' equations written out by hand,
using the sub-modules of an untouched copy of the encoder."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from transformers import BertConfig, BertModel

import adapterfusion as af
from tolerances import assert_close


def _tiny_bert() -> BertModel:
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=50,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=32,
    )
    return BertModel(config).double().eval()  # float64: the layer and its hand-written equation must agree exactly


def _randomise(model: af.AdaptedModel, name: str) -> None:
    with torch.no_grad():
        for parameter in model.adapter_parameters(name):
            parameter.add_(torch.randn_like(parameter) * 0.3)


def _manual_layer_inputs(plain: BertModel, input_ids: torch.Tensor):
    """Embeddings and the self-attention context of layer 0, from the untouched model."""
    embedded = plain.embeddings(input_ids=input_ids)
    layer = plain.encoder.layer[0]
    context = layer.attention.self(embedded)[0]
    return embedded, layer, context


def test_pfeiffer_layer_matches_equation() -> None:
    plain = _tiny_bert()
    model = af.wrap(copy.deepcopy(plain)).eval()
    model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4))
    _randomise(model, "a")
    model.activate(adapter="a")
    input_ids = torch.randint(0, 50, (2, 6))
    adapter = model.sites[1].adapters["a"]  # layer 0, 'output' site

    with torch.no_grad():
        embedded, layer, context = _manual_layer_inputs(plain, input_ids)
        attention_out = layer.attention.output(context, embedded)  # untouched: no adapter at 'attention'
        h = layer.output.dense(layer.intermediate(attention_out))
        ln = layer.output.LayerNorm
        x = ln(h + attention_out)  # pretrained LN before
        z = F.linear(F.relu(F.linear(x, adapter.down.weight, adapter.down.bias)), adapter.up.weight, adapter.up.bias)
        expected = ln(h + z + attention_out)  # residual h, pretrained LN after
        actual = model(input_ids=input_ids).last_hidden_state
    assert_close(actual, expected)


def test_houlsby_layer_matches_equation_with_its_own_layer_norms() -> None:
    plain = _tiny_bert()
    model = af.wrap(copy.deepcopy(plain)).eval()
    model.add_adapter("h", af.AdapterConfig.houlsby(reduction_factor=4))
    _randomise(model, "h")  # also moves the adapter's LayerNorm copies away from the pretrained ones
    model.activate(adapter="h")
    input_ids = torch.randint(0, 50, (2, 6))
    bottom, top = model.sites[0].adapters["h"], model.sites[1].adapters["h"]

    def delta(adapter, x):
        return F.linear(F.silu(F.linear(x, adapter.down.weight, adapter.down.bias)), adapter.up.weight, adapter.up.bias)

    with torch.no_grad():
        embedded, layer, context = _manual_layer_inputs(plain, input_ids)
        h1 = layer.attention.output.dense(context)
        attention_out = bottom.layer_norm(h1 + delta(bottom, h1) + embedded)
        h2 = layer.output.dense(layer.intermediate(attention_out))
        expected = top.layer_norm(h2 + delta(top, h2) + attention_out)
        actual = model(input_ids=input_ids).last_hidden_state
    assert not torch.equal(bottom.layer_norm.weight, layer.attention.output.LayerNorm.weight)
    assert_close(actual, expected)


@pytest.mark.parametrize("preset", ["pfeiffer", "houlsby"])
def test_parameters_per_adapter_per_layer_are_2md_plus_d_plus_m(preset: str) -> None:
    model = af.wrap(_tiny_bert())
    config = af.AdapterConfig.from_name(preset, reduction_factor=4, train_layer_norm=False)
    model.add_adapter("a", config)
    d, m = 16, 4
    sites = model.sites_with_adapter("a")
    assert len(sites) == len(config.positions)
    for site in sites:
        assert sum(p.numel() for p in site.adapters["a"].parameters()) == 2 * m * d + d + m
