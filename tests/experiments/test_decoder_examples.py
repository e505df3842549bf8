"""The decoder examples of issue #23 (examples/decoder-smollm2-*.yaml) and their committed reports: each report is of
its very file, every setup with its 2 seeds on every task it runs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from adapterfusion.experiments.spec import load_spec
from committed_reports import check_committed_report

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("yaml")


def _spec(name: str):
    return load_spec(ROOT / "examples" / f"{name}.yaml")


def test_the_long_example_composes_the_same_sources_four_ways():
    spec = _spec("decoder-smollm2-long")
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


@pytest.mark.parametrize(
    "name", ["decoder-smollm2-mnli", "decoder-smollm2-mnli-demo", "decoder-smollm2-mnli-demo-zero-up"]
)
def test_the_mnli_examples_fuse_mnli_with_each_target(name):
    spec = _spec(name)
    assert spec.encoder == "default-decoder"
    assert [v.id for v in spec.variants if v.is_fusion] == ["fusion-st-a"]
    assert (spec.fusion["cb"], spec.fusion["rte"]) == (("mnli", "cb"), ("mnli", "rte"))
    inits = {v.options.get("init") for v in spec.variants if not v.is_fusion}
    assert inits == ({"zero_up"} if name.endswith("zero-up") else {None})


@pytest.mark.parametrize(
    "name, jobs",
    [
        ("decoder-smollm2-long", 5 * 2 + 4 * 2 * 2),  # ST-A on 5 tasks; 4 compositions on CB and RTE
        ("decoder-smollm2-mnli", 3 * 2 + 2 * 2),  # ST-A on 3 tasks; Fusion on CB and RTE
        ("decoder-smollm2-mnli-demo", 3 * 2 + 2 * 2),
        ("decoder-smollm2-mnli-demo-zero-up", 3 * 2 + 2 * 2),
    ],
)
def test_the_committed_report_is_of_this_file_with_both_seeds_everywhere(name, jobs):
    check_committed_report(name, jobs, [1, 2])


def _transfer_check():
    spec = importlib.util.spec_from_file_location("transfer_check", ROOT / "examples" / "transfer_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_transfer_check_maps_source_labels_onto_the_target_by_name():
    label_map = _transfer_check().label_map
    mnli, cb = ["entailment", "neutral", "contradiction"], ["entailment", "contradiction", "neutral"]
    assert label_map(mnli, cb).tolist() == [0, 2, 1]
    assert label_map(mnli, ["entailment", "not_entailment"]).tolist() == [0, 1, 1]
    with pytest.raises(SystemExit, match="cannot map labels"):
        label_map(mnli, ["positive", "negative"])
