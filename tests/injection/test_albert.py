"""ALBERT: one group of layers run num_hidden_layers times over with the same weights, so each site is one layer of
adapters applied at every repetition, its layer index counting distinct layers (as AdapterHub's do).

The reference is a float64 ALBERT forward written out from the model's weights (embeddings taken from the model's own
module; attention, feed-forward, LayerNorms and adapters by hand): at the attention site the adapter sees the output
projection o and the layer input r, at the feed-forward site ffn_output's output f and the attention output a, and
the layer's own LayerNorm ends each, LN(r + o + A(.)): Pfeiffer A(LN(o + r)) (the block's LayerNorm before the
adapter), Houlsby A(o) (its own LayerNorm copy refused, as on every site whose block applies its LayerNorm itself).
"""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

import adapterfusion as af
from adapterfusion.fusion.layer import FUSION_IMPLEMENTATIONS, FusionImplementation
from tiny_decoders import randomise_pieces
from tiny_models import tiny_encoder, tiny_inputs
from tolerances import assert_close

_ACTIVATIONS = {"relu": F.relu, "swish": F.silu}


def _layer_norm(module: torch.nn.LayerNorm, x: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, module.normalized_shape, module.weight, module.bias, module.eps)


def _bottleneck(adapter: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    act = _ACTIVATIONS[adapter.config.non_linearity]
    return F.linear(act(F.linear(x, adapter.down.weight, adapter.down.bias)), adapter.up.weight, adapter.up.bias)


def _adapted(site: torch.nn.Module, name: str | None, o: torch.Tensor, r: torch.Tensor, norm) -> torch.Tensor:
    """LN(r + o + A(.)) with adapter `name` at `site` (None: the bare sub-layer, LN(r + o))."""
    if name is None or name not in site.adapters:
        return _layer_norm(norm, r + o)
    adapter = site.adapters[name]
    x = _layer_norm(norm, o + r) if adapter.config.original_ln_before else o
    return _layer_norm(norm, r + o + _bottleneck(adapter, x))


def _by_hand(model: af.AdaptedModel, inputs: dict[str, torch.Tensor], name: str | None) -> torch.Tensor:
    albert = model.model
    config = albert.config
    heads, size = config.num_attention_heads, config.hidden_size // config.num_attention_heads
    keep = inputs["attention_mask"].bool()[:, None, None, :]
    h = F.linear(
        albert.embeddings(input_ids=inputs["input_ids"]),
        albert.encoder.embedding_hidden_mapping_in.weight,
        albert.encoder.embedding_hidden_mapping_in.bias,
    )
    layers = albert.encoder.albert_layer_groups[0].albert_layers
    for _ in range(config.num_hidden_layers):
        for layer in layers:
            attention = layer.attention

            def split(x: torch.Tensor) -> torch.Tensor:
                return x.view(*x.shape[:2], heads, size).transpose(1, 2)

            q, k, v = (split(F.linear(h, p.weight, p.bias)) for p in (attention.query, attention.key, attention.value))
            scores = (q @ k.transpose(-1, -2) / size**0.5).masked_fill(~keep, float("-inf"))
            context = (scores.softmax(-1) @ v).transpose(1, 2).reshape(h.shape)
            dense = attention.dense.base_layer
            o = F.linear(context, dense.weight, dense.bias)
            a = _adapted(attention.dense, name, o, h, attention.LayerNorm)
            inner = F.gelu(F.linear(a, layer.ffn.weight, layer.ffn.bias), approximate="tanh")  # gelu_new
            output = layer.ffn_output.base_layer
            f = F.linear(inner, output.weight, output.bias)
            h = _adapted(layer.ffn_output, name, f, a, layer.full_layer_layer_norm)
    return h


def _albert(**config) -> af.AdaptedModel:
    """The tiny ALBERT (two distinct layers, run twice over) in float64, wrapped; `config` overrides."""
    return af.wrap(tiny_encoder("albert", **config).double())


@pytest.mark.parametrize(
    "adapter_config",
    [
        af.AdapterConfig.pfeiffer(),
        af.AdapterConfig.houlsby(train_layer_norm=False),
        af.AdapterConfig.pfeiffer(leave_out=(1,)),
    ],
    ids=["pfeiffer", "houlsby", "pfeiffer-leave-out-1"],
)
def test_each_repetition_runs_the_same_adapters_as_written_out_by_hand(adapter_config) -> None:
    model = _albert(num_hidden_layers=3)
    assert model.num_layers == 2 and [site.key for site in model.sites] == [
        "layer.0.attention",
        "layer.0.output",
        "layer.1.attention",
        "layer.1.output",
    ]
    model.add_adapter("a", adapter_config)
    randomise_pieces(model, seed=3)
    model.activate(adapter="a")
    inputs = tiny_inputs()
    with torch.no_grad():
        expected = _by_hand(model, inputs, "a")
        assert_close(model(**inputs).last_hidden_state, expected)
        model.activate()  # the bare model against the same hand computation: the reference's own check
        bare = _by_hand(model, inputs, None)
        assert_close(model(**inputs).last_hidden_state, bare)
    assert not torch.allclose(expected, bare)  # the adapters change the output


def test_a_fusion_records_the_mean_of_its_weights_over_the_repetitions(monkeypatch) -> None:
    """The weights each application of a fusion site computes, caught at the fusion implementation, averaged: what a
    recording holds, and afresh for each forward (the count restarts with every call of the encoder)."""
    model = _albert()
    for name in ("a", "b", "c"):
        model.add_adapter(name)
    model.add_fusion("f", ["a", "b", "c"])
    randomise_pieces(model, seed=5)
    model.activate(fusion="f")
    caught: list[torch.Tensor] = []
    fast = FUSION_IMPLEMENTATIONS["fast"]

    def catching(*args, **kwargs):
        out, probs = fast.fuse(*args, **kwargs)
        caught.append(probs.detach().clone())
        return out, probs

    monkeypatch.setitem(FUSION_IMPLEMENTATIONS, "fast", FusionImplementation(catching, fast.mix_layer_norms))
    with torch.no_grad():
        for seed in (1, 2):  # a second forward records its own applications only
            caught.clear()
            recorded = model(**tiny_inputs(seed=seed), output_fusion_attentions=True).fusion_attentions_by_site
            assert recorded is not None and sorted(recorded) == [(0, "output"), (1, "output")]
            # the sites run in order: layer 0 then layer 1, per repetition (num_hidden_layers=2)
            assert len(caught) == 4
            assert_close(recorded[(0, "output")], (caught[0] + caught[2]) / 2)
            assert_close(recorded[(1, "output")], (caught[1] + caught[3]) / 2)


def test_routed_rows_equal_each_row_alone() -> None:
    model = _albert()
    model.add_adapter("a")
    model.add_adapter("b", af.AdapterConfig.houlsby(train_layer_norm=False))
    randomise_pieces(model, seed=7)
    inputs = tiny_inputs(batch=3)
    with torch.no_grad():
        routed = model(**inputs, adapter_names=["b", None, "a"]).last_hidden_state
        for row, name in enumerate(["b", None, "a"]):
            model.activate(adapter=name)
            alone = model(**{k: v[row : row + 1] for k, v in inputs.items()}).last_hidden_state
            assert_close(routed[row : row + 1], alone)


def test_saved_adapters_load_into_a_fresh_albert(tmp_path) -> None:
    model = _albert()
    model.add_adapter("a")
    randomise_pieces(model, seed=9)
    model.activate(adapter="a")
    model.save_adapter("a", tmp_path / "a")
    inputs = tiny_inputs()
    with torch.no_grad():
        expected = model(**inputs).last_hidden_state
        fresh = _albert()  # the same seed: the same base weights
        fresh.load_adapter(tmp_path / "a")
        fresh.activate(adapter="a")
        assert_close(fresh(**inputs).last_hidden_state, expected)


def test_layer_count_from_the_config_counts_distinct_layers() -> None:
    """What experiment files check top-k's k against before any model is loaded (the loaded model's own count)."""
    from adapterfusion.injection.architectures import layer_count
    from tiny_models import tiny_config

    albert = tiny_config("albert", num_hidden_layers=12, inner_group_num=3)
    assert layer_count(albert) == 3 == _albert(num_hidden_layers=12, inner_group_num=3).num_layers
    assert layer_count(tiny_config("bert", num_hidden_layers=5)) == 5
