"""Fusion-attention heatmaps: one fixed colour scale [0, 1], so a near-uniform fusion does not render saturated,
and cells for adapters a target does not fuse are masked, hatched, labelled n/a and explained in a caption."""

from __future__ import annotations

import numpy as np
import pytest

from adapterfusion.analysis import FusionActivation
from adapterfusion.analysis.fusion_attention import SCALEARN_KIND
from adapterfusion.errors import ConfigError
from adapterfusion.experiments.figures import _weight_colours, plot_fusion_attention, plot_run_fusion_attention

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


@pytest.mark.parametrize(
    "name, message",
    [
        ("heat.xyz", "a figure cannot be written as .xyz; end the path in one of .png"),
        ("heat", "a figure cannot be written as a file without suffix"),
        ("taken/heat.png", "the folder of the figure path .* is a file"),
        (".", "is a folder; give a file path"),
    ],
)
def test_a_figure_path_matplotlib_cannot_write_is_refused_before_drawing(name, message, drawn, tmp_path):
    """Called from Python, an unknown suffix was matplotlib's ValueError after the drawing, a folder an
    IsADirectoryError and a path under a file a FileExistsError; a path without suffix got PNG bytes."""
    (tmp_path / "taken").write_text("a file the user keeps\n")
    for plot in (
        lambda path: plot_run_fusion_attention(NEAR_UNIFORM, path),
        lambda path: plot_fusion_attention({"rte": NEAR_UNIFORM}, path),
    ):
        with pytest.raises(ConfigError, match=message):
            plot(tmp_path / name)
    assert not drawn and sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


def test_scales_past_a_floats_range_are_refused_and_weights_past_the_scale_widen_it(tmp_path):
    """ScaLearn scales of -1e308 and 1e308 made matplotlib fail ('Axis limits cannot be NaN or Inf') after the figure
    was built; softmax weights outside [0, 1] (a record edited by hand) were drawn clipped to an end of the bar."""
    huge = FusionActivation("f", ("a", "b"), (0,), np.array([[-1e308, 1e308]]), 3, {"fusion_kind": SCALEARN_KIND})
    with pytest.raises(ConfigError, match="span more than a float holds"):
        plot_run_fusion_attention(huge, tmp_path / "run.png")
    with pytest.raises(ConfigError, match="span more than a float holds"):
        plot_fusion_attention({"rte": huge}, tmp_path / "grid.png", scales=True)
    assert not any(tmp_path.iterdir())
    assert _weight_colours(np.array([[0.2, 1.4]])) == ("viridis", 0.0, 1.4)
    assert _weight_colours(np.array([[0.2, 0.8]])) == ("viridis", 0.0, 1.0)


def test_a_heatmap_of_nothing_or_of_non_finite_values_is_refused(drawn, tmp_path):
    """plot_fusion_attention({}) was a ValueError from numpy; a run's record of NaN values was drawn blank and
    hatched, as adapters the fusion does not hold, and written as if fine."""
    with pytest.raises(ConfigError, match="no fusion activation to draw"):
        plot_fusion_attention({}, tmp_path / "grid.png")
    broken = FusionActivation("f", ("a", "b"), (0,), np.array([[np.nan, 0.5]]), 3)
    with pytest.raises(ConfigError, match="1 of 2 fusion activation values are NaN or infinite"):
        plot_run_fusion_attention(broken, tmp_path / "run.png")
    assert not drawn and not any(tmp_path.iterdir())
