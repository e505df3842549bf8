"""Fusion pruning on tiny random models: which adapters are kept (top-k, activation mass), that the kept ones are the
most activated in a fusion whose attention is known in closed form, that the pruned fusion's logits equal the full
fusion with the dropped adapters masked out (literal reference path), that dropped adapters are really out of the
computation, and the errors for bad criteria."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import adapterfusion as af
from adapterfusion.evaluation import predict
from adapterfusion.pruning import compare_pruned, select_adapters, time_fusions
from adapterfusion.tasks import get_task
from tiny_models import HIDDEN, randomise, tiny_encoder, tiny_inputs
from tolerances import assert_close

ADAPTERS = ("a", "b", "c")
RTE = get_task("rte")


def _fused_model(names: tuple[str, ...] = ADAPTERS) -> af.AdaptedModel:
    model = af.wrap(tiny_encoder("bert").double())  # float64: the equalities below are exact up to rounding
    for name in names:
        model.add_adapter(name, af.AdapterConfig.pfeiffer(reduction_factor=4))
    model.add_fusion("f", names, af.FusionConfig.dynamic())
    model.add_head("h", af.ClassificationHead(num_labels=2, dropout=0.0))
    model.activate(head="h")
    return model.eval()


def _batches() -> list[dict[str, torch.Tensor]]:
    batches = [tiny_inputs(batch=3, seq=8, seed=1), tiny_inputs(batch=2, seq=5, seed=2)]
    for batch, labels in zip(batches, ([0, 1, 1], [1, 0]), strict=True):
        batch["labels"] = torch.tensor(labels)
    return batches


# ---- selection ------------------------------------------------------------------------------------------
SHARES = {"a": 0.1, "b": 0.5, "c": 0.25, "d": 0.15}


@pytest.mark.parametrize(
    "keep, mass, expected",
    [
        (1, None, ("b",)),
        (2, None, ("b", "c")),
        (3, None, ("b", "c", "d")),
        (4, None, ("a", "b", "c", "d")),
        (None, 0.5, ("b",)),
        (None, 0.51, ("b", "c")),
        (None, 0.75, ("b", "c")),
        (None, 0.9, ("b", "c", "d")),
        (None, 1.0, ("a", "b", "c", "d")),
    ],
)
def test_select_keeps_the_most_activated_in_fusion_order(keep, mass, expected):
    assert select_adapters(SHARES, keep=keep, mass=mass) == expected


def test_select_ties_go_to_the_adapter_listed_first():
    assert select_adapters({"x": 0.25, "y": 0.25, "z": 0.5}, keep=2) == ("x", "z")


@pytest.mark.parametrize(
    "keep, mass, expected",
    [(1, None, ("rte",)), (2, None, ("cb", "rte")), (None, 0.25, ("rte",)), (None, 0.5, ("cb", "rte"))],
)
def test_select_ties_go_to_the_target_adapter_then_the_fusion_order(keep, mass, expected):
    shares = {"cb": 0.25, "sst2": 0.25, "mnli": 0.25, "rte": 0.25}  # the target's own adapter is listed last
    assert select_adapters(shares, keep=keep, mass=mass, target_adapter="rte") == expected


def test_select_treats_activations_equal_up_to_rounding_as_tied():
    # Means of float32 softmax weights: digits below 1e-6 are rounding noise and must not decide.
    shares = {"cb": 1 / 3 + 4e-8, "sst2": 1 / 3 - 4e-8, "rte": 1 / 3}
    assert select_adapters(shares, keep=1, target_adapter="rte") == ("rte",)
    assert select_adapters(shares, keep=1) == ("cb",)
    assert select_adapters({"cb": 0.3334, "rte": 0.3333, "x": 0.3333}, keep=1, target_adapter="rte") == ("cb",)


@pytest.mark.parametrize(
    "keep, mass, message",
    [
        (5, None, r"keep=5: the fusion has 4 adapters, so keep must be an integer in 1..4"),
        (0, None, r"keep=0 must be a positive integer"),
        (True, None, r"keep=True must be a positive integer"),
        (None, 0.0, r"mass=0.0 must lie in \(0, 1\]"),
        (None, 1.5, r"mass=1.5 must lie in \(0, 1\]"),
        (None, -0.2, r"mass=-0.2 must lie in \(0, 1\]"),
        (None, math.nan, r"mass=nan must lie in \(0, 1\]"),
        (None, None, "exactly one of keep=K"),
        (2, 0.9, "exactly one of keep=K"),
    ],
)
def test_bad_criteria_are_refused(keep, mass, message):
    with pytest.raises(af.ConfigError, match=message):
        select_adapters(SHARES, keep=keep, mass=mass)


@pytest.mark.parametrize(
    "shares, message",
    [
        ({}, "got no adapter activations"),
        ({"a": math.nan, "b": 0.5}, r"the activations \{'a': nan\} are not finite numbers >= 0"),
        ({"a": 0.5, "b": -0.1}, r"the activations \{'b': -0.1\} are not finite"),
        ({"a": "0.5", "b": 0.5}, r"the activations \{'a': '0.5'\} are not finite"),
    ],
)
def test_activations_that_are_no_finite_shares_are_refused(shares, message):
    """A NaN share never reached a mass and sorted anywhere: every adapter was kept (or any one), without a word;
    no shares kept nothing; a string was a TypeError from round()."""
    for criterion in ({"keep": 1}, {"mass": 0.5}):
        with pytest.raises(af.ConfigError, match=message):
            select_adapters(shares, **criterion)


def test_target_adapter_must_be_in_the_fusion():
    with pytest.raises(af.ConfigError, match=r"target_adapter='rte' is not one of the fusion's adapters \['a', "):
        select_adapters(SHARES, keep=1, target_adapter="rte")


# ---- on a model ---------------------------------------------------------------------------------------------
@torch.no_grad()
def _known_attention(model: af.AdaptedModel, logits: list[float], names: tuple[str, ...] = ADAPTERS) -> None:
    """Make every token's fusion scores equal `logits`: Q maps everything to its bias e, K is the identity, and
    each adapter's output is the constant t_n e / |e|² (up-projection weights zero), so (Q q)·(K z_n) = t_n·scaling."""
    e = torch.linspace(-1.0, 1.0, HIDDEN, dtype=torch.float64)
    for site in model.sites_with_fusion("f"):
        fusion = site.fusions["f"]
        fusion.query.weight.zero_()
        fusion.query.bias.copy_(e)
        fusion.key.weight.copy_(torch.eye(HIDDEN))
        fusion.key.bias.zero_()
        for name, t in zip(names, logits, strict=True):
            site.adapters[name].up.weight.zero_()
            site.adapters[name].up.bias.copy_(t * e / e.dot(e))


