"""A lower-is-better dev metric (a generation task's answer_loss; tasks/spec.py's LOWER_IS_BETTER, the set training's
checkpoint choice uses) in the report: selected by its minimum, shown as recorded (not ×100) and labelled so, kept out
of the mean rows, and compared in Table 2 with the sign flipped. A fake output dir filled through the ResultsStore."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapterfusion.experiments import ExperimentSpec, ResultsStore, plan_jobs
from adapterfusion.experiments.figures import write_figures
from adapterfusion.experiments.report import build_report
from adapterfusion.experiments.selection import MEAN_COLUMN, select, selection_tables

# sst2 stands in for a generation task: the report only reads each run's metric_for_best and its value.
METRIC = {"rte": "accuracy", "sst2": "answer_loss"}
SWEEP_SCORES = {
    ("st-a-rf16-lr1e-5", "rte"): 0.60,
    ("st-a-rf16-lr3e-2", "rte"): 0.70,
    ("st-a-rf16-lr1e-5", "sst2"): 10.7457,  # the higher loss: worse
    ("st-a-rf16-lr3e-2", "sst2"): 10.5706,
}
FUSION_SCORES = {
    ("st-a-rf16", "rte"): 0.60,
    ("fusion-st-a", "rte"): 0.65,
    ("st-a-rf16", "sst2"): 2.0,
    ("fusion-st-a", "sst2"): 2.5,
}


def _fake(out: Path, setups: list, scores: dict, select_rules: dict | None = None, metric: dict = METRIC) -> Path:
    spec = ExperimentSpec.from_dict(
        {"name": "fake", "tasks": list(METRIC), "seeds": [1], "output_dir": str(out), "setups": setups}
        | ({"select": select_rules} if select_rules else {})
    )
    jobs = plan_jobs(spec)
    with ResultsStore(out) as store:
        store.bind(spec, jobs)
        for job in jobs:
            store.mark_running(job.id, str(job.run_dir(out)))
            name = metric[job.task]
            store.mark_done(job.id, {"metric_for_best": name, "best": {name: scores[(job.variant, job.task)]}})
    return out


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    setups = [{"name": "st-a", "sweep": {"learning_rate": [1.0e-5, 3.0e-2]}}]
    return build_report(_fake(tmp_path_factory.mktemp("swept"), setups, SWEEP_SCORES, {"Adapters": "st-a"}))


@pytest.fixture(scope="module")
def fused(tmp_path_factory):
    return build_report(_fake(tmp_path_factory.mktemp("fused"), ["st-a", "fusion-st-a"], FUSION_SCORES))


def test_selection_takes_the_least_loss_and_the_highest_accuracy(swept):
    chosen = select(swept, swept.select["Adapters"])
    assert [(c.variant, c.score) for c in chosen["sst2"]] == [("st-a-rf16-lr3e-2", 10.5706)]
    assert [(c.variant, c.score) for c in chosen["rte"]] == [("st-a-rf16-lr3e-2", 70.0)]
    houlsby, settings = selection_tables(swept)
    assert settings.cell("sst2", "Adapters").text == "seed 1: lr3e-2"


def test_a_loss_is_shown_as_recorded_and_labelled_lower_is_better(swept):
    table1 = swept.table("table1")
    assert table1 is not None
    assert table1.cell("sst2", "st-a-rf16-lr1e-5").text == "10.75"
    assert table1.cell("rte", "st-a-rf16-lr1e-5").text == "60.00"
    notes = " ".join(table1.notes)
    assert "Dev-set accuracy in percent" in notes and "answer_loss in percent" not in notes
    assert "sst2: dev answer_loss as recorded, not in percent; lower is better" in notes


def test_mean_rows_leave_the_loss_out(swept):
    table1 = swept.table("table1")
    assert table1 is not None
    assert table1.cell("mean", "st-a-rf16-lr1e-5").text == "60.00"  # rte alone, not (60 + 10.75) / 2
    houlsby, _ = selection_tables(swept)
    assert houlsby.cell("Adapters", "sst2").text == "10.57"
    assert houlsby.cell("Adapters", MEAN_COLUMN).text == "70.00"
    assert any("Left out of the means" in note for note in houlsby.notes)


def test_a_higher_loss_is_no_improvement(fused):
    table2 = fused.table("table2")
    assert table2 is not None
    column = "fusion-st-a vs st-a-rf16"
    assert table2.cell("sst2", column).text == "+0.50 ↘"  # the loss rose: worse
    assert table2.cell("rte", column).text == "+5.00 ↗"
    assert table2.cell("Improved", column).text == "1/2"
    assert any("↗ marks a decrease" in note for note in table2.notes)


def test_a_lower_loss_is_an_improvement(tmp_path):
    scores = {**FUSION_SCORES, ("fusion-st-a", "sst2"): 1.5}
    table2 = build_report(_fake(tmp_path / "out", ["st-a", "fusion-st-a"], scores)).table("table2")
    assert table2 is not None
    assert table2.cell("sst2", "fusion-st-a vs st-a-rf16").text == "-0.50 ↗"
    assert table2.cell("Improved", "fusion-st-a vs st-a-rf16").text == "2/2"


def test_accuracy_only_reports_keep_their_notes(tmp_path):
    scores = {key: value / 10 for key, value in FUSION_SCORES.items()}
    accuracy = dict.fromkeys(METRIC, "accuracy")
    report = build_report(_fake(tmp_path / "out", ["st-a", "fusion-st-a"], scores, metric=accuracy))
    table1, table2 = report.table("table1"), report.table("table2")
    assert table1 is not None and table2 is not None
    assert table1.notes[0].startswith("Dev-set accuracy in percent: mean ± sample standard deviation")
    assert len(table1.notes) == 1 and len(table2.notes) == 1
    assert table1.cell("mean", "st-a-rf16").text == "13.00"


def test_figure_notes_say_a_loss_is_why_a_finished_full_run_drew_nothing(tmp_path):
    """Tasks all scored by a loss (generation tasks): Figure 3 and the trade-off plot percent and draw nothing, and
    their notes asked for `full` runs that had finished, and for results on a common task that the setups had."""
    scores = {(variant, task): 2.0 for variant in ("st-a-rf16", "full") for task in METRIC}
    losses = dict.fromkeys(METRIC, "answer_loss")
    report = build_report(_fake(tmp_path / "out", ["st-a", "full"], scores, metric=losses))
    for variant in ("st-a-rf16", "full"):
        report.parameters[variant] = [1000 if variant == "full" else 10]
    assert write_figures(report, tmp_path / "figures") == []
    delta, tradeoff = report.figure_notes
    assert "every task `full` finished is scored by a loss" in delta and "needs finished" not in delta
    assert "every task its setups share is scored by a loss" in tradeoff and "common task" not in tradeoff
    accuracy = build_report(_fake(tmp_path / "acc", ["st-a"], scores, metric=dict.fromkeys(METRIC, "accuracy")))
    write_figures(accuracy, tmp_path / "acc-figures")
    assert accuracy.figure_notes[0] == "Figure 3 (delta vs Full) needs finished `full` runs."
