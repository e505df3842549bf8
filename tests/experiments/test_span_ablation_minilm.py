"""The committed report of examples/houlsby-ablation-minilm.yaml (Houlsby §3.6's span ablation on the shipped MiniLM
and zoo): it belongs to the file as it is now, and each heatmap cell follows from the raw span records it carries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adapterfusion.experiments import ExperimentSpec, plan_jobs
from adapterfusion.experiments.span_ablation import SpanAblation, layer_spans

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RESULTS = EXAMPLES / "results" / "houlsby-ablation-minilm"
TASKS = ["sst2", "mrpc", "rte"]


def _load(name: str) -> dict:
    return json.loads((RESULTS / "report" / name).read_text(encoding="utf-8"))


def test_the_committed_report_is_of_the_file_as_it_is():
    spec = ExperimentSpec.load(EXAMPLES / "houlsby-ablation-minilm.yaml")
    jobs = plan_jobs(spec)
    assert [j.id for j in jobs if j.kind == "span-ablation"] == [f"span-ablation-zoo/{t}/seed-1" for t in TASKS]
    assert json.loads((RESULTS / "experiment.json").read_text(encoding="utf-8"))["spec_hash"] == spec.spec_hash()
    assert _load("tables.json")["job_counts"] == {"done": len(jobs)}


@pytest.mark.parametrize("task", TASKS)
def test_each_cell_is_its_span_score_minus_the_unablated_one(task):
    [record] = _load("span_ablation.json")["span-ablation-zoo"][task]
    result = SpanAblation.from_dict(record)
    assert result.num_layers == 6 and set(result.spans) == set(layer_spans(6)) and result.examples == 200
    table = next(t for t in _load("tables.json")["tables"] if t["id"] == f"span-ablation-zoo_{task}")
    cells = {(c["row"], c["column"]): c["value"] for c in table["cells"]}
    for (i, j), metrics in result.spans.items():
        expected = 100 * (metrics["accuracy"] - result.baseline["accuracy"])
        assert cells[(f"first {i}", f"last {j}")] == pytest.approx(expected), (i, j)
    assert sum(value is not None for value in cells.values()) == 21
    assert (RESULTS / "report" / f"span_ablation_{task}.png").is_file()
