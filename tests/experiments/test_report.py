"""The report, from a fake experiment output dir (a ResultsStore filled through its API with synthetic metrics of
head / full / st-a-rf16 / fusion-st-a on three tasks × three seeds): Table 1 against statistics.mean/stdev, Table 2's
arrows at the ±0.3 boundaries, CSV and JSON against the Markdown, the carve-out footnote, the PNGs and the CLI."""

from __future__ import annotations

import csv
import io
import json
import statistics
from pathlib import Path

import numpy as np
import pytest

from adapterfusion.cli import main
from adapterfusion.experiments import ExperimentSpec, ResultsStore, plan_jobs
from adapterfusion.experiments.report import CARVED_MARK, MISSING, build_report, trend_arrow
from adapterfusion.experiments.report_files import write_report
from adapterfusion.io.atomic import atomic_write_json

TASKS = ["rte", "cb", "mrpc"]
SEEDS = [1, 2, 3]
# accuracy per (variant, task): one value per seed. fusion − st-a means: rte +0.3 (→), cb +0.4 (↗), mrpc −0.31 (↘).
SCORES = {
    ("head", "rte"): [0.55, 0.57, 0.60],
    ("head", "cb"): [0.70, 0.71, 0.75],
    ("head", "mrpc"): [0.68, 0.69, 0.70],
    ("full", "rte"): [0.62, 0.65, 0.63],
    ("full", "cb"): [0.80, 0.84, 0.82],
    ("full", "mrpc"): [0.80, 0.81, 0.83],
    ("st-a-rf16", "rte"): [0.70, 0.72, 0.74],
    ("st-a-rf16", "cb"): [0.85, 0.86, 0.81],
    ("st-a-rf16", "mrpc"): [0.80, 0.82, 0.84],
    ("fusion-st-a", "rte"): [0.703, 0.723, 0.743],
    ("fusion-st-a", "cb"): [0.854, 0.864, 0.814],
    ("fusion-st-a", "mrpc"): [0.7969, 0.8169, 0.8369],
}
TRAINABLE = {"head": 770, "full": 22_000_000, "st-a-rf2": 800_000, "st-a-rf16": 100_000, "fusion-st-a": 300_000}
CARVED = {
    "source_split": "validation",
    "source_size": 277,
    "fraction": 0.5,
    "seed": 1,
    "train_size": 139,
    "validation_size": 138,
    "carved_roles": ["train", "validation"],
}


def _fake_experiment(
    out: Path, missing: tuple[str, ...] = (), reduction_factors=(16,), warned: tuple[str, ...] = ()
) -> Path:
    spec = ExperimentSpec.from_dict(
        {
            "name": "fake",
            "tasks": TASKS,
            "seeds": SEEDS,
            "output_dir": str(out),
            "setups": ["head", "full", {"name": "st-a", "reduction_factors": list(reduction_factors)}, "fusion-st-a"],
        }
    )
    jobs = plan_jobs(spec)
    with ResultsStore(out) as store:
        store.bind(spec, jobs)
        for job in jobs:
            if job.id in missing:
                continue
            run_dir = job.run_dir(out)
            run_dir.mkdir(parents=True)
            atomic_write_json(
                run_dir / "config.json",
                {"task": job.task, "data": {"carve_out": dict(CARVED, seed=job.seed) if job.task == "cb" else None}},
            )
            if job.variant == "fusion-st-a":
                rng = np.random.default_rng(job.seed + 10 * TASKS.index(job.task))
                values = rng.dirichlet(np.ones(3), size=2)
                atomic_write_json(
                    run_dir / "fusion_attention.json",
                    {
                        "format_version": 1,
                        "fusion": f"fusion_{job.task}",
                        "adapters": TASKS,
                        "layers": [0, 1],
                        "values": values.tolist(),
                        "tokens": 100,
                        "task": job.task,
                        "seed": job.seed,
                    },
                )
            store.mark_running(job.id, str(run_dir))
            accuracy = SCORES.get((job.variant, job.task), [0.5, 0.6, 0.7])[SEEDS.index(job.seed)]
            store.mark_done(
                job.id,
                {
                    "metric_for_best": "accuracy",
                    "best": {"accuracy": accuracy, "loss": 0.5},
                    "parameters": {"trainable": TRAINABLE[job.variant], "total": 22_100_000},
                    "warnings": [f"constant predictor in {job.id}"] if job.id in warned else [],
                },
            )
    return out


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = _fake_experiment(tmp_path_factory.mktemp("fake"))
    return out, write_report(out)


