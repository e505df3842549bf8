"""A ScaLearn fusion's record holds learned output scales, not softmax weights: `analyze-fusion` and the heatmaps say
so, and colour them over their own range (a diverging map about 0 when one is negative), while an attention fusion
keeps the fixed [0, 1] scale."""

from __future__ import annotations

import json

import numpy as np
import pytest

from adapterfusion.analysis import FusionActivation, load_fusion_activation
from adapterfusion.analysis.fusion_attention import SCALEARN_KIND
from adapterfusion.cli import main
from adapterfusion.experiments import figures
from adapterfusion.experiments.figures import plot_fusion_attention, plot_run_fusion_attention

SCALES = np.array([[1.0094, 0.9985], [1.0144, 0.9848]])
SCALEARN = {"fusion_kind": SCALEARN_KIND}


def _run_dir(tmp_path, fusion_config, info=None):
    record = FusionActivation("fusion_rte", ("rte", "sst2"), (0, 1), SCALES, 244, {"task": "rte", **(info or {})})
    (tmp_path / "fusion_attention.json").write_text(json.dumps(record.to_dict()))
    (tmp_path / "config.json").write_text(json.dumps({"setup_options": {"fusion_config": fusion_config}}))
    return tmp_path


def test_labels_follow_the_fusion_kind():
    assert FusionActivation("f", ("a",), (0,), np.ones((1, 1)), 1, dict(SCALEARN)).value_label == "mean ScaLearn scale"
    assert FusionActivation("f", ("a",), (0,), np.ones((1, 1)), 1).value_label == "mean softmax weight"


@pytest.mark.parametrize(("fusion_config", "scalearn"), [("scalearn", True), ("dynamic", False)])
def test_a_record_without_its_kind_takes_it_from_the_run_config(tmp_path, fusion_config, scalearn):
    assert load_fusion_activation(_run_dir(tmp_path, fusion_config)).is_scalearn is scalearn


def test_analyze_fusion_calls_scales_scales(tmp_path, capsys):
    assert main(["analyze-fusion", str(_run_dir(tmp_path, "scalearn")), "--no-plot"]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert "learned output scale" in header and "not a softmax weight" in header
    _run_dir(tmp_path, "dynamic")
    assert main(["analyze-fusion", str(tmp_path), "--no-plot"]) == 0
    assert "mean softmax weight per layer" in capsys.readouterr().out


def test_run_heatmap_of_scales_uses_their_range(drawn, tmp_path):
    plot_run_fusion_attention(FusionActivation("f", ("a", "b"), (0, 1), SCALES, 9, dict(SCALEARN)), tmp_path / "r.png")
    (figure,) = drawn
    (image,) = figure.axes[0].images
    assert (image.norm.vmin, image.norm.vmax) == (SCALES.min(), SCALES.max())
    assert "scale" in figure.axes[1].get_ylabel() and "softmax weight" not in figure.axes[0].get_title()


def test_negative_scales_get_a_diverging_map_about_zero(drawn, tmp_path):
    values = np.array([[1.4, -0.6], [0.2, 0.9]])
    activation = FusionActivation("f", ("a", "b"), (0, 1), values, 9, dict(SCALEARN))
    plot_run_fusion_attention(activation, tmp_path / "r.png")
    plot_fusion_attention({"rte": activation}, tmp_path / "g.png", value_label="mean scale", scales=True)
    for figure in drawn:
        image = figure.axes[0].images[0]
        assert (image.norm.vmin, image.norm.vmax) == (-1.4, 1.4)
        assert image.get_cmap().name == figures.DIVERGING


def test_report_grid_of_scales_is_not_widened_to_zero(drawn, tmp_path):
    activation = FusionActivation("f", ("a", "b"), (0, 1), SCALES, 9, dict(SCALEARN))
    plot_fusion_attention({"rte": activation}, tmp_path / "g.png", scales=True)
    (figure,) = drawn
    assert (figure.axes[0].images[0].norm.vmin, figure.axes[0].images[0].norm.vmax) == (SCALES.min(), SCALES.max())
