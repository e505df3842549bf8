"""Fusion-attention heatmaps: one fixed colour scale [0, 1], so a near-uniform fusion does not render saturated,
and cells for adapters a target does not fuse are masked, hatched, labelled n/a and explained in a caption."""

from __future__ import annotations

import numpy as np

from adapterfusion.analysis import FusionActivation
from adapterfusion.experiments.figures import plot_fusion_attention, plot_run_fusion_attention

NEAR_UNIFORM = FusionActivation("f", ("a", "b", "c"), (0, 1), np.array([[0.33, 0.34, 0.33], [0.335, 0.33, 0.335]]), 10)


def _images(figure) -> list:
    return [image for axis in figure.axes for image in axis.images]


def test_near_uniform_fusion_keeps_the_fixed_scale(drawn, tmp_path):
    plot_fusion_attention({"rte": NEAR_UNIFORM}, tmp_path / "grid.png")
    plot_run_fusion_attention(NEAR_UNIFORM, tmp_path / "run.png")
    assert len(drawn) == 2
    for figure in drawn:
        images = _images(figure)
        assert images and all((image.norm.vmin, image.norm.vmax) == (0.0, 1.0) for image in images)
    assert (tmp_path / "grid.png").is_file() and (tmp_path / "run.png").is_file()


def test_adapters_a_target_does_not_fuse_are_masked_and_marked(drawn, tmp_path):
    by_target = {
        "rte": FusionActivation("f", ("a", "b", "rte"), (0,), np.array([[0.2, 0.3, 0.5]]), 5),
        "cb": FusionActivation("f", ("a", "cb"), (0,), np.array([[0.6, 0.4]]), 5),
    }
    plot_fusion_attention(by_target, tmp_path / "grid.png")
    (figure,) = drawn
    axis = figure.axes[0]
    (image,) = axis.images  # columns: a, b, rte, cb
    assert np.ma.getmaskarray(image.get_array()).tolist() == [[False, False, False, True], [False, True, True, False]]
    assert [t.get_text() for t in axis.texts].count("n/a") == 3
    assert sum(bool(p.get_hatch()) for p in axis.patches) == 3
    assert any("not in that target's fusion" in t.get_text() for t in figure.texts)


def test_no_caption_when_every_target_fuses_every_adapter(drawn, tmp_path):
    plot_fusion_attention({"rte": NEAR_UNIFORM}, tmp_path / "grid.png")
    (figure,) = drawn
    assert not any("n/a" in t.get_text() for axis in figure.axes for t in axis.texts)
    assert not any("not in that target's fusion" in t.get_text() for t in figure.texts)
