"""Initialisation scale (Houlsby §3.6, Fig. 6 right): st-a's init_std option reaches the adapter's weights, an
experiment sweeps it, and the init-scale analysis tabulates and plots dev score against the std."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import adapterfusion as af
from adapterfusion.experiments import ExperimentSpec, ExperimentSpecError
from adapterfusion.experiments.analysis_figures import plot_init_scale, write_analysis_figures
from adapterfusion.experiments.analysis_report import AnalysisResults, analysis_tables, init_scale_table
from adapterfusion.tasks.registry import get_task
from adapterfusion.training.errors import TrainingError
from adapterfusion.training.setups import SetupContext, get_setup
from tiny_experiments import report_with
from tiny_models import tiny_encoder

STDS = [1.0e-7, 1.0e-4, 1.0e-2, 1.0]


def _prepare(setup: str, **options) -> af.AdaptedModel:
    model = af.wrap(tiny_encoder())
    recipe = get_setup(setup)
    context = SetupContext(get_task("rte"), recipe.resolve_options({"pooling": "cls", **options}), 1, "tiny")
    recipe.prepare(model, context)
    return model


@pytest.mark.parametrize("setup", ["st-a", "st-a-houlsby"])
def test_init_std_sets_the_spread_of_the_adapter_weights(setup):
    for std in (1e-3, 0.5):
        model = _prepare(setup, init_std=std)
        assert model.adapter_configs["rte"].init_std == std
        weights = torch.cat([site.adapters["rte"].down.weight.flatten() for site in model.sites_with_adapter("rte")])
        assert weights.abs().max() <= 2 * std  # a normal truncated at two std
        # the std of a normal truncated at +-2 sigma is 0.880 sigma
        assert weights.std().item() == pytest.approx(0.880 * std, rel=0.1)
    assert _prepare(setup).adapter_configs["rte"].init_std == af.AdapterConfig().init_std  # default: 1e-2


@pytest.mark.parametrize("bad", [0, -1e-3, True, "1e-3", float("inf")])
def test_a_bad_init_std_is_refused(bad):
    with pytest.raises(TrainingError, match="init_std"):
        _prepare("st-a", init_std=bad)


@pytest.mark.parametrize("setup", ["st-a", "st-a-houlsby"])
def test_init_zero_up_starts_every_adapter_as_the_identity(setup):
    model = _prepare(setup, init="zero_up")
    assert model.adapter_configs["rte"].init == "zero_up"
    sites = model.sites_with_adapter("rte")
    assert sites and all(not site.adapters["rte"].up.weight.any() for site in sites)
    assert all(site.adapters["rte"].down.weight.any() for site in sites)  # only the up-projection starts at zero
    assert _prepare(setup).adapter_configs["rte"].init == af.AdapterConfig().init


@pytest.mark.parametrize("bad", ["zero", "", 1, None.__class__])
def test_a_bad_init_is_refused_naming_the_choices(bad):
    with pytest.raises(TrainingError, match=r"init=.* must be one of \['houlsby', 'bert', 'zero_up'\]"):
        _prepare("st-a", init=bad)


def test_an_experiment_file_refuses_a_bad_init_when_it_is_read(tmp_path):
    entry = {"name": "st-a", "init": "zeros"}
    with pytest.raises((ExperimentSpecError, TrainingError), match="must be one of"):
        ExperimentSpec.from_dict({"name": "i", "tasks": ["sst2"], "output_dir": str(tmp_path), "setups": [entry]})
    spec = ExperimentSpec.from_dict(
        {"name": "i", "tasks": ["sst2"], "output_dir": str(tmp_path), "setups": [{"name": "st-a", "init": "zero_up"}]}
    )
    assert spec.variants[0].options["init"] == "zero_up"


def _spec(tmp_path: Path, sweep: dict, analyses: list) -> ExperimentSpec:
    return ExperimentSpec.from_dict(
        {
            "name": "init",
            "tasks": ["sst2"],
            "output_dir": str(tmp_path),
            "setups": [{"name": "st-a", "id": "st-a-init", "sweep": sweep}],
            "analyses": analyses,
        }
    )


def test_an_init_std_sweep_is_one_variant_per_std(tmp_path):
    spec = _spec(tmp_path, {"init_std": STDS}, [{"kind": "init-scale", "sweep": "st-a-init"}])
    assert [v.id for v in spec.variants] == [
        "st-a-init-init_std1e-7",
        "st-a-init-init_std1e-4",
        "st-a-init-init_std1e-2",
        "st-a-init-init_std1",
    ]
    assert [v.options["init_std"] for v in spec.variants] == STDS


@pytest.mark.parametrize(
    ("sweep", "analysis", "message"),
    [
        ({"learning_rate": [1e-3, 1e-4]}, {"sweep": "st-a-init"}, "must sweep init_std"),
        ({"init_std": [1e-3]}, {"sweep": "st-a-init"}, "two or more values"),
        ({"init_std": [0.0, 1e-3]}, {"sweep": "st-a-init"}, "positive number"),
        ({"init_std": STDS}, {"sweep": "st-a"}, "no sweep called 'st-a'"),
        ({"init_std": STDS}, {"sweep": "st-a-init", "lines": ["full"]}, "unknown key"),
    ],
)
def test_bad_init_scale_analyses_are_refused(tmp_path, sweep, analysis, message):
    with pytest.raises(ExperimentSpecError, match=message):
        _spec(tmp_path, sweep, [{"kind": "init-scale", **analysis}])


def test_init_scale_table_and_figure(tmp_path):
    variants = [  # listed out of order: the table sorts by the std
        {"id": f"v{k}", "setup": "st-a", "sweep": {"group": "g", "settings": {"init_std": std}}}
        for k, std in zip((3, 1, 2), (1.0, 1e-6, 1e-2), strict=True)
    ]
    scores = {"v1": {"sst2": [(1, 80.0), (2, 82.0)]}, "v2": {"sst2": [(1, 79.0)]}, "v3": {"sst2": [(1, 50.0)]}}
    report = report_with([*variants, {"id": "head", "setup": "head"}], scores)
    table = init_scale_table(report, {"kind": "init-scale", "sweep": "g"})
    assert table is not None and table.id == "init_scale"
    assert table.rows == ("init std 1e-6", "init std 1e-2", "init std 1")
    assert table.columns == ("sst2",)  # rte has no result
    assert table.cell("init std 1e-6", "sst2").value == pytest.approx(81.0)
    assert table.cell("init std 1e-6", "sst2").std == pytest.approx(2**0.5)
    assert table.cell("init std 1", "sst2").value == 50.0
    assert plot_init_scale(report, {"sweep": "g"}, tmp_path / "init_scale.png").stat().st_size > 1000
    empty = report_with(variants, {})
    assert init_scale_table(empty, {"sweep": "g"}) is None
    assert plot_init_scale(empty, {"sweep": "g"}, tmp_path / "none.png") is None


def test_init_std_swept_with_another_setting_is_refused(tmp_path):
    """One dev score per std: a sweep that also varies the learning rate has two variants per std, and the table
    kept only the last of them."""
    with pytest.raises(ExperimentSpecError, match="4 variants for 2 values of init_std .it also sweeps learning_rate"):
        _spec(
            tmp_path,
            {"init_std": [1e-3, 1e-2], "learning_rate": [1e-3, 1e-4]},
            [{"kind": "init-scale", "sweep": "st-a-init"}],
        )


def test_two_init_scale_analyses_write_a_table_and_a_figure_each(tmp_path):
    """Each file is named after its sweep when there are two: both wrote init_scale.png and init_scale.csv before."""
    variants = [
        {"id": f"{group}{k}", "setup": "st-a", "sweep": {"group": group, "settings": {"init_std": std}}}
        for group in ("g", "h")
        for k, std in enumerate((1e-3, 1e-2))
    ]
    report = report_with(variants, {v["id"]: {"sst2": [(1, 70.0 + k)]} for k, v in enumerate(variants)})
    analyses = [{"kind": "init-scale", "sweep": "g"}, {"kind": "init-scale", "sweep": "h"}]
    results = AnalysisResults(analyses=analyses)
    assert [t.id for t in analysis_tables(report, results)] == ["init_scale_g", "init_scale_h"]
    assert [p.name for p in write_analysis_figures(report, results, tmp_path)] == [
        "init_scale_g.png",
        "init_scale_h.png",
    ]
    one = AnalysisResults(analyses=analyses[:1])
    assert [t.id for t in analysis_tables(report, one)] == ["init_scale"]  # one of its kind: the name it always had
    with pytest.raises(ExperimentSpecError, match="two init-scale entries read the same sweep"):
        _spec(tmp_path, {"init_std": STDS}, [{"kind": "init-scale", "sweep": "st-a-init"}] * 2)