def test_table1_matches_an_independent_computation(written):
    _, report = written
    table = report.table("table1")
    assert table.columns == ("head", "full", "st-a-rf16", "fusion-st-a")
    assert table.rows == (*TASKS, "mean")
    for (variant, task), values in SCORES.items():
        cell = table.cell(task, variant)
        percent = [100 * v for v in values]
        assert cell.value == pytest.approx(statistics.mean(percent), abs=1e-9)
        assert cell.std == pytest.approx(statistics.stdev(percent), abs=1e-9)
        assert cell.n == 3
        assert cell.text == f"{statistics.mean(percent):.2f} ± {statistics.stdev(percent):.2f}"
    for variant in table.columns:
        expected = statistics.mean(statistics.mean(100 * v for v in SCORES[(variant, t)]) for t in TASKS)
        assert table.cell("mean", variant).value == pytest.approx(expected, abs=1e-9)
        assert "±" not in table.cell("mean", variant).text


def test_trend_arrows_at_the_boundaries():
    assert [trend_arrow(d) for d in (0.3, 0.30000000000000027, 0.3001, -0.3, -0.30000000000000027, -0.3001, 0.0)] == [
        "→",
        "→",
        "↗",
        "→",
        "→",
        "↘",
        "→",
    ]


def test_table2_arrows_and_improved_count(written):
    _, report = written
    table = report.table("table2")
    column = "fusion-st-a vs st-a-rf16"
    assert table.columns == (column,)
    texts = {task: table.cell(task, column).text for task in TASKS}
    assert texts == {"rte": "+0.30 →", "cb": "+0.40 ↗", "mrpc": "-0.31 ↘"}
    assert table.cell("Improved", column).text == "1/3"
    assert report.table("table3") is None  # one reduction factor only


def test_markdown_csv_and_json_agree(written):
    out, report = written
    directory = out / "report"
    markdown = (directory / "tables.md").read_text(encoding="utf-8")
    data = json.loads((directory / "tables.json").read_text(encoding="utf-8"))
    for table in report.tables:
        rows = list(csv.DictReader(io.StringIO((directory / f"{table.id}.csv").read_text(encoding="utf-8"))))
        assert len(rows) == len(table.rows) * len(table.columns)
        stored = next(t for t in data["tables"] if t["id"] == table.id)
        by_key = {(c["row"], c["column"]): c for c in stored["cells"]}
        for row in rows:
            cell = by_key[(row["row"], row["column"])]
            assert row["text"] == cell["text"]
            assert (float(row["value"]) if row["value"] else None) == cell["value"]
        for row in table.rows:  # each Markdown line holds the row's cells in column order
            label = row + table.row_marks.get(row, "")
            line = "| " + " | ".join([label, *(by_key[(row, c)]["text"] for c in table.columns)]) + " |"
            assert line in markdown


def test_carved_task_is_footnoted(written):
    out, report = written
    markdown = (out / "report" / "tables.md").read_text(encoding="utf-8")
    assert set(report.carved) == {"cb"}
    assert f"| cb{CARVED_MARK} |" in markdown and "| rte |" in markdown
    assert f"- {CARVED_MARK} cb: train and validation carved from its 'validation' split (277 rows" in markdown