@pytest.mark.slow
def test_pruning_keeps_the_adapter_the_fusion_attends_to_most():
    model = _fused_model()
    logits = [0.0, 3.0, 1.5]  # b gets most attention, then c, then a
    _known_attention(model, logits)
    scaling = model.adapter_configs["a"].scaling
    expected = torch.tensor(logits, dtype=torch.float64).mul(scaling).softmax(-1).numpy()

    result = compare_pruned(model, "f", RTE, _batches(), keep=1, repeats=1)
    assert_close(np.array([result.activation[n] for n in ADAPTERS]), expected, dtype=torch.float64)
    assert result.kept == ("b",) and result.dropped == ("a", "c")
    assert result.before.adapters == ADAPTERS and result.after.fusion == "f_pruned"
    assert model.fusion_setup("f_pruned").adapters == ("b",)
    assert_close(result.kept_share, float(expected[1]), dtype=torch.float64)

    mass = float(expected[1] + expected[2] / 2)  # b alone is not enough, b + c is
    assert compare_pruned(model, "f", RTE, _batches(), mass=mass, repeats=1, overwrite=True).kept == ("b", "c")


def test_uniform_fusion_keeps_the_target_adapter():
    """Equal scores give exactly equal activations: the target's own adapter (listed last) is kept."""
    names = ("cb", "sst2", "rte")
    model = _fused_model(names)
    _known_attention(model, [0.7, 0.7, 0.7], names)
    result = compare_pruned(model, "f", RTE, _batches(), keep=1, repeats=1, target_adapter="rte")
    assert len(set(result.activation.values())) == 1
    assert result.kept == ("rte",) and result.target_adapter == "rte"
    again = compare_pruned(model, "f", RTE, _batches(), keep=1, repeats=1, overwrite=True)
    assert again.kept == ("cb",)  # no target: fusion order


