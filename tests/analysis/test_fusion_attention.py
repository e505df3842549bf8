"""mean_fusion_attention: the per-layer mean softmax weight of each adapter over real tokens only, checked against
a hand computation on a padded batch; its JSON round trip and the seed average."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import adapterfusion as af
from adapterfusion.analysis import FusionActivation, average_activations, load_fusion_activation, mean_fusion_attention
from adapterfusion.errors import ConfigError
from tiny_decoders import tiny_decoder
from tiny_models import tiny_encoder, tiny_inputs
from tolerances import assert_close

ADAPTERS = ["a", "b", "c"]


@pytest.fixture
def fused() -> af.AdaptedModel:
    model = af.wrap(tiny_encoder("bert").double())  # float64: the hand computation must match up to rounding
    for name in ADAPTERS:
        model.add_adapter(name, af.AdapterConfig.pfeiffer(reduction_factor=4))
        _randomise(model.adapter_parameters(name))
    model.add_head("h", af.ClassificationHead(num_labels=2, dropout=0.0))
    model.add_fusion("f", ADAPTERS, af.FusionConfig.dynamic())
    _randomise([p for p in model.fusion_parameters("f") if p.dim() == 2])  # non-uniform attention
    model.activate(head="h")
    return model


@torch.no_grad()
def _randomise(parameters, std: float = 0.3) -> None:
    for parameter in parameters:
        parameter.normal_(0.0, std)


def _batches() -> list[dict[str, torch.Tensor]]:
    first = tiny_inputs(batch=3, seq=8, seed=1)
    first["attention_mask"][1, 5:] = 0  # 5 real tokens
    first["attention_mask"][2, 2:] = 0  # 2 real tokens
    second = tiny_inputs(batch=1, seq=6, seed=2)
    second["labels"] = torch.tensor([1])  # ignored
    return [first, second]


def test_mean_counts_only_real_tokens(fused):
    batches = _batches()
    result = mean_fusion_attention(fused, "f", batches)

    # Hand computation: record each batch's weights, then add up the real positions one example at a time.
    fused.activate(fusion="f", head="h")
    fused.eval()
    sums, tokens = {}, 0
    with torch.no_grad():
        for batch in batches:
            out = fused(
                input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], output_fusion_attentions=True
            )
            for b in range(batch["input_ids"].shape[0]):
                real = [t for t in range(batch["input_ids"].shape[1]) if batch["attention_mask"][b, t] == 1]
                tokens += len(real)
                for layer, attention in enumerate(out.fusion_attentions):
                    for t in real:
                        sums[layer] = sums.get(layer, np.zeros(len(ADAPTERS))) + attention[b, t].double().numpy()
    expected = np.stack([sums[layer] / tokens for layer in sorted(sums)])

    assert result.adapters == tuple(ADAPTERS) and result.layers == (0, 1)
    assert result.tokens == 8 + 5 + 2 + 6
    assert_close(result.values, expected, dtype=torch.float64)
    assert_close(result.values.sum(axis=1), np.ones(len(result.layers)), dtype=torch.float64)


def test_a_houlsby_fusion_counts_both_sites_of_each_layer():
    """A Houlsby fusion has a site after attention and one after the feed-forward in every layer; only the output
    site reached the record (and so the heatmaps and prune's ranking). Each layer's mean now covers both alike."""
    model = af.wrap(tiny_encoder("bert").double())
    for name in ADAPTERS:
        model.add_adapter(name, af.AdapterConfig.houlsby(reduction_factor=4))
        _randomise(model.adapter_parameters(name))
    model.add_fusion("f", ADAPTERS, af.FusionConfig.dynamic())
    _randomise([p for p in model.fusion_parameters("f") if p.dim() == 2])
    batches = _batches()
    result = mean_fusion_attention(model, "f", batches)

    model.activate(fusion="f")
    model.eval()
    sums, counts = {}, {}
    with torch.no_grad():
        for batch in batches:
            out = model(
                input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], output_fusion_attentions=True
            )
            assert {site for _, site in out.fusion_attentions_by_site} == {"attention", "output"}
            for (layer, _), attention in out.fusion_attentions_by_site.items():
                for b, t in batch["attention_mask"].nonzero().tolist():
                    sums[layer] = sums.get(layer, np.zeros(len(ADAPTERS))) + attention[b, t].numpy()
                    counts[layer] = counts.get(layer, 0) + 1
    expected = np.stack([sums[layer] / counts[layer] for layer in sorted(sums)])
    assert result.tokens == 8 + 5 + 2 + 6 and all(count == 2 * result.tokens for count in counts.values())
    assert_close(result.values, expected, dtype=torch.float64)


def test_an_encoder_decoder_fusion_counts_each_stacks_own_real_tokens():
    """T5's decoder layers' sites cover the decoder's positions: those were masked with the encoder's mask (a shape
    error), and without labels the model had no decoder inputs. Labels build them; -100 positions do not count."""
    model = af.wrap(tiny_decoder("t5", dtype=torch.float64))
    for name in ADAPTERS:
        model.add_adapter(name, af.AdapterConfig.pfeiffer(reduction_factor=4))
        _randomise(model.adapter_parameters(name))
    model.add_fusion("f", ADAPTERS, af.FusionConfig.dynamic())
    _randomise([p for p in model.fusion_parameters("f") if p.dim() == 2])
    batch = tiny_inputs(batch=2, seq=6, seed=3)
    batch["attention_mask"][1, 4:] = 0
    batch["labels"] = torch.tensor([[5, 6, 7], [8, -100, -100]])
    result = mean_fusion_attention(model, "f", [batch])

    model.activate(fusion="f")
    model.eval()
    with torch.no_grad():
        out = model(**batch, output_fusion_attentions=True)
    real = {False: batch["attention_mask"].bool(), True: batch["labels"] != -100}
    expected = [out.fusion_attentions[layer][real[layer >= 2]].mean(dim=0).numpy() for layer in range(model.num_layers)]
    assert result.layers == (0, 1, 2, 3) and result.tokens == 6 + 4
    assert_close(result.values, np.stack(expected), dtype=torch.float64)


def _fused_seq2seq(model_type: str) -> af.AdaptedModel:
    """A tiny float64 T5 or BART with fusion 'f' over ADAPTERS, random weights throughout."""
    model = af.wrap(tiny_decoder(model_type, dtype=torch.float64))
    for name in ADAPTERS:
        model.add_adapter(name, af.AdapterConfig.pfeiffer(reduction_factor=4))
        _randomise(model.adapter_parameters(name))
    model.add_fusion("f", ADAPTERS, af.FusionConfig.dynamic())
    _randomise([p for p in model.fusion_parameters("f") if p.dim() == 2])
    return model


@pytest.mark.parametrize("model_type", ["t5", "bart"])
def test_an_encoder_decoder_fusion_under_a_head_of_ours_counts_the_shifted_input(model_type):
    """With a head of ours the decoder reads the input shifted right, and the batch's labels are class ids: they were
    taken for the decoder's mask, a shape error at the end of every fusion run on T5 or BART with a head."""
    model = _fused_seq2seq(model_type)
    model.add_head("h", af.ClassificationHead(num_labels=3, pooling="last", dropout=0.0))
    ids = torch.tensor([[11, 12, 13, 14, 15, 2], [21, 22, 23, 2, 0, 0]])
    batch = {"input_ids": ids, "attention_mask": (ids != 0).long(), "labels": torch.tensor([0, 2])}
    result = mean_fusion_attention(model, "f", [batch], head="h")

    model.activate(fusion="f", head="h")
    model.eval()
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=batch["attention_mask"], output_fusion_attentions=True)
    mask = batch["attention_mask"].bool()
    real = {False: mask, True: torch.cat([torch.ones_like(mask[:, :1]), mask[:, :-1]], dim=1)}
    first_decoder = model.num_layers - model.fingerprint.decoder_layers
    expected = [
        out.fusion_attentions[layer][real[layer >= first_decoder]].mean(dim=0).numpy()
        for layer in range(model.num_layers)
    ]
    assert result.tokens == 6 + 4
    assert_close(result.values, np.stack(expected), dtype=torch.float64)


