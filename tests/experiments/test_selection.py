"""Selection on dev (issue #27), from a fake experiment output dir filled through the ResultsStore's API: per task and
seed the best dev score of a `select` rule's variants, ties to the first listed, undefined (NaN) scores never chosen,
MNLI's mismatched row following the matched choice; the Houlsby-shaped table and the chosen settings, checked against
a plain re-computation here; the "undefined" cells of Table 1."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest

from adapterfusion.experiments import ExperimentSpec, ResultsStore, plan_jobs
from adapterfusion.experiments.report import UNDEFINED, build_report
from adapterfusion.experiments.report_files import write_report
from adapterfusion.experiments.selection import PARAMETERS_COLUMN, select, selection_tables

TASKS = ["rte", "stsb", "mnli"]
SEEDS = [1, 2]
METRIC = {"rte": "accuracy", "stsb": "spearman", "mnli": "accuracy"}
ENCODER = 1_000_000
SELECT = {
    "Full fine-tuning": "full",
    "Adapters (2-16)": "st-a-houlsby",
    "Adapters (16)": {"sweep": "st-a-houlsby", "reduction_factor": 16},
}
SETUPS = [
    {"name": "full", "sweep": {"learning_rate": [2.0e-5, 5.0e-5]}},
    {"name": "st-a-houlsby", "sweep": {"reduction_factor": [16, 2], "learning_rate": [1.0e-3, 1.0e-4]}},
]
ADAPTERS = [
    "st-a-houlsby-rf16-lr1e-3",
    "st-a-houlsby-rf16-lr1e-4",
    "st-a-houlsby-rf2-lr1e-3",
    "st-a-houlsby-rf2-lr1e-4",
]


def _score(variant: str, task: str, seed: int) -> float:
    """A made-up dev score (a fraction) per run, with a tie, undefined scores and a clear winner per case."""
    special = {
        # rte seed 1: two adapter variants tie at the top; the first listed wins
        ("st-a-houlsby-rf16-lr1e-4", "rte", 1): 0.80,
        ("st-a-houlsby-rf2-lr1e-3", "rte", 1): 0.80,
        # stsb seed 2: the best-looking adapter run is undefined (a constant prediction), so it must not win
        ("st-a-houlsby-rf2-lr1e-4", "stsb", 2): math.nan,
        ("st-a-houlsby-rf2-lr1e-4", "stsb", 1): math.nan,
        # stsb seed 1: both full fine-tuning runs undefined
        ("full-lr2e-5", "stsb", 1): math.nan,
        ("full-lr5e-5", "stsb", 1): math.nan,
    }
    if (variant, task, seed) in special:
        return special[(variant, task, seed)]
    base = {"rte": 0.6, "stsb": 0.5, "mnli": 0.7}[task]
    order = ["full-lr2e-5", "full-lr5e-5", *ADAPTERS]
    return base + 0.01 * ((order.index(variant) * 7 + seed * 3 + TASKS.index(task)) % 9)


def _trainable(variant: str) -> int:
    if variant.startswith("full"):
        return ENCODER + 1_000
    return 40_000 if "rf16" in variant else 300_000


def _fake(out: Path, select=SELECT) -> Path:
    spec = ExperimentSpec.from_dict(
        {"name": "fake", "tasks": TASKS, "seeds": SEEDS, "output_dir": str(out), "setups": SETUPS, "select": select}
    )
    jobs = plan_jobs(spec)
    with ResultsStore(out) as store:
        store.bind(spec, jobs)
        for job in jobs:
            store.mark_running(job.id, str(job.run_dir(out)))
            metric = METRIC[job.task]
            metrics = {
                "metric_for_best": metric,
                "best": {metric: _score(job.variant, job.task, job.seed)},
                "parameters": {"trainable": _trainable(job.variant), "encoder": ENCODER, "total": ENCODER + 1},
            }
            if job.task == "mnli":  # the mismatched dev set: scored, never selecting
                mm = 0.5 + 0.001 * ADAPTERS.index(job.variant) if job.variant in ADAPTERS else 0.4
                metrics["extra_dev"] = {"validation_mismatched": {"accuracy": mm + 0.0001 * job.seed}}
            store.mark_done(job.id, metrics)
    return out


def _expected_choice(variants: list[str], task: str, seed: int) -> str:
    """The plain rule: the highest defined score, the first listed among equals."""
    best = None
    for variant in variants:
        score = _score(variant, task, seed)
        if not math.isnan(score) and (best is None or score > _score(best, task, seed)):
            best = variant
    return best if best is not None else variants[0]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = _fake(tmp_path_factory.mktemp("fake"))
    return out, write_report(out, figures=False)


def test_each_rule_picks_the_best_dev_score_per_task_and_seed(report):
    _, built = report
    rules = built.select
    groups = {
        "Full fine-tuning": ["full-lr2e-5", "full-lr5e-5"],
        "Adapters (2-16)": ADAPTERS,
        "Adapters (16)": ADAPTERS[:2],
    }
    for name, variants in groups.items():
        picks = select(built, rules[name])
        for task in TASKS:
            assert [c.seed for c in picks[task]] == SEEDS
            for choice in picks[task]:
                assert choice.variant == _expected_choice(variants, task, choice.seed), (name, task)
    adapters = select(built, rules["Adapters (2-16)"])
    assert adapters["rte"][0].variant == "st-a-houlsby-rf16-lr1e-4"  # the tie goes to the first listed
    assert adapters["stsb"][1].variant != "st-a-houlsby-rf2-lr1e-4"  # the undefined score never wins
    full = select(built, rules["Full fine-tuning"])
    assert math.isnan(full["stsb"][0].score)  # nothing defined to choose from: the row says so


def test_mismatched_row_reports_the_variant_matched_chose(report):
    _, built = report
    assert built.tasks == ("rte", "stsb", "mnli", "mnli mismatched")
    picks = select(built, built.select["Adapters (2-16)"])
    for matched, mismatched in zip(picks["mnli"], picks["mnli mismatched"], strict=True):
        assert mismatched.variant == matched.variant and mismatched.seed == matched.seed
        expected = 0.5 + 0.001 * ADAPTERS.index(matched.variant) + 0.0001 * matched.seed
        assert mismatched.score == pytest.approx(100 * expected)


def test_houlsby_table_against_a_plain_recomputation(report):
    out, built = report
    table = built.table("houlsby_table1")
    assert table.rows == tuple(SELECT) and table.row_header == "method"
    assert table.columns == ("rte", "stsb", "mnli", "mnli mismatched", "mean", PARAMETERS_COLUMN)
    picks = select(built, built.select["Adapters (2-16)"])
    cell = table.cell("Adapters (2-16)", "rte")
    values = [c.score for c in picks["rte"]]
    assert cell.value == pytest.approx(statistics.mean(values)) and cell.std == pytest.approx(statistics.stdev(values))
    assert cell.text == f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"
    means = [statistics.mean(c.score for c in picks[row] if not math.isnan(c.score)) for row in built.tasks]
    assert table.cell("Adapters (2-16)", "mean").value == pytest.approx(statistics.mean(means))
    shares = [100 * _trainable(c.variant) / ENCODER for task in TASKS for c in picks[task]]
    share = table.cell("Adapters (2-16)", PARAMETERS_COLUMN)
    assert share.value == pytest.approx(statistics.mean(shares)) and share.text.endswith("%")
    assert table.cell("Adapters (16)", PARAMETERS_COLUMN).text == "4.00%"
    assert table.cell("Full fine-tuning", PARAMETERS_COLUMN).text == "100.10%"  # encoder + head
    full_stsb = table.cell("Full fine-tuning", "stsb")  # seed 1 undefined, seed 2 defined
    assert full_stsb.n == 1 and full_stsb.text.endswith(f"(1 {UNDEFINED})")
    markdown = (out / "report" / "tables.md").read_text()
    assert "### Houlsby Table 1: dev results of the variants selected on dev" in markdown
    assert "| method | rte | stsb | mnli | mnli mismatched | mean | params / task (%) |" in markdown
    saved = json.loads((out / "report" / "tables.json").read_text())
    assert [t["id"] for t in saved["tables"]][-2:] == ["houlsby_table1", "selected_settings"]
    assert (out / "report" / "houlsby_table1.csv").read_text().startswith("row,column,value,std,n,text\n")


def test_chosen_settings_table(report):
    _, built = report
    table = built.table("selected_settings")
    assert table.rows == ("rte", "stsb", "mnli") and table.columns == tuple(SELECT)
    assert table.cell("rte", "Adapters (2-16)").text.startswith("seed 1: rf16 lr1e-4; seed 2: ")
    picks = select(built, built.select["Full fine-tuning"])
    lr = picks["mnli"][0].variant.removeprefix("full-")
    assert table.cell("mnli", "Full fine-tuning").text.startswith(f"seed 1: {lr}")


def test_table1_shows_undefined_scores_explicitly(tmp_path):
    built = build_report(_fake(tmp_path / "out"))
    table1 = built.table("table1")
    both = table1.cell("stsb", "st-a-houlsby-rf2-lr1e-4")  # both seeds undefined: no number at all
    assert both.text == UNDEFINED and both.value is None
    one = table1.cell("stsb", "full-lr2e-5")  # seed 1 undefined, seed 2 defined
    assert one.text == f"{100 * _score('full-lr2e-5', 'stsb', 2):.2f} (1 {UNDEFINED})" and one.n == 1
    assert "(3/4 tasks)" in table1.cell("mean", "st-a-houlsby-rf2-lr1e-4").text  # the undefined task left out


def test_no_select_no_selection_tables(tmp_path):
    built = build_report(_fake(tmp_path / "out", select=None))
    assert selection_tables(built) == [] and built.table("houlsby_table1") is None
    custom = selection_tables(built, {"Adapters": {"sweep": "st-a-houlsby", "learning_rate": 1e-3}})
    assert custom[0].rows == ("Adapters",)