def test_pruned_logits_equal_the_masked_reference_and_skip_dropped_adapters():
    model = _fused_model()
    for name in ADAPTERS:
        randomise(torch.nn.ModuleList(s.adapters[name] for s in model.sites_with_adapter(name)), std=0.3)
    randomise(torch.nn.ModuleList(s.fusions["f"] for s in model.sites_with_fusion("f")), std=0.3)
    batches = _batches()

    result = compare_pruned(model, "f", RTE, batches, keep=2, head="h", repeats=1)
    assert len(result.kept) == 2 and model.active_fusion is None and model.active_head == "h"  # activation restored
    model.activate(fusion=result.after.fusion, head="h")
    pruned = predict(model, batches)

    model.set_fusion_implementation("reference")  # the paper's equations, literally, over all N adapters
    model.set_fusion_mask("f", result.kept)
    model.activate(fusion="f", head="h")
    reference = predict(model, batches)
    assert_close(pruned.logits, reference.logits, dtype=torch.float32)  # predict returns float32 logits
    assert_close(result.after.metrics["loss"], reference.loss, dtype=torch.float64)

    # A dropped adapter is out of the computation: poisoning its weights changes nothing.
    model.set_fusion_implementation("fast")
    with torch.no_grad():
        for site in model.sites_with_adapter(result.dropped[0]):
            for parameter in site.adapters[result.dropped[0]].parameters():
                parameter.fill_(float("nan"))
    model.activate(fusion=result.after.fusion, head="h")
    np.testing.assert_array_equal(predict(model, batches).logits, pruned.logits)


def test_scalearn_fusions_are_ranked_by_the_size_of_their_scales_and_pruned_exactly():
    """ScaLearn's scales are signed and unnormalised: adapter 'c' with large negative scales counts most, though
    their mean is the lowest. The pruned fusion equals the full one with the dropped adapters masked (scale 0)."""
    model = af.wrap(tiny_encoder("bert").double())
    for name in ADAPTERS:
        model.add_adapter(name, af.AdapterConfig.pfeiffer(reduction_factor=4))
        randomise(torch.nn.ModuleList(s.adapters[name] for s in model.sites_with_adapter(name)), std=0.3)
    model.add_fusion("f", ADAPTERS, af.FusionConfig.scalearn())
    model.add_head("h", af.ClassificationHead(num_labels=2, dropout=0.0))
    with torch.no_grad():
        for site in model.sites_with_fusion("f"):
            scales = site.fusions["f"].scales
            scales.copy_(torch.stack([scales[0].fill_(0.2), scales[1].fill_(0.5), scales[2].fill_(-2.0)]))
    model.eval().activate(head="h")
    batches = _batches()

    result = compare_pruned(model, "f", RTE, batches, keep=1, head="h", repeats=1)
    assert result.kept == ("c",) and result.activation == pytest.approx({"a": 0.2, "b": 0.5, "c": 2.0})
    by_mass = compare_pruned(model, "f", RTE, batches, mass=0.9, head="h", repeats=1, pruned_name="by_mass")
    assert by_mass.kept == ("b", "c")  # 2.5 of 2.7
    model.activate(fusion=result.after.fusion, head="h")
    pruned = predict(model, batches)
    model.set_fusion_mask("f", result.kept)
    model.activate(fusion="f", head="h")
    assert_close(pruned.logits, predict(model, batches).logits, dtype=torch.float32)


