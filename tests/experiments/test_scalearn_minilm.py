"""examples/scalearn-minilm.yaml: ScaLearn beside AdapterFusion and ST-A with paper-minilm's targets, zoo, seeds and
training settings, and its committed report is of this very file, every variant with its 3 seeds; likewise
examples/scalearn-pp-minilm.yaml, the ++ kinds."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapterfusion.experiments.errors import ExperimentSpecError
from adapterfusion.experiments.figures import _is_scalearn
from adapterfusion.experiments.spec import load_spec
from committed_reports import check_committed_report

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("yaml")


@pytest.fixture(scope="module")
def spec():
    return load_spec(ROOT / "examples" / "scalearn-minilm.yaml")


def test_it_is_paper_minilm_with_scalearn_setups(spec):
    paper = load_spec(ROOT / "examples" / "paper-minilm.yaml")
    for field in ("tasks", "seeds", "zoo", "data_dir", "max_examples", "task_training", "fusion", "encoder"):
        assert getattr(spec, field) == getattr(paper, field), field
    for shared in ("st-a-rf16", "fusion-st-a"):
        assert spec.variant(shared).training == paper.variant(shared).training
        assert spec.variant(shared).options == paper.variant(shared).options
    kinds = {v.id: v.options.get("fusion_config") for v in spec.variants if v.is_fusion}
    assert kinds == {
        "fusion-st-a": None,
        "scalearn-st-a": "scalearn",
        "scalearn-uniform-st-a": "scalearn-uniform",
        "scalearn-st-a-lr6e-3": "scalearn",
        "scalearn-uniform-st-a-lr6e-3": "scalearn-uniform",
    }
    for variant in spec.variants:
        if variant.is_fusion and variant.id != "fusion-st-a":
            expected = 6.0e-3 if variant.id.endswith("lr6e-3") else 3.0e-2
            fusion = spec.variant("fusion-st-a").training
            assert variant.training == {**fusion, "learning_rate": expected}


def test_the_plus_plus_file_is_paper_minilm_with_the_shared_scale_kinds():
    spec = load_spec(ROOT / "examples" / "scalearn-pp-minilm.yaml")
    paper = load_spec(ROOT / "examples" / "paper-minilm.yaml")
    for field in ("tasks", "seeds", "zoo", "data_dir", "max_examples", "task_training", "fusion", "encoder"):
        assert getattr(spec, field) == getattr(paper, field), field
    assert spec.variant("st-a-rf16").training == paper.variant("st-a-rf16").training
    kinds = {v.id: v.options.get("fusion_config") for v in spec.variants if v.is_fusion}
    assert kinds == {"scalearn-pp-st-a": "scalearn++", "scalearn-uniform-pp-st-a": "scalearn-uniform++"}
    fusion = paper.variant("fusion-st-a").training
    assert all(v.training == {**fusion, "learning_rate": 6.0e-3} for v in spec.variants if v.is_fusion)


@pytest.mark.parametrize(("name", "jobs"), [("scalearn-minilm", 6 * 3 * 3), ("scalearn-pp-minilm", 3 * 3 * 3)])
def test_the_committed_report_is_of_this_file_with_three_seeds_everywhere(name: str, jobs: int):
    check_committed_report(name, jobs, [1, 2, 3])


@pytest.mark.parametrize(
    ("fusion_config", "message"),
    [
        ("scalearnn", r"setups\[1\]\.fusion_config: unknown fusion preset 'scalearnn'; choose one of"),
        ({"kind": "scalearn", "value": False}, r"setups\[1\]\.fusion_config: fusion kind='scalearn' does not use"),
    ],
)
def test_a_bad_fusion_config_is_refused_when_the_file_is_read(fusion_config, message: str) -> None:
    data = {
        "name": "bad-scalearn",
        "tasks": ["rte"],
        "setups": ["st-a", {"name": "fusion-st-a", "id": "scalearn-st-a", "fusion_config": fusion_config}],
        "fusion": {"rte": ["rte"]},
    }
    with pytest.raises(ExperimentSpecError, match=message):
        load_spec(data)


def test_the_report_labels_scalearn_values_as_scales_not_softmax_weights(spec):
    kinds = {v.id: _is_scalearn(v.to_dict()) for v in spec.variants if v.is_fusion}
    assert kinds == {
        "fusion-st-a": False,
        "scalearn-st-a": True,
        "scalearn-uniform-st-a": True,
        "scalearn-st-a-lr6e-3": True,
        "scalearn-uniform-st-a-lr6e-3": True,
    }
