"""The committed report of examples/houlsby-minilm.yaml (issue #27's offline counterpart of Houlsby's Table 1): it
belongs to the file as it is now, has the paper's shape, and its selected rows follow from its own per-run scores."""

from __future__ import annotations

import json
import math
from pathlib import Path

from adapterfusion.experiments import ExperimentSpec, plan_jobs

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RESULTS = EXAMPLES / "results" / "houlsby-minilm"
ROWS = ["Full fine-tuning", "Adapters (8-64)", "Adapters (64)"]
TASKS = ["sst2", "sick-r", "rte"]


def _tables() -> dict:
    saved = json.loads((RESULTS / "report" / "tables.json").read_text(encoding="utf-8"))
    return {"saved": saved, **{t["id"]: t for t in saved["tables"]}}


def test_the_committed_report_is_of_the_file_as_it_is():
    spec = ExperimentSpec.load(EXAMPLES / "houlsby-minilm.yaml")
    assert len(plan_jobs(spec)) == 30 and list(spec.select) == ROWS
    recorded = json.loads((RESULTS / "experiment.json").read_text(encoding="utf-8"))
    assert recorded["spec_hash"] == spec.spec_hash()
    assert _tables()["saved"]["job_counts"] == {"done": 30}


def test_houlsby_table_shape_and_its_choices():
    tables = _tables()
    houlsby = tables["houlsby_table1"]
    assert houlsby["rows"] == ROWS and houlsby["columns"] == [*TASKS, "mean", "params / task (%)"]
    cells = {(c["row"], c["column"]): c for c in houlsby["cells"]}
    scores = tables["saved"]["scores"]
    groups = {
        "Full fine-tuning": [v for v in scores if v.startswith("full-")],
        "Adapters (8-64)": [v for v in scores if v.startswith("st-a-houlsby-")],
        "Adapters (64)": [v for v in scores if v.startswith("st-a-houlsby-rf6-")],
    }
    assert [len(g) for g in groups.values()] == [2, 8, 4]
    for row, variants in groups.items():
        for task in TASKS:
            values = [scores[v][task][0]["value"] for v in variants]
            defined = [x for x in values if x is not None and math.isfinite(x)]
            assert cells[(row, task)]["value"] == max(defined), (row, task)
    shares = {row: cells[(row, "params / task (%)")]["value"] for row in ROWS}
    assert shares["Full fine-tuning"] > 100 > shares["Adapters (64)"] > 0
    assert shares["Adapters (8-64)"] < 100
    settings = {(c["row"], c["column"]): c["text"] for c in tables["selected_settings"]["cells"]}
    assert all(settings[(task, "Adapters (64)")].startswith("seed 1: rf6 lr") for task in TASKS)
    markdown = (RESULTS / "report" / "tables.md").read_text(encoding="utf-8")
    assert "| method | sst2 | sick-r | rte | mean | params / task (%) |" in markdown
