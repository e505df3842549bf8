"""The committed report of examples/houlsby-init-size-minilm.yaml (Houlsby §3.6's init-scale and adapter-size
analyses on the shipped MiniLM): it belongs to the file as it is now, and its two tables follow from its own
per-run scores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adapterfusion.experiments import ExperimentSpec, plan_jobs

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RESULTS = EXAMPLES / "results" / "houlsby-init-size-minilm"
STDS = ["1e-7", "1e-6", "1e-5", "1e-4", "1e-3", "1e-2", "0_1", "1"]


def _tables() -> dict:
    saved = json.loads((RESULTS / "report" / "tables.json").read_text(encoding="utf-8"))
    return {"saved": saved, **{t["id"]: t for t in saved["tables"]}}


def test_the_committed_report_is_of_the_file_as_it_is():
    spec = ExperimentSpec.load(EXAMPLES / "houlsby-init-size-minilm.yaml")
    jobs = plan_jobs(spec)
    assert len(jobs) == 15
    assert json.loads((RESULTS / "experiment.json").read_text(encoding="utf-8"))["spec_hash"] == spec.spec_hash()
    assert _tables()["saved"]["job_counts"] == {"done": 15}
    for figure in ("init_scale.png", "adapter_size.png", "span_ablation_sst2.png"):
        assert (RESULTS / "report" / figure).is_file()


def test_init_scale_and_size_tables_are_the_runs_scores():
    tables = _tables()
    scores = {v: runs["sst2"][0]["value"] for v, runs in tables["saved"]["scores"].items()}
    init = {c["row"]: c["value"] for c in tables["init_scale"]["cells"]}
    assert len(init) == len(STDS)
    for label, std in zip(init, STDS, strict=True):
        assert init[label] == pytest.approx(scores[f"st-a-init-init_std{std}"])
    size = {c["row"]: c["value"] for c in tables["adapter_size"]["cells"]}
    assert list(size) == ["size 1 (rf 384)", "size 4 (rf 96)", "size 16 (rf 24)", "size 64 (rf 6)", "head", "full"]
    for row, variant in zip(
        size, ["st-a-size-rf384", "st-a-size-rf96", "st-a-size-rf24", "st-a-size-rf6"], strict=False
    ):
        assert size[row] == pytest.approx(scores[variant])
    assert size["head"] == pytest.approx(scores["head"]) and size["full"] == pytest.approx(scores["full"])