def test_compare_pruned_checks_keep_and_name_first():
    model = _fused_model()
    with pytest.raises(af.ConfigError, match="keep=4: the fusion has 3 adapters"):
        compare_pruned(model, "f", RTE, _batches(), keep=4)
    with pytest.raises(af.ConfigError, match="pruned_name='f' would replace the fusion being pruned"):
        compare_pruned(model, "f", RTE, _batches(), keep=1, pruned_name="f")
    assert model.fusion_names == ["f"]


def test_compare_pruned_keeps_a_fusion_already_named_like_its_result():
    """It replaced a fusion the user had under `<fusion>_pruned` with no word; every add_*/load_* refuses that."""
    model = _fused_model()
    model.add_fusion("f_pruned", ["a", "b"], af.FusionConfig.dynamic())
    before = {k: v.clone() for k, v in model.export_piece("fusion", "f_pruned").tensors.items()}
    with pytest.raises(af.PieceExistsError, match="already has a fusion 'f_pruned'.*overwrite=True"):
        compare_pruned(model, "f", RTE, _batches(), keep=1, repeats=1)
    after = model.export_piece("fusion", "f_pruned").tensors
    assert model.fusion_setup("f_pruned").adapters == ("a", "b") and all(after[k].equal(v) for k, v in before.items())
    result = compare_pruned(model, "f", RTE, _batches(), keep=1, repeats=1, overwrite=True)
    assert model.fusion_setup("f_pruned").adapters == result.kept


def test_time_fusions_reports_each_fusion():
    model = _fused_model()
    model.add_fusion("g", ["a"], af.FusionConfig.dynamic())
    times = time_fusions(model, ("f", "g"), _batches(), head="h", repeats=2)
    assert set(times) == {"f", "g"} and all(t > 0 for t in times.values())
    with pytest.raises(af.ConfigError, match="repeats=0"):
        time_fusions(model, ("f",), _batches(), head="h", repeats=0)


def test_an_extractive_qa_fusion_is_refused_by_name():
    """Its metrics need answers decoded across each context's windows: prune raised a TaskError from scoring."""
    model = af.wrap(tiny_encoder())
    for name in ("a", "b"):
        model.add_adapter(name)
    model.add_fusion("f", ["a", "b"])
    with pytest.raises(af.ConfigError, match="'squad' is extractive QA.*not supported yet"):
        compare_pruned(model, "f", get_task("squad"), [], keep=1)


def test_select_adapters_takes_a_mapping_and_a_name():
    with pytest.raises(af.ConfigError, match="has type list; expected a mapping"):  # was an AttributeError
        select_adapters(["a", "b"], keep=1)
    with pytest.raises(af.ConfigError, match="target_adapter=\\['a'\\] is not one of"):  # was a TypeError
        select_adapters({"a": 0.5, "b": 0.5}, keep=1, target_adapter=["a"])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"task": "rte"}, "task='rte'.* has type str"),  # an AttributeError
        ({"repeats": 0}, "repeats=0 must be a positive integer"),  # refused after the dev forwards
        ({"metric": "f1"}, r"metric='f1' is not one of task 'rte''s metrics \['accuracy'\]"),  # recorded as is
        ({"head": None, "no_active_head": True}, "none is given or active"),  # failed in the scoring
        ({"unlabelled": True}, "batches \\[0, 1\\] hold no 'labels'"),  # TaskError '5 predictions but 0 labels'
    ],
)
def test_compare_pruned_refuses_bad_arguments_and_adds_no_fusion(options, message):
    model = _fused_model()
    if options.pop("no_active_head", False):
        model.activate(fusion="f")
    batches = _batches()
    if options.pop("unlabelled", False):
        batches = [{k: v for k, v in batch.items() if k != "labels"} for batch in batches]
    with pytest.raises(af.ConfigError, match=message):
        compare_pruned(model, "f", **{"task": RTE, **options}, batches=batches, keep=1)
    assert model.fusion_names == ["f"]