def test_padding_does_not_count(fused):
    batches = _batches()
    base = mean_fusion_attention(fused, "f", batches)
    changed = [dict(b) for b in batches]
    ids = changed[0]["input_ids"].clone()
    ids[1, 5:] = 7  # other padding tokens: same masks, so the same answer
    ids[2, 2:] = 9
    changed[0]["input_ids"] = ids
    assert_close(mean_fusion_attention(fused, "f", changed).values, base.values, dtype=torch.float64)
    unmasked = [{**b, "attention_mask": torch.ones_like(b["attention_mask"])} for b in batches]
    assert not np.allclose(mean_fusion_attention(fused, "f", unmasked).values, base.values, atol=1e-6)


def test_model_state_is_restored(fused):
    fused.train()
    mean_fusion_attention(fused, "f", _batches())
    assert fused.training and fused.active_fusion is None and fused.active_head == "h"


def test_unknown_fusion_and_empty_data_are_errors(fused):
    with pytest.raises(af.AdapterFusionError, match="nope"):
        mean_fusion_attention(fused, "nope", _batches())
    with pytest.raises(ConfigError, match="no fusion attention"):
        mean_fusion_attention(fused, "f", [])


def test_json_round_trip_and_seed_average(tmp_path):
    one = FusionActivation(
        "f", ("a", "b"), (0, 1), np.array([[0.25, 0.75], [0.5, 0.5]]), 10, {"task": "rte", "seed": 1}
    )
    two = FusionActivation(
        "f", ("a", "b"), (0, 1), np.array([[0.75, 0.25], [0.1, 0.9]]), 30, {"task": "rte", "seed": 2}
    )
    path = tmp_path / "fusion_attention.json"
    path.write_text(json.dumps(one.to_dict()))
    loaded = load_fusion_activation(tmp_path)
    np.testing.assert_array_equal(loaded.values, one.values)
    assert loaded.info == {"task": "rte", "seed": 1} and loaded.tokens == 10
    mean = average_activations([one, two])
    np.testing.assert_allclose(mean.values, [[0.5, 0.5], [0.3, 0.7]])
    assert mean.tokens == 40
    with pytest.raises(ConfigError, match="cannot average"):
        average_activations([one, FusionActivation("f", ("b", "a"), (0, 1), one.values, 1)])
    assert "mean" in one.table() and "0.750" in one.table()


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("layers", ["0", "1"], "'layers' must be a list of layer indices"),
        ("adapters", [1, 2], "'adapters' must be a list of names"),
        ("tokens", "10", "'tokens' must be a count"),
        ("fusion", None, "'fusion' must be a string"),
    ],
)
def test_a_damaged_record_is_named_when_read(tmp_path, key, value, message):
    """String layers or integer adapter names were read in and failed later, as a TypeError inside analyze-fusion's
    table and the report's figures."""
    record = FusionActivation("f", ("a", "b"), (0, 1), np.array([[0.5, 0.5], [0.25, 0.75]]), 10).to_dict()
    (tmp_path / "fusion_attention.json").write_text(json.dumps({**record, key: value}))
    with pytest.raises(af.SerializationError, match=message):
        load_fusion_activation(tmp_path)


