"""The README's how-to, end to end (issue #27): a user's CSV of texts and string labels -> a task description ->
an experiment file with a sweep and `select` -> `adapterfusion plan`, `run` and `report` -> the Houlsby-shaped table.
On the tiny random BERT, a few steps per run: this checks the plumbing, not the scores."""

from __future__ import annotations

import json
import math

from adapterfusion.cli import main

WORDS = {"positive": ["great", "lovely", "fine", "superb"], "negative": ["awful", "dull", "poor", "bad"]}


def _write_csv(path, rows: int, offset: int) -> None:
    lines = ["text,label"]
    for i in range(offset, offset + rows):
        label = ("negative", "positive")[i % 2]
        lines.append(f"a {WORDS[label][i % 4]} film number {i},{label}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_own_csv_to_task_to_sweep_to_table(tmp_path, tiny_encoder_dir, capsys):
    _write_csv(tmp_path / "train.csv", 40, 0)
    _write_csv(tmp_path / "dev.csv", 16, 100)
    (tmp_path / "reviews.json").write_text(
        json.dumps(
            {
                "name": "reviews",
                "kind": "single",
                "text_fields": ["text"],
                "label_names": ["negative", "positive"],
                "data_files": {"train": "train.csv", "validation": "dev.csv"},
            }
        )
    )
    fast = {"max_steps": 2, "batch_size": 8, "max_length": 32, "logging_steps": 1, "patience": None}
    experiment = {
        "name": "my-reviews",
        "encoder": str(tiny_encoder_dir),
        "task_files": ["reviews.json"],
        "tasks": ["reviews"],
        "output_dir": "results",
        "training": fast,
        "setups": [
            {"name": "full", "sweep": {"learning_rate": [1.0e-4, 1.0e-3]}},
            {"name": "st-a-houlsby", "sweep": {"reduction_factor": [16, 4], "learning_rate": [1.0e-3, 1.0e-2]}},
        ],
        "select": {
            "Full fine-tuning": "full",
            "Adapters": "st-a-houlsby",
            "Adapters (rf 4)": {"sweep": "st-a-houlsby", "reduction_factor": 4},
        },
    }
    path = tmp_path / "my-reviews.json"
    path.write_text(json.dumps(experiment))

    assert main(["plan", str(path)]) == 0
    assert "6 jobs: 1 tasks, 6 setup variants, 1 seeds" in capsys.readouterr().out
    assert main(["run", str(path), "--no-progress"]) == 0
    capsys.readouterr()
    out = tmp_path / "results"
    assert main(["report", str(out), "--no-figures"]) == 0
    printed = capsys.readouterr().out
    assert "### Houlsby Table 1: dev results of the variants selected on dev" in printed

    saved = json.loads((out / "report" / "tables.json").read_text())
    houlsby = next(t for t in saved["tables"] if t["id"] == "houlsby_table1")
    assert houlsby["rows"] == ["Full fine-tuning", "Adapters", "Adapters (rf 4)"]
    assert houlsby["columns"] == ["reviews", "mean", "params / task (%)"]
    cells = {(c["row"], c["column"]): c for c in houlsby["cells"]}
    chosen = {}
    for variants, row in (
        (["full-lr1e-4", "full-lr1e-3"], "Full fine-tuning"),
        (
            [
                "st-a-houlsby-rf16-lr1e-3",
                "st-a-houlsby-rf16-lr1e-2",
                "st-a-houlsby-rf4-lr1e-3",
                "st-a-houlsby-rf4-lr1e-2",
            ],
            "Adapters",
        ),
        (["st-a-houlsby-rf4-lr1e-3", "st-a-houlsby-rf4-lr1e-2"], "Adapters (rf 4)"),
    ):
        scores = {}
        for variant in variants:  # each run's own record: the best dev accuracy it kept
            setup = "full" if variant.startswith("full") else "st-a-houlsby"
            run = out / "runs" / variant / "reviews" / setup / "seed-42"
            scores[variant] = json.loads((run / "metrics.json").read_text())["best"]["accuracy"]
        best = max(variants, key=lambda v: scores[v])  # max keeps the first of equals, as the selection does
        chosen[row] = best
        assert cells[(row, "reviews")]["value"] == 100 * scores[best]
        assert math.isclose(cells[(row, "mean")]["value"], 100 * scores[best])
    settings = next(t for t in saved["tables"] if t["id"] == "selected_settings")
    text = {c["column"]: c["text"] for c in settings["cells"]}
    assert text["Adapters (rf 4)"].startswith("seed 42: rf4 lr1e-")
    full_share = cells[("Full fine-tuning", "params / task (%)")]["value"]
    adapter_share = cells[("Adapters", "params / task (%)")]["value"]
    assert full_share > 100 > adapter_share > 0  # fine-tuning trains the encoder and a head; adapters a few %


def test_a_run_says_which_jobs_trained_on_data_missing_a_label(tmp_path, tiny_encoder_dir, capsys):
    """A train split with one label only trains a constant predictor: `run` names the job and the missing label
    (it used to be only in the run's config.json), and the report lists it under its warnings."""
    (tmp_path / "train.csv").write_text("text,label\n" + "".join(f"a great film {i},positive\n" for i in range(8)))
    _write_csv(tmp_path / "dev.csv", 8, 100)
    task = {"name": "reviews", "kind": "single", "text_fields": ["text"], "label_names": ["negative", "positive"]}
    task["data_files"] = {"train": "train.csv", "validation": "dev.csv"}
    (tmp_path / "reviews.json").write_text(json.dumps(task))
    experiment = {
        "name": "one-label",
        "encoder": str(tiny_encoder_dir),
        "task_files": ["reviews.json"],
        "tasks": ["reviews"],
        "seeds": [1],
        "output_dir": "results",
        "training": {"max_steps": 1, "batch_size": 8, "max_length": 32, "patience": None},
        "setups": ["st-a"],
    }
    path = tmp_path / "one-label.json"
    path.write_text(json.dumps(experiment))
    assert main(["run", str(path), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "warning st-a-rf16/reviews/seed-1: the train split has no example of label(s) ['negative']" in printed
    tables = (tmp_path / "results" / "report" / "tables.md").read_text()
    assert "has no example of label(s) ['negative']" in tables
