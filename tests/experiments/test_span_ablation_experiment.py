"""Span ablation as part of an experiment file: the `analyses` entry is validated, plans one job per trained adapter
after the job that trains it (or per zoo adapter), leaves the spec hash and the training jobs' hashes as they were,
and the report turns the jobs' results into the triangular table and heatmap; one end-to-end run on the tiny BERT."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from adapterfusion.cli import main
from adapterfusion.experiments import ExperimentSpec, ExperimentSpecError, plan_jobs, run_experiment
from adapterfusion.experiments.analysis_figures import drop_grid, plot_span_ablation
from adapterfusion.experiments.analysis_report import AnalysisResults, ablation_table, write_ablation_records
from adapterfusion.experiments.plan import config_hashes
from adapterfusion.experiments.span_ablation import SpanAblation
from adapterfusion.training.run_files import METRICS_FILE, read_json
from tiny_experiments import FAST, SLICE


def _spec(tmp_path: Path, analyses=None, **changes) -> dict:
    data = {
        "name": "ablate",
        "tasks": ["rte", "mrpc"],
        "seeds": [1, 2],
        "output_dir": str(tmp_path / "out"),
        "setups": ["head", "st-a"],
        **changes,
    }
    if analyses is not None:
        data["analyses"] = analyses
    return data


def test_ablation_jobs_follow_the_jobs_that_trained_their_adapters(tmp_path):
    plain = ExperimentSpec.from_dict(_spec(tmp_path))
    spec = ExperimentSpec.from_dict(
        _spec(tmp_path, [{"kind": "span-ablation", "variant": "st-a-rf16", "tasks": ["rte"], "max_examples": 50}])
    )
    assert spec.spec_hash() == plain.spec_hash()  # analyses change no training result
    jobs = {job.id: job for job in plan_jobs(spec)}
    trained = {job.id: job for job in plan_jobs(plain)}
    assert set(jobs) - set(trained) == {"span-ablation-st-a-rf16/rte/seed-1", "span-ablation-st-a-rf16/rte/seed-2"}
    hashes, before = config_hashes(spec, list(jobs.values())), config_hashes(plain, list(trained.values()))
    assert all(hashes[job] == before[job] for job in trained)  # training jobs keep their hashes
    ablation = jobs["span-ablation-st-a-rf16/rte/seed-2"]
    assert ablation.depends_on == ("st-a-rf16/rte/seed-2",) and ablation.kind == "span-ablation"
    assert ablation.options["source_run"] == jobs["st-a-rf16/rte/seed-2"].run_dir(Path()).as_posix()
    assert ablation.options["max_examples"] == 50
    order = list(jobs)
    assert order.index(ablation.id) > order.index("st-a-rf16/rte/seed-2")


def test_zoo_ablation_is_one_job_per_task_under_the_zoo_seed(tmp_path):
    spec = ExperimentSpec.from_dict(
        _spec(tmp_path, [{"kind": "span-ablation", "zoo": "shipped"}], max_examples={"validation": 30})
    )
    jobs = [job for job in plan_jobs(spec) if job.kind == "span-ablation"]
    assert [job.id for job in jobs] == ["span-ablation-zoo/rte/seed-1", "span-ablation-zoo/mrpc/seed-1"]
    assert all(job.depends_on == () and job.options == {"zoo": "shipped", "max_examples": 30} for job in jobs)


def test_plan_counts_the_ablation_jobs(tmp_path, capsys):
    path = tmp_path / "x.yaml"
    path.write_text(yaml.safe_dump(_spec(tmp_path, [{"kind": "span-ablation", "variant": "st-a-rf16"}])))
    assert main(["plan", str(path)]) == 0
    out = capsys.readouterr().out
    assert "span-ablation-st-a-rf16  4" in out
    assert "12 jobs: 2 tasks, 2 setup variants, 2 seeds; 4 of them span-ablation evaluations" in out


@pytest.mark.parametrize(
    ("analyses", "message"),
    [
        ([{"kind": "ablate"}], "needs a 'kind'"),
        ([{"kind": "span-ablation"}], "either 'variant'"),
        ([{"kind": "span-ablation", "variant": "st-a-rf16", "zoo": "shipped"}], "either 'variant'"),
        ([{"kind": "span-ablation", "variant": "head"}], "not a single-task adapter variant"),
        ([{"kind": "span-ablation", "variant": "st-a-rf16", "tasks": ["cb"]}], "not one of the experiment's tasks"),
        ([{"kind": "span-ablation", "variant": "st-a-rf16", "max_examples": 0}], "integer >= 1"),
        ([{"kind": "span-ablation", "zoo": "no/such/folder"}], "is not a folder"),
        ([{"kind": "span-ablation", "variant": "st-a-rf16", "layers": [1]}], "unknown key"),
        ([{"kind": "span-ablation", "zoo": "shipped"}] * 2, "the same adapters"),
        ("span-ablation", "non-empty list"),
    ],
)
def test_bad_analyses_are_refused_naming_the_key(tmp_path, analyses, message):
    with pytest.raises(ExperimentSpecError, match=message):
        ExperimentSpec.from_dict(_spec(tmp_path, analyses))


def test_zoo_without_the_task_is_refused_when_planned(tmp_path):
    spec = ExperimentSpec.from_dict(_spec(tmp_path, [{"kind": "span-ablation", "zoo": "shipped"}], tasks=["cola"]))
    with pytest.raises(ExperimentSpecError, match="cola"):
        plan_jobs(spec)


def _result(drops: dict[tuple[int, int], float], baseline: float = 0.8) -> SpanAblation:
    return SpanAblation(
        task="rte",
        metric="accuracy",
        num_layers=3,
        examples=100,
        baseline={"accuracy": baseline},
        spans={span: {"accuracy": baseline + d / 100} for span, d in drops.items()},
    )


DROPS = {(0, 0): -1.0, (0, 1): -3.0, (0, 2): -30.0, (1, 1): 0.0, (1, 2): -5.0, (2, 2): -2.0}


def test_ablation_table_and_heatmap_hold_the_mean_drop_of_each_span(tmp_path):
    seeds = [_result(DROPS), _result({s: 2 * d for s, d in DROPS.items()}, baseline=0.6)]
    table = ablation_table("span-ablation-zoo", "rte", seeds)
    assert table.id == "span-ablation-zoo_rte"
    assert table.cell("first 0", "last 2").value == pytest.approx(-45.0)  # mean of -30 and -60
    assert table.cell("first 1", "last 1").text == "+0.0"
    assert table.cell("first 2", "last 0").value is None  # no such span
    assert "70.00" in table.notes[0]  # the mean baseline, 80 and 60
    assert "from +0.0 to -3.0" in table.notes[1]  # single layers: -1.5, 0, -3
    grid = drop_grid(seeds)
    assert grid[1, 2] == pytest.approx(-7.5) and grid[2, 1] != grid[2, 1]  # NaN below the diagonal
    path = plot_span_ablation(seeds, "rte", tmp_path / "span_ablation_rte.png")
    assert path.stat().st_size > 1000


def test_the_report_keeps_every_span_record(tmp_path):
    results = AnalysisResults(
        ablations={
            "span-ablation-zoo": {
                "rte": [(2, _result(DROPS, 0.6)), (1, _result(DROPS))],
                "mrpc": [(1, _result({s: 0.0 for s in DROPS}))],
            }
        }
    )
    zoo_entry = tmp_path / "zoo" / "store" / "enc--model" / "rte" / "st-a" / "seed-1"
    results.ablations["span-ablation-zoo"]["rte"][0][1].source = {"zoo": "shipped", "entry": str(zoo_entry)}
    results.ablations["span-ablation-zoo"]["mrpc"][0][1].source = {"run_dir": str(tmp_path / "runs" / "a" / "seed-1")}
    assert write_ablation_records(AnalysisResults(), tmp_path / "report") is None
    saved = read_json(write_ablation_records(results, tmp_path / "report"), "test")
    # paths as a clone writes them: a zoo entry inside its store, a run relative to the output dir
    assert saved["span-ablation-zoo"]["rte"][1]["source"]["entry"] == "enc--model/rte/st-a/seed-1"
    assert saved["span-ablation-zoo"]["mrpc"][0]["source"]["run_dir"] == "runs/a/seed-1"
    assert list(saved) == ["span-ablation-zoo"] and sorted(saved["span-ablation-zoo"]) == ["mrpc", "rte"]
    rte = saved["span-ablation-zoo"]["rte"]
    assert [r["seed"] for r in rte] == [1, 2]
    again = SpanAblation.from_dict(rte[1])
    assert again.baseline == {"accuracy": 0.6} and again.drop(0, 2) == pytest.approx(-30.0)


@pytest.mark.slow
def test_span_ablation_runs_in_an_experiment_and_reports(tiny_encoder_dir, demo_data_dir, tmp_path):
    data = {
        "name": "tiny-ablation",
        "encoder": str(tiny_encoder_dir),
        "tasks": ["rte"],
        "seeds": [1],
        "setups": ["st-a"],
        "data_dir": str(demo_data_dir),
        "output_dir": str(tmp_path / "out"),
        "max_examples": SLICE,
        "training": FAST,
        "analyses": [{"kind": "span-ablation", "variant": "st-a-rf16"}],
    }
    summary = run_experiment(data, progress=False)
    assert summary.ok and summary.ran == ["st-a-rf16/rte/seed-1", "span-ablation-st-a-rf16/rte/seed-1"]
    out = tmp_path / "out"
    record = read_json(next((out / "runs" / "span-ablation-st-a-rf16").rglob(METRICS_FILE)), "test")
    result = SpanAblation.from_dict(record)
    trained = read_json(next((out / "runs" / "st-a-rf16").rglob(METRICS_FILE)), "test")
    # no layer ablated: the trained run's own dev score (same dev subset, same weights)
    assert result.baseline["accuracy"] == pytest.approx(trained["best"]["accuracy"])
    assert result.examples == SLICE["validation"] and len(result.spans) == 3  # 2 layers
    report = (out / "report" / "tables.md").read_text()
    assert "Span ablation (span-ablation-st-a-rf16, rte)" in report
    assert (out / "report" / "span_ablation_rte.png").is_file()
    assert (out / "report" / "span-ablation-st-a-rf16_rte.csv").is_file()
    saved = read_json(out / "report" / "span_ablation.json", "test")["span-ablation-st-a-rf16"]["rte"]
    assert SpanAblation.from_dict(saved[0]).spans == result.spans
    assert saved[0]["source"]["run_dir"] == "runs/st-a-rf16/rte/st-a/seed-1"
    again = run_experiment(data, progress=False)  # resumed: nothing left to run
    assert again.ran == [] and len(again.skipped) == 2
