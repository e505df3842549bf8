"""examples/decoder-smollm2-mnli.yaml: issue #23's decoder example with one strong source (MNLI), and its committed
report is of this very file, both setups with their 2 seeds on every task they run."""

from __future__ import annotations

import importlib.util
import json
import statistics
from pathlib import Path

import pytest

from adapterfusion.experiments.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
NAME = "decoder-smollm2-mnli"

pytest.importorskip("yaml")


def test_it_fuses_mnli_with_each_target_on_the_shipped_decoder():
    spec = load_spec(ROOT / "examples" / f"{NAME}.yaml")
    assert spec.encoder == "default-decoder"
    assert [v.id for v in spec.variants if v.is_fusion] == ["fusion-st-a"]
    assert (spec.fusion["cb"], spec.fusion["rte"]) == (("mnli", "cb"), ("mnli", "rte"))


def test_the_committed_report_is_of_this_file_with_both_seeds_everywhere():
    spec, results = load_spec(ROOT / "examples" / f"{NAME}.yaml"), ROOT / "examples" / "results" / NAME
    recorded = json.loads((results / "experiment.json").read_text())
    assert recorded["spec_hash"] == spec.spec_hash()
    tables = json.loads((results / "report" / "tables.json").read_text())
    assert tables["job_counts"] == {"done": 3 * 2 + 2 * 2}  # ST-A on 3 tasks; Fusion on CB and RTE
    assert set(tables["scores"]) == {v.id for v in spec.variants}
    table = (results / "report" / "tables.md").read_text()
    for variant, per_task in tables["scores"].items():
        for task, scores in per_task.items():
            assert sorted(s["seed"] for s in scores) == [1, 2], (variant, task)
            values = [s["value"] for s in scores]
            assert f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}" in table


def _transfer_check():
    spec = importlib.util.spec_from_file_location("transfer_check", ROOT / "examples" / "transfer_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_transfer_check_maps_source_labels_onto_the_target_by_name():
    label_map = _transfer_check().label_map
    mnli, cb = ["entailment", "neutral", "contradiction"], ["entailment", "contradiction", "neutral"]
    rte = ["entailment", "not_entailment"]
    assert label_map(mnli, cb).tolist() == [0, 2, 1]
    assert label_map(mnli, rte).tolist() == [0, 1, 1]
    with pytest.raises(SystemExit, match="cannot map labels"):
        label_map(mnli, ["positive", "negative"])