def test_a_comparison_that_fails_midway_removes_its_pruned_fusion(monkeypatch):
    model = _fused_model()

    def fails(*args, **kwargs):
        raise RuntimeError("interrupted")

    monkeypatch.setattr("adapterfusion.pruning.time_fusions", fails)
    with pytest.raises(RuntimeError, match="interrupted"):
        compare_pruned(model, "f", RTE, _batches(), keep=1)
    assert model.fusion_names == ["f"]


def test_a_failed_comparison_puts_back_the_fusion_overwrite_replaced(monkeypatch):
    """With overwrite=True the earlier f_pruned was replaced before the scoring; a failure there left the new subset
    in its place, and the earlier fusion was lost."""
    model = _fused_model()
    compare_pruned(model, "f", RTE, _batches(), keep=1, repeats=1)
    earlier = model.fusion_setup("f_pruned").adapters
    before = {k: v.clone() for k, v in model.export_piece("fusion", "f_pruned").tensors.items()}
    monkeypatch.setattr("adapterfusion.pruning.time_fusions", lambda *args, **kwargs: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        compare_pruned(model, "f", RTE, _batches(), keep=2, overwrite=True)
    after = model.export_piece("fusion", "f_pruned").tensors
    assert model.fusion_setup("f_pruned").adapters == earlier and all(after[k].equal(v) for k, v in before.items())


def test_criteria_and_batches_in_other_forms_are_taken():
    """numpy numbers were refused as 'not a positive integer' / 'not in (0, 1]', a generator of batches was used up
    by the activation pass (then 'no batches to evaluate'), and a fusions string was timed letter by letter."""
    assert select_adapters(SHARES, keep=np.int64(2)) == select_adapters(SHARES, keep=2)
    assert select_adapters(SHARES, mass=np.float32(0.75)) == select_adapters(SHARES, mass=0.75)
    model = _fused_model()
    result = compare_pruned(model, "f", RTE, (batch for batch in _batches()), keep=np.int64(2), repeats=1)
    assert result.criterion == "keep=2" and result.examples == 5
    with pytest.raises(af.NameNotFoundError, match="no fusion named 'ff'"):
        time_fusions(model, "ff", _batches(), head="h", repeats=1)
    with pytest.raises(af.ConfigError, match="time_fusions takes an iterable of batches"):
        time_fusions(model, ["f"], _batches()[0], head="h", repeats=1)


def test_an_unused_fusion_has_nothing_to_rank():
    """All-zero activations (a ScaLearn fusion whose scales are 0) kept the first adapter, then kept_share divided
    by zero."""
    with pytest.raises(af.ConfigError, match="every adapter's activation is 0"):
        select_adapters({"a": 0.0, "b": 0.0}, mass=0.5)


def test_small_scalearn_scales_are_ranked_by_their_shares():
    """Tiny activations (a ScaLearn fusion's scales near 0) all rounded to 0 at TIE_DECIMALS and tied, and reached
    any mass within the absolute 1e-9: the adapter listed first was kept, the least used one among them."""
    assert select_adapters({"a": 1e-8, "b": 5e-8, "c": 4e-8}, keep=1) == ("b",)
    assert select_adapters({"a": 1e-10, "b": 2e-10}, mass=0.6) == ("b",)
    assert select_adapters({"a": 1e-10, "b": 2e-10}, mass=0.9) == ("a", "b")


def test_both_fusions_are_scored_with_the_models_skip_layers():
    """activate(fusion=...) without skip_layers ran every layer: with AdapterDrop's skip_layers set, 'before' was not
    the model's own score, while the ranking measured the activation with the layers skipped."""
    model = _fused_model()
    with torch.no_grad():
        for parameter in model.fusion_parameters("f"):
            parameter.add_(torch.randn_like(parameter))
    model.activate(fusion="f", head="h", skip_layers=[0])
    own = predict(model, _batches()).loss
    result = compare_pruned(model, "f", RTE, _batches(), keep=2, repeats=1)
    assert_close(result.before.metrics["loss"], own, dtype=torch.float64)
    assert model.skip_layers == (0,) and model.active_fusion == "f"