def test_pngs_are_written(written):
    out, report = written
    names = sorted(p.name for p in report.figures)
    assert names == ["figure3_delta_vs_full.png", "fusion_attention_fusion-st-a.png", "tradeoff_parameters.png"]
    for path in report.figures:
        data = path.read_bytes()
        assert path.parent == out / "report" and len(data) > 1000 and data[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_report_removes_the_files_only_an_earlier_report_wrote(tmp_path):
    """Figures of an earlier report that this one does not make (here: all of them, figures=False) go, so tables
    and figures agree; the user's own files in report/ stay, also one with a figure's suffix."""
    out = _fake_experiment(tmp_path / "again")
    first = write_report(out)
    folder = out / "report"
    (folder / "notes.md").write_text("mine")
    (folder / "mine.png").write_bytes(b"not ours")
    assert first.figures and all(path.is_file() for path in first.figures)
    second = write_report(out, figures=False)
    assert second.figures == [] and not any(path.exists() for path in first.figures)
    assert (folder / "notes.md").read_text() == "mine" and (folder / "mine.png").read_bytes() == b"not ours"
    assert {p.name for p in folder.iterdir()} >= {"tables.md", "tables.json", "table1.csv", "table2.csv"}
    third = write_report(out)
    assert sorted(p.name for p in third.figures) == sorted(p.name for p in first.figures)


def test_a_fusion_run_whose_attention_record_is_damaged_is_named_not_dropped_unseen(tmp_path):
    """A truncated fusion_attention.json was skipped in silence: the heatmap's mean over seeds left that run out and
    said 'up to 3 seed(s)' as before."""
    out = _fake_experiment(tmp_path / "damaged")
    record = out / "runs" / "fusion-st-a" / "cb" / "fusion-st-a" / "seed-2" / "fusion_attention.json"
    record.write_text(record.read_text()[:40])
    report = build_report(out)
    assert len(report.activations["fusion-st-a"]["cb"]) == 2
    (note,) = [note for note in report.figure_notes if "fusion_attention.json" in note]
    assert note.startswith("fusion-st-a/cb seed 2: left out of the fusion attention figure")
    assert "not valid JSON" in note
    assert note in report.markdown()


def test_missing_cells_and_partial_means(tmp_path):
    out = _fake_experiment(
        tmp_path / "partial",
        missing=("full/cb/seed-1", "full/cb/seed-2", "full/cb/seed-3", "head/rte/seed-2", "head/rte/seed-3"),
    )
    report = build_report(out)
    table = report.table("table1")
    assert table.cell("cb", "full").text == MISSING and table.cell("cb", "full").value is None
    assert table.cell("rte", "head").text == f"{55.0:.2f}" and table.cell("rte", "head").std is None
    assert table.cell("mean", "full").text.endswith("(2/3 tasks)")
    # Columns cover different tasks, so a comparable mean over the tasks all of them have is added.
    assert table.rows[-1] == "mean (rte, mrpc)"
    seeds_done = {("head", "rte"): 1}  # head/rte has only seed 1
    for variant in ("head", "full", "st-a-rf16", "fusion-st-a"):
        per_task = [
            statistics.mean(SCORES[(variant, t)][: seeds_done.get((variant, t), 3)]) * 100 for t in ("rte", "mrpc")
        ]
        assert table.cell("mean (rte, mrpc)", variant).value == pytest.approx(statistics.mean(per_task))
    assert "mean (rte, mrpc)" not in build_report(_fake_experiment(tmp_path / "full")).table("table1").rows


def test_runs_with_warnings_are_listed_under_the_tables(tmp_path):
    out = _fake_experiment(tmp_path / "warned", warned=("fusion-st-a/cb/seed-2", "head/rte/seed-1"))
    report = write_report(out, figures=False)
    assert sorted(report.warnings) == [
        "fusion-st-a/cb seed 2: constant predictor in fusion-st-a/cb/seed-2",
        "head/rte seed 1: constant predictor in head/rte/seed-1",
    ]
    markdown = (out / "report" / "tables.md").read_text()
    assert "### Warnings" in markdown and "- head/rte seed 1: constant predictor" in markdown
    assert json.loads((out / "report" / "tables.json").read_text())["warnings"] == report.warnings
    assert "### Warnings" not in build_report(_fake_experiment(tmp_path / "clean")).markdown()


def test_table3_compares_reduction_factors(tmp_path):
    report = build_report(_fake_experiment(tmp_path / "rf", reduction_factors=(16, 2)))
    table = report.table("table3")
    assert table.columns == ("st-a-rf2", "st-a-rf16")
    assert table.cell("rte", "st-a-rf2").value == pytest.approx(60.0)
    assert table.cell("rte", "st-a-rf16").text == report.table("table1").cell("rte", "st-a-rf16").text


def test_cli_report_and_analyze_fusion(written, capsys):
    out, _ = written
    assert main(["report", str(out), "--no-figures"]) == 0
    printed = capsys.readouterr().out
    assert "Table 1" in printed and "Table 2" in printed and "1/3" in printed
    run_dir = out / "runs" / "fusion-st-a" / "rte" / "fusion-st-a" / "seed-1"
    assert main(["analyze-fusion", str(run_dir)]) == 0
    printed = capsys.readouterr().out
    assert "layer" in printed and "mrpc" in printed and "mean" in printed
    png = run_dir / "fusion_attention.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["analyze-fusion", str(out)]) == 2  # no fusion_attention.json there: one-line error


def test_a_done_run_without_a_dev_score_is_named_not_dropped_unseen(tmp_path, capsys):
    """A done job whose metrics hold no finite dev score (no evaluation recorded) was left out of its cell without
    a word: the cell showed the other seeds' mean, and the report said 'Made from 36 of 36 jobs done'."""
    out = _fake_experiment(tmp_path / "unscored")
    with ResultsStore(out) as store:
        job = store.job("head/rte/seed-2")
        store.requeue([job.id])
        store.mark_running(job.id, job.run_dir)
        store.mark_done(job.id, {"metric_for_best": "accuracy", "best": {"accuracy": float("inf")}})
    report = build_report(out)
    warning = "head/rte seed 2: done, but its metrics hold no finite dev accuracy (best: {'accuracy': inf})"
    assert [w for w in report.warnings if "head/rte" in w] == [f"{warning}; left out of the tables"]
    assert main(["report", str(out), "--no-figures"]) == 0
    assert f"warning: {warning}" in capsys.readouterr().out


def test_warnings_name_the_experiments_folders_as_its_file_writes_them(tmp_path):
    """A data warning names the data folder; a report committed beside its experiment file showed the absolute path
    of the machine it ran on. It now shows it as the file writes it, relative to the file's folder."""
    data = tmp_path / "project" / "data"
    data.mkdir(parents=True)
    source = tmp_path / "project" / "examples" / "demo.yaml"
    spec = ExperimentSpec.from_dict(
        {
            "name": "demo",
            "tasks": ["rte"],
            "seeds": [1],
            "setups": ["head"],
            "data_dir": str(data),
            "output_dir": str(source.parent / "results" / "demo"),
        },
        source=str(source),
    )
    out = Path(spec.output_dir)
    (job,) = plan_jobs(spec)
    with ResultsStore(out) as store:
        store.bind(spec, [job])
        store.mark_running(job.id, str(job.run_dir(out)))
        store.mark_done(
            job.id,
            {
                "metric_for_best": "accuracy",
                "best": {"accuracy": 0.5},
                "warnings": [f"no train file in {data}; carved from 'validation'", f"see {out}/runs"],
            },
        )
    assert build_report(out).warnings == [
        "head/rte seed 1: no train file in ../data; carved from 'validation'",
        "head/rte seed 1: see results/demo/runs",
    ]