@pytest.mark.parametrize("model_type", ["t5", "bart"])
def test_an_encoder_decoder_fusion_counts_every_position_of_unmasked_decoder_inputs(model_type):
    """decoder_input_ids given without a decoder_attention_mask were masked with the encoder's mask shifted right:
    a shape error when their length differs from the input's, and at equal lengths the input's padding dropped
    decoder positions the model had read. The model reads them all, and so does the mean now."""
    model = _fused_seq2seq(model_type)
    ids = torch.tensor([[11, 12, 13, 14, 15, 2], [21, 22, 23, 2, 0, 0]])
    for length in (4, 6):
        decoder_ids = torch.arange(30, 30 + 2 * length).reshape(2, length)
        batch = {"input_ids": ids, "attention_mask": (ids != 0).long(), "decoder_input_ids": decoder_ids}
        result = mean_fusion_attention(model, "f", [batch])
        explicit = mean_fusion_attention(
            model, "f", [{**batch, "decoder_attention_mask": torch.ones_like(decoder_ids)}]
        )
        assert result.tokens == 6 + 4
        assert_close(result.values, explicit.values, dtype=torch.float64)


def test_one_batch_or_a_batch_that_is_no_mapping_is_refused(fused):
    """One batch passed as `batches` was iterated as its keys, and a tensor as a batch: AttributeErrors from inside."""
    batch = _batches()[0]
    with pytest.raises(ConfigError, match=r"got one batch; pass \[batch\]"):
        mean_fusion_attention(fused, "f", batch)
    with pytest.raises(ConfigError, match="a batch must be a mapping of model inputs .* got Tensor"):
        mean_fusion_attention(fused, "f", [batch["input_ids"]])


def test_an_activation_without_adapters_or_layers_is_refused(tmp_path):
    """It made an empty table and heatmap, written as if fine; read from a file it is a damaged record."""
    with pytest.raises(ConfigError, match="has 0 adapters and 0 layers"):
        FusionActivation("f", (), (), np.zeros((0, 0)), 0)
    with pytest.raises(ConfigError, match="has 1 adapters and 0 layers"):
        FusionActivation("f", ("a",), (), np.zeros((0, 1)), 0)
    record = {"fusion": "f", "adapters": [], "layers": [], "values": [], "tokens": 0}
    (tmp_path / "fusion_attention.json").write_text(json.dumps(record))
    with pytest.raises(af.SerializationError, match="not a fusion activation record: .* 0 adapters and 0 layers"):
        load_fusion_activation(tmp_path)


def _record(info: object = None, **fields) -> FusionActivation:
    core = {"fusion": "f", "adapters": ("a", "b"), "layers": (0, 1), "values": np.array([[0.5, 0.5], [0.2, 0.8]])}
    return FusionActivation(**{**core, "tokens": 3, **fields}, info={} if info is None else info)


