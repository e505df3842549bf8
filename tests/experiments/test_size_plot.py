"""Adapter size (Houlsby §3.6): the adapter-size analysis tabulates and plots dev score against the bottleneck size
(hidden size // reduction factor, as AdapterConfig computes it), with Head and Full as reference lines."""

from __future__ import annotations

import pytest

from adapterfusion.experiments import ExperimentSpec, ExperimentSpecError
from adapterfusion.experiments.analysis_figures import plot_adapter_size
from adapterfusion.experiments.analysis_report import adapter_size_table, bottleneck_sizes
from tiny_experiments import report_with

ANALYSIS = {"kind": "adapter-size", "sweep": "size", "lines": ["head", "full"]}


def _report():
    variants = [
        {"id": f"size-rf{rf}", "setup": "st-a", "sweep": {"group": "size", "settings": {"reduction_factor": rf}}}
        for rf in (6, 384, 24)
    ] + [{"id": "head", "setup": "head"}, {"id": "full", "setup": "full"}]
    scores = {
        "size-rf6": {"sst2": [(1, 85.0)]},
        "size-rf384": {"sst2": [(1, 70.0)]},
        "size-rf24": {"sst2": [(1, 80.0)]},
        "head": {"sst2": [(1, 75.0)]},
        "full": {"sst2": [(1, 88.0)]},
    }
    return report_with(variants, scores)


def test_sizes_are_the_bottleneck_widths_smallest_first():
    assert bottleneck_sizes(_report(), "size", 384) == [
        (1, 384, "size-rf384"),
        (16, 24, "size-rf24"),
        (64, 6, "size-rf6"),
    ]
    assert [m for m, _, _ in bottleneck_sizes(_report(), "size", None)] == [None, None, None]


def test_adapter_size_table_has_a_row_per_size_and_line(tmp_path):
    table = adapter_size_table(_report(), ANALYSIS, 384)
    assert table is not None and table.id == "adapter_size"
    assert table.rows == ("size 1 (rf 384)", "size 16 (rf 24)", "size 64 (rf 6)", "head", "full")
    assert [table.cell(row, "sst2").value for row in table.rows] == [70.0, 80.0, 85.0, 75.0, 88.0]
    assert plot_adapter_size(_report(), ANALYSIS, 384, tmp_path / "adapter_size.png").stat().st_size > 1000
    assert plot_adapter_size(_report(), ANALYSIS, None, tmp_path / "by_rf.png") is not None  # x: the rf instead


def test_a_factor_without_a_bottleneck_is_left_out_not_fatal(tmp_path):
    """rf 1000 on hidden size 384 (a Hub encoder's size is unknown when the file is read): its jobs failed, and the
    report failed with them, tables and all; the row is left out, with a note."""
    variants = [
        {"id": f"size-rf{rf}", "setup": "st-a", "sweep": {"group": "size", "settings": {"reduction_factor": rf}}}
        for rf in (1000, 24)
    ]
    report = report_with(variants, {"size-rf24": {"sst2": [(1, 80.0)]}})
    assert bottleneck_sizes(report, "size", 384) == [(16, 24, "size-rf24")]
    table = adapter_size_table(report, {"kind": "adapter-size", "sweep": "size"}, 384)
    assert table is not None and table.rows == ("size 16 (rf 24)",)
    assert "Left out (no bottleneck for hidden size 384, so no run of it can train): rf 1000." in table.notes[0]
    assert plot_adapter_size(report, {"sweep": "size"}, 384, tmp_path / "adapter_size.png") is not None


@pytest.mark.parametrize(
    ("analysis", "message"),
    [
        ({"sweep": "st-a-size", "lines": ["ful"]}, "not a setup variant"),
        ({"sweep": "st-a-size", "lines": "full"}, "must be a list"),
        ({"sweep": "other"}, "no sweep called"),
        ({"sweep": "st-a-size", "lines": ["full", "full"]}, r"lines\[1\]: 'full' is listed twice"),
    ],
)
def test_bad_adapter_size_analyses_are_refused(tmp_path, analysis, message):
    with pytest.raises(ExperimentSpecError, match=message):
        ExperimentSpec.from_dict(
            {
                "name": "size",
                "tasks": ["sst2"],
                "output_dir": str(tmp_path),
                "setups": ["full", {"name": "st-a", "id": "st-a-size", "sweep": {"reduction_factor": [6, 24]}}],
                "analyses": [{"kind": "adapter-size", **analysis}],
            }
        )
