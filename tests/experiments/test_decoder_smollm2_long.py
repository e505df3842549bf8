"""examples/decoder-smollm2-long.yaml: issue #23's decoder example with trained sources, and its committed report is
of this very file, every variant with its 2 seeds on every task it runs."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from adapterfusion.experiments.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
NAME = "decoder-smollm2-long"

pytest.importorskip("yaml")


def test_it_composes_the_same_sources_four_ways_on_the_shipped_decoder():
    spec = load_spec(ROOT / "examples" / f"{NAME}.yaml")
    assert spec.encoder == "default-decoder"
    kinds = {v.id: v.options.get("fusion_config") for v in spec.variants if v.is_fusion}
    assert kinds == {
        "fusion-st-a": None,
        "fusion-st-a-query-h": {"query_before_ln": True},
        "fusion-st-a-query-norm": {"query_norm": True},
        "scalearn-st-a": "scalearn",
    }
    assert spec.fusion["cb"] == ("sst2", "sick", "mrpc", "cb")
    assert spec.fusion["rte"] == ("sst2", "sick", "mrpc", "cb", "rte")


def test_the_committed_report_is_of_this_file_with_both_seeds_everywhere():
    spec, results = load_spec(ROOT / "examples" / f"{NAME}.yaml"), ROOT / "examples" / "results" / NAME
    recorded = json.loads((results / "experiment.json").read_text())
    assert recorded["spec_hash"] == spec.spec_hash()
    tables = json.loads((results / "report" / "tables.json").read_text())
    assert tables["job_counts"] == {"done": 5 * 2 + 4 * 2 * 2}  # ST-A on 5 tasks; 4 compositions on CB and RTE
    assert set(tables["scores"]) == {v.id for v in spec.variants}
    table = (results / "report" / "tables.md").read_text()
    for variant, per_task in tables["scores"].items():
        for task, scores in per_task.items():
            assert sorted(s["seed"] for s in scores) == [1, 2], (variant, task)
            values = [s["value"] for s in scores]
            assert f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}" in table