def test_average_takes_any_iterable_of_records_of_one_kind():
    """Before: a generator was a TypeError, a dict one from inside numpy, and softmax weights and ScaLearn scales
    were averaged in silence under the first record's label."""
    assert average_activations(r for r in [_record(), _record()]).info["runs"] == 2
    with pytest.raises(ConfigError, match="got dict"):
        average_activations([{"a": 0.5}])
    with pytest.raises(ConfigError, match="got one; pass \\[activation\\]"):
        average_activations(_record())
    with pytest.raises(ConfigError, match="mean softmax weight record.*mean ScaLearn scale record"):
        average_activations([_record(), _record({"fusion_kind": "scalearn"})])


def test_a_record_checks_its_values_names_and_version(tmp_path):
    assert isinstance(_record(values=[[0.5, 0.5], [0.2, 0.8]]).values, np.ndarray)  # was an AttributeError
    with pytest.raises(ConfigError, match="not a \\[layers, adapters\\] array of numbers"):
        _record(values=[[0.5, "x"], [0.2, 0.8]])
    for field, value in (("adapters", ("a", "a")), ("layers", (1, 1))):
        with pytest.raises(ConfigError, match=f"names {field} .* one more than once"):
            _record(**{field: value}, values=np.zeros((2, 2)))
    with pytest.raises(ConfigError, match="table\\(digits\\)=-1"):
        _record().table(-1)
    path = tmp_path / "fusion_attention.json"
    path.write_text(json.dumps({**_record().to_dict(), "format_version": 2}))
    with pytest.raises(af.SerializationError, match="format_version 2 is not supported"):
        load_fusion_activation(path)
    with pytest.raises(ConfigError, match="None is not a path"):
        load_fusion_activation(None)


def test_every_fusion_layer_skipped_is_named_before_any_batch_runs(fused):
    """Before: a pass over every batch, then 'no batches, no real tokens, or every fusion layer skipped'."""
    fused.activate(fusion="f", skip_layers=[0, 1])

    def never():
        raise AssertionError("a batch was read")
        yield

    with pytest.raises(ConfigError, match=r"runs at layers \[0, 1\], and skip_layers=\[0, 1\] skips every one"):
        mean_fusion_attention(fused, "f", never())


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"tokens": -1}, "'tokens' must be a count"),
        ({"layers": (-1, 0)}, "'layers' must be a list of layer indices"),  # was drawn as layer 0
        ({"adapters": "ab"}, "'adapters' must be a list of names"),
        ({"info": [1]}, "'info' must be a mapping"),  # was a TypeError in to_dict
    ],
)
def test_a_record_built_by_hand_meets_the_rules_of_a_saved_one(fields, message):
    with pytest.raises(ConfigError, match=message):
        _record(**fields)
    assert _record(layers=(np.int64(0), np.int64(1))).layers == (0, 1)


def test_a_record_holds_plain_fields_and_refuses_what_no_measurement_gives(tmp_path):
    """Lists and numpy integers were kept as given (a record built with lists did not average with one read back,
    numpy layers did not write as JSON), info could overwrite the record's own fields in to_dict, and a saved record's
    null, '0.5' or wrongly nested values were read as NaN, 0.5 or reshaped into other cells."""
    built = _record(adapters=["a", "b"], layers=[np.int64(0), np.int64(1)], tokens=np.int64(3))
    assert (built.adapters, built.layers, built.tokens) == (("a", "b"), (0, 1), 3)
    (tmp_path / "fusion_attention.json").write_text(json.dumps(built.to_dict()))
    assert average_activations([built, load_fusion_activation(tmp_path)]).info["runs"] == 2
    with pytest.raises(ConfigError, match=r"info holds \['values'\], which name the record's own fields"):
        _record({"values": [[1.0, 0.0], [1.0, 0.0]]})
    with pytest.raises(ConfigError, match="found values of dtype complex128"):
        _record(values=np.array([[0.5, 0.5], [0.2, 0.8j]]))
    with pytest.raises(ConfigError, match=r"names fusion or adapter '\$x\$', which no model's piece is called"):
        _record(adapters=("$x$", "b"))
    for values, message in (
        ([[None, 0.5], [0.2, 0.8]], "found NoneType None"),
        ([["0.5", 0.5], [0.2, 0.8]], "found str '0.5'"),
        ([[True, 0.5], [0.2, 0.8]], "found bool True"),
        ([[0.5], [0.5], [0.2], [0.8]], r"shape \(4, 1\), expected \(2 layers, 2 adapters\)"),
    ):
        (tmp_path / "fusion_attention.json").write_text(json.dumps({**built.to_dict(), "values": values}))
        with pytest.raises(af.SerializationError, match=message):
            load_fusion_activation(tmp_path)
