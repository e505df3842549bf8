"""Checks shared by the tests of committed example results (examples/results/<name>/): the report is of the
experiment file as it stands, and every setup has every seed on every task it ran."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from adapterfusion.experiments.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]


def check_committed_report(name: str, jobs: int, seeds: list[int]) -> None:
    """examples/results/<name>/ was made by examples/<name>.yaml (same spec hash), from `jobs` finished jobs, and its
    table shows each (setup, task) cell as the mean ± sample deviation over exactly `seeds`."""
    spec, results = load_spec(ROOT / "examples" / f"{name}.yaml"), ROOT / "examples" / "results" / name
    recorded = json.loads((results / "experiment.json").read_text())
    assert recorded["spec_hash"] == spec.spec_hash()
    tables = json.loads((results / "report" / "tables.json").read_text())
    assert tables["job_counts"] == {"done": jobs}
    assert set(tables["scores"]) == {v.id for v in spec.variants}
    table = (results / "report" / "tables.md").read_text()
    for variant, per_task in tables["scores"].items():
        for task, scores in per_task.items():
            assert sorted(s["seed"] for s in scores) == seeds, (variant, task)
            values = [s["value"] for s in scores]
            assert f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}" in table
