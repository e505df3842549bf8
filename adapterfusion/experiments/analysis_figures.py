"""The figures of an experiment's analyses (Houlsby et al. 2019, Fig. 6), drawn from the numbers of
experiments/analysis_report.py with matplotlib (Agg, as experiments/figures.py):

* span_ablation_<task>.png (with the variant in the name when several adapter sets were ablated): the triangular
  heatmap, first ablated layer down, last ablated layer across, colour = change in dev score in points on a
  scale symmetric about 0;
* init_scale.png: dev score against the adapter's init std (log x), one line per task;
* adapter_size.png (each of these two with its sweep's name, init_scale_<sweep>.png, when the experiment has
  several of its kind): dev score against the bottleneck size (log x), one line per task, with each `lines`
  variant (Head, Full) as a horizontal line in the task's colour.
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from adapterfusion.experiments.analyses import (
    ADAPTER_SIZE,
    INIT_SCALE,
    SPAN_ABLATION,
    ablation_variant,
    sweep_analysis_name,
)
from adapterfusion.experiments.analysis_report import AnalysisResults, bottleneck_sizes, mean_drops, sweep_variants
from adapterfusion.experiments.figures import _save, pyplot
from adapterfusion.experiments.report import Report
from adapterfusion.experiments.span_ablation import SpanAblation

LINE_STYLES = ("--", ":", "-.")


def drop_grid(results: Sequence[SpanAblation]) -> np.ndarray:
    """grid[first, last] = mean drop in points; NaN below the diagonal (no such span)."""
    layers = results[0].num_layers
    grid = np.full((layers, layers), np.nan)
    for (i, j), value in mean_drops(results).items():
        grid[i, j] = value
    return grid


def plot_span_ablation(results: Sequence[SpanAblation], title: str, path: str | os.PathLike) -> Path:
    """Fig. 6 left/centre: the triangular heatmap of one adapter set on one task."""
    grid = drop_grid(results)
    finite = grid[np.isfinite(grid)]
    scale = max(1.0, float(np.max(np.abs(finite)))) if finite.size else 1.0
    layers = grid.shape[0]
    figure, axis = pyplot().subplots(figsize=(0.75 * layers + 2.6, 0.65 * layers + 1.6))
    image = axis.imshow(np.ma.masked_invalid(grid), cmap="RdBu", vmin=-scale, vmax=scale)
    for i in range(layers):
        for j in range(i, layers):
            if math.isfinite(grid[i, j]):
                dark = abs(grid[i, j]) > 0.6 * scale
                axis.text(j, i, f"{grid[i, j]:+.1f}", ha="center", va="center", fontsize=7, color="w" if dark else "k")
    axis.set_xticks(range(layers), [str(j) for j in range(layers)])
    axis.set_yticks(range(layers), [str(i) for i in range(layers)])
    axis.set_xlabel("last ablated layer")
    axis.set_ylabel("first ablated layer")
    metric = results[0].metric
    baseline = statistics.mean(100.0 * r.baseline[metric] for r in results)
    axis.set_title(f"{title}\nno ablation: {baseline:.1f} ({results[0].examples} dev examples)", fontsize=9)
    figure.colorbar(image, ax=axis, label=f"change in dev {metric} (points)")
    return _save(figure, Path(path))


def _series(report: Report, task: str, variants: Sequence[tuple[float, str]]) -> tuple[list, list, list]:
    """x, mean score and std (0 with one seed) of the variants with a finite score on `task`."""
    xs, ys, errs = [], [], []
    for x, variant in variants:
        values = [v for _, v in report.scores.get(variant, {}).get(task, []) if math.isfinite(v)]
        if values:
            xs.append(x)
            ys.append(statistics.mean(values))
            errs.append(statistics.stdev(values) if len(values) > 1 else 0.0)
    return xs, ys, errs


def plot_init_scale(report: Report, analysis: dict[str, Any], path: str | os.PathLike) -> Path | None:
    """Fig. 6 right: dev score against init std (log x), one line per task; None before any result."""
    points = [(float(value), variant) for value, variant in sweep_variants(report, analysis["sweep"], "init_std")]
    drawn = False
    figure, axis = pyplot().subplots(figsize=(6.0, 4.0))
    for task in report.tasks:
        xs, ys, errs = _series(report, task, points)
        if xs:
            axis.errorbar(xs, ys, yerr=errs, marker="o", capsize=3, label=f"{task} ({report.metrics.get(task, '?')})")
            drawn = True
    if not drawn:
        pyplot().close(figure)
        return None
    axis.set_xscale("log")
    axis.set_xlabel("adapter init std (log scale)")
    axis.set_ylabel("dev score (%)")
    axis.set_title(f"{report.name}: robustness to the initialisation scale ({analysis['sweep']})", fontsize=9)
    axis.grid(alpha=0.3, which="both")
    axis.legend(fontsize=8)
    return _save(figure, Path(path))


def plot_adapter_size(
    report: Report, analysis: dict[str, Any], hidden_size: int | None, path: str | os.PathLike
) -> Path | None:
    """Dev score against bottleneck size (log x; the reduction factor when no run recorded the hidden size), with
    the `lines` variants as horizontal lines; None before any result."""
    sizes = bottleneck_sizes(report, analysis["sweep"], hidden_size)
    points = [(float(rf) if m is None else float(m), variant) for m, rf, variant in sizes]
    drawn = False
    figure, axis = pyplot().subplots(figsize=(6.0, 4.0))
    for k, task in enumerate(report.tasks):
        xs, ys, errs = _series(report, task, points)
        if not xs:
            continue
        colour = f"C{k % 10}"
        axis.errorbar(xs, ys, yerr=errs, marker="o", capsize=3, color=colour, label=f"{task} adapters")
        for n, line in enumerate(analysis.get("lines", [])):
            _, level, _ = _series(report, task, [(0.0, line)])
            if level:
                style = LINE_STYLES[n % len(LINE_STYLES)]
                axis.axhline(level[0], color=colour, linestyle=style, linewidth=1, label=f"{task} {line}")
        drawn = True
    if not drawn:
        pyplot().close(figure)
        return None
    axis.set_xscale("log", base=2)
    ticks = sorted({x for x, _ in points})
    axis.set_xticks(ticks, [f"{x:g}" for x in ticks])  # the sizes themselves, not powers of 2
    axis.minorticks_off()
    axis.set_xlabel("bottleneck size (log scale)" if hidden_size is not None else "reduction factor (log scale)")
    axis.set_ylabel("dev score (%)")
    axis.set_title(f"{report.name}: dev score against adapter size ({analysis['sweep']})", fontsize=9)
    axis.grid(alpha=0.3, which="both")
    axis.legend(fontsize=7)
    return _save(figure, Path(path))


def write_analysis_figures(report: Report, results: AnalysisResults, directory: str | os.PathLike) -> list[Path]:
    """Every figure the analyses' results allow, as PNGs in `directory`; added to report.figures."""
    directory = Path(directory)
    written: list[Path | None] = []
    ablated = [a for a in results.analyses if a.get("kind") == SPAN_ABLATION]
    for analysis in ablated:
        variant = ablation_variant(analysis)
        for task in analysis.get("tasks", []):
            found = results.ablation(variant, task)
            if found:
                name = f"span_ablation_{task}" if len(ablated) == 1 else f"span_ablation_{variant}_{task}"
                title = f"{report.name} · {variant} · {task}: adapters removed from layers first..last"
                written.append(plot_span_ablation(found, title, directory / f"{name}.png"))
    for analysis in results.analyses:
        kind = analysis.get("kind")
        if kind in (INIT_SCALE, ADAPTER_SIZE):
            path = directory / f"{sweep_analysis_name(analysis, results.analyses)}.png"
            plotted = (
                plot_init_scale(report, analysis, path)
                if kind == INIT_SCALE
                else plot_adapter_size(report, analysis, results.hidden_size, path)
            )
            written.append(plotted)
    figures = [p for p in written if p is not None]
    report.figures.extend(figures)
    return figures
