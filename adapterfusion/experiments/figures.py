"""The report's figures (matplotlib, Agg backend), drawn only from a Report's numbers:

* Figure 3 of Pfeiffer et al.: per task, each setup's dev score minus Full's (grouped bars), when `full` ran;
* Figures 4/6 there: per fusion variant, a grid of per-layer heatmaps of the mean softmax weight each target
  task's fusion gives each adapter (rows = target task, columns = adapter), averaged over seeds, on the fixed
  colour scale [0, 1] (see ATTENTION_SCALE); for a ScaLearn variant its mean learned scale instead, coloured
  over the data's own range (a diverging map symmetric about 0 when a scale is negative);
* Houlsby et al.'s trade-off: mean dev score against trained parameters (log scale), when two or more of head,
  adapters, top-k, LayerNorm-only and full fine-tuning ran.
"""

from __future__ import annotations

import io
import math
import os
import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from adapterfusion.analysis.fusion_attention import SCALE_LABEL, FusionActivation, average_activations
from adapterfusion.errors import ConfigError
from adapterfusion.fusion.config import recorded_fusion_config
from adapterfusion.io.atomic import atomic_write_bytes
from adapterfusion.io.paths import check_writable_file

if TYPE_CHECKING:
    from adapterfusion.experiments.report import Report

TRADEOFF_SETUPS = ("head", "layernorm-only", "top-k", "st-a", "st-a-houlsby", "full")
DPI = 150
# Heatmap colour scale: the range of a softmax weight, not the data's. Stretched to the data, a near-uniform
# fusion (every weight near 1/N) rendered as saturated as a decisive one; fixed, it reads dark and uniform, and
# every panel and figure shares one scale. Not centred on 1/N: the rows of one grid may fuse different N.
ATTENTION_SCALE = (0.0, 1.0)
NOT_FUSED_NOTE = "hatched n/a: the adapter is not in that target's fusion"
DIVERGING = "RdBu_r"
SCALE_BAR_LABEL = f"{SCALE_LABEL} (learned, not a softmax weight)"
# What _save writes, by the path's suffix (matplotlib's savefig raises a ValueError for any other, after the drawing).
FIGURE_SUFFIXES = (".png", ".pdf", ".svg", ".jpg", ".jpeg", ".eps", ".ps", ".tif", ".tiff", ".webp")


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend, imported on first use: matplotlib is an optional extra
    (adapterfusion[plots]), so without it only drawing a figure fails, with matplotlib's ImportError."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(figure, path: Path) -> Path:
    """Render to memory, then write atomically: a run killed while plotting leaves no truncated PNG."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format=path.suffix.lstrip(".") or "png", dpi=DPI, bbox_inches="tight")
    pyplot().close(figure)
    atomic_write_bytes(path, buffer.getvalue())
    return path


def check_figure_path(path: str | os.PathLike, what: str) -> Path:
    """`path` as a Path if a figure can be written there, checked before any drawing: a file path in a writable
    folder (io/paths.py: not a folder, not under a file) whose suffix names one of FIGURE_SUFFIXES."""
    target = check_writable_file(path, what)
    if target.suffix.lower() not in FIGURE_SUFFIXES:
        raise ConfigError(
            f"{what} {str(target)!r}: a figure cannot be written as {target.suffix or 'a file without suffix'}; end "
            f"the path in one of {', '.join(FIGURE_SUFFIXES)}"
        )
    return target


def _scale_colours(values: np.ndarray) -> tuple[str, float, float]:
    """Colour map and limits for ScaLearn scales: no fixed range bounds a learned scale, so the data's own range,
    on a diverging map symmetric about 0 when a scale is negative (the sign then reads at a glance)."""
    finite = values[np.isfinite(values)]
    if not finite.size:
        return "viridis", *ATTENTION_SCALE
    low, high = float(finite.min()), float(finite.max())
    if not math.isfinite(high - low) or not math.isfinite(2 * max(-low, high)):  # matplotlib's norm would be NaN
        raise ConfigError(
            f"ScaLearn scales from {low:.3g} to {high:.3g} span more than a float holds, so no colour bar can show "
            "them; the fusion's scales diverged in training: train it again (a lower learning rate)"
        )
    if low < 0:
        bound = max(-low, abs(high))
        return DIVERGING, -bound, bound
    if high - low < 1e-9:  # one value everywhere: a range around it, so it is not drawn at an end of the bar
        pad = max(abs(high) * 0.05, 1e-3)
        return "viridis", low - pad, high + pad
    return "viridis", low, high


def _weight_colours(values: np.ndarray) -> tuple[str, float, float]:
    """Colour map and limits for softmax weights: ATTENTION_SCALE, widened to any value outside it (a record edited by
    hand, or one written with another meaning) so that such a value is not drawn clipped to an end of the bar."""
    low = min(ATTENTION_SCALE[0], float(values.min(initial=ATTENTION_SCALE[0])))
    high = max(ATTENTION_SCALE[1], float(values.max(initial=ATTENTION_SCALE[1])))
    return "viridis", low, high


def _annotate(axis, grid: np.ndarray, fontsize: int, colours: tuple[str, float, float] = ("viridis", 0.0, 1.0)) -> None:
    """Write each finite value into its heatmap cell, dark on light cells and light on dark ones; a NaN cell (an
    adapter the target does not fuse) stays blank, hatched and labelled n/a, so it cannot pass for a zero."""
    cmap, low, high = colours
    for (r, c), value in np.ndenumerate(grid):
        if np.isfinite(value):
            light = abs(value) < 0.6 * high if cmap == DIVERGING else value > low + 0.6 * (high - low)
            axis.text(
                c, r, f"{value:.2f}", ha="center", va="center", fontsize=fontsize, color="black" if light else "white"
            )
        else:
            axis.add_patch(
                pyplot().Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, hatch="///", edgecolor="0.75", linewidth=0)
            )
            axis.text(c, r, "n/a", ha="center", va="center", fontsize=fontsize, color="0.4")


def plot_delta_vs_full(report: Report, path: str | os.PathLike) -> Path | None:
    """Figure 3: per task, each variant's mean dev score minus Full's, in points; None when Full has no result."""
    destination = check_figure_path(path, "the figure path")
    full = next((v["id"] for v in report.variants if v["setup"] == "full"), None)
    base = report.task_means(full) if full else {}
    if not base:
        return None
    variants = [v["id"] for v in report.variants if v["id"] != full and report.task_means(v["id"])]
    tasks = [t for t in report.averaged(report.tasks) if t in base]  # points: a loss has none
    if not variants or not tasks:
        return None
    width = 0.8 / len(variants)
    x = np.arange(len(tasks))
    figure, axes = pyplot().subplots(figsize=(max(6.0, 0.9 * len(tasks) * max(1, len(variants)) ** 0.5 + 2), 4))
    colors = pyplot().get_cmap("tab10")
    for i, variant in enumerate(variants):
        means = report.task_means(variant)
        deltas = [means[t] - base[t] if t in means else np.nan for t in tasks]
        axes.bar(x - 0.4 + width * (i + 0.5), deltas, width, label=variant, color=colors(i % 10))
    axes.axhline(0, color="black", linewidth=0.8)
    axes.set_xticks(x, tasks, rotation=30 if len(tasks) > 6 else 0, ha="right" if len(tasks) > 6 else "center")
    axes.set_ylabel(f"dev score − {full} (points)")
    axes.set_title(f"{report.name}: difference to full fine-tuning per task")
    axes.grid(axis="y", alpha=0.3)
    axes.legend(fontsize=8, ncols=min(4, len(variants)), loc="best")
    return _save(figure, destination)


def plot_fusion_attention(
    by_target: Mapping[str, FusionActivation],
    path: str | os.PathLike,
    title: str = "fusion attention",
    value_label: str = "mean softmax weight",
    scales: bool = False,
) -> Path:
    """A grid with one heatmap per layer: rows = target tasks, columns = adapters, value = mean softmax weight
    (annotated), on ATTENTION_SCALE. Adapters a target does not fuse are left blank, hatched, marked n/a and
    explained in a caption. With `scales` the values are a ScaLearn fusion's learned scales (`value_label` says
    so), coloured over their own range (_scale_colours)."""
    destination = check_figure_path(path, "the figure path")
    if not by_target:  # a FusionActivation itself holds at least one layer and adapter
        raise ConfigError(
            "plot_fusion_attention got no fusion activation to draw (no target task); pass "
            "{target task: FusionActivation} of fusion runs, e.g. from fusion_attention_by_target(report, variant)"
        )
    targets = list(by_target)
    adapters = list(dict.fromkeys(a for act in by_target.values() for a in act.adapters))
    layers = sorted({layer for act in by_target.values() for layer in act.layers})
    grids = {layer: np.full((len(targets), len(adapters)), np.nan) for layer in layers}
    for row, target in enumerate(targets):
        act = by_target[target]
        for i, layer in enumerate(act.layers):
            for j, adapter in enumerate(act.adapters):
                grids[layer][row, adapters.index(adapter)] = act.values[i, j]
    values = np.concatenate([grid[~np.isnan(grid)] for grid in grids.values()])
    colours = _scale_colours(values) if scales else _weight_colours(values)
    ncols = min(len(layers), 4 if len(layers) > 6 else 3)
    nrows = math.ceil(len(layers) / ncols)
    cell = 0.55
    panel_w, panel_h = max(2.2, cell * len(adapters) + 1.2), max(1.6, cell * len(targets) + 0.9)
    figure, axes = pyplot().subplots(
        nrows, ncols, figsize=(panel_w * ncols + 1.2, panel_h * nrows + 0.6), squeeze=False
    )
    fontsize = 8 if len(adapters) <= 8 else 6 if len(adapters) <= 12 else 5
    image = None
    for k, axis in enumerate(axes.flat):
        if k >= len(layers):
            axis.axis("off")
            continue
        grid = grids[layers[k]]
        cmap, low, high = colours
        image = axis.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=low, vmax=high, aspect="auto")
        _annotate(axis, grid, fontsize, ("viridis", 0.0, 1.0) if not scales else colours)
        axis.set_title(f"layer {layers[k] + 1}", fontsize=9)
        axis.set_xticks(range(len(adapters)), adapters, rotation=45, ha="right", fontsize=7)
        axis.set_yticks(range(len(targets)), targets if k % ncols == 0 else [""] * len(targets), fontsize=7)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout(rect=(0, 0, 0.92, 0.97))
    colorbar_axis = figure.add_axes((0.94, 0.15, 0.015, 0.7))
    assert image is not None  # a layer was drawn: with none, nrows above divides by zero
    figure.colorbar(image, cax=colorbar_axis, label=value_label)
    if any(np.isnan(grid).any() for grid in grids.values()):
        figure.text(0.46, 0.0, NOT_FUSED_NOTE, ha="center", va="top", fontsize=8)
    return _save(figure, destination)


def plot_tradeoff(report: Report, path: str | os.PathLike) -> Path | None:
    """Houlsby's trade-off: mean dev score over the tasks every plotted variant finished against the median number
    of trained parameters (log x), one line per setup; None with fewer than two such variants."""
    destination = check_figure_path(path, "the figure path")
    points = [
        (v, statistics.median(report.parameters[v["id"]]))
        for v in report.variants
        if v["setup"] in TRADEOFF_SETUPS and report.task_means(v["id"]) and report.parameters.get(v["id"])
    ]
    if len(points) < 2:
        return None
    common = set(report.averaged(report.tasks))  # a mean in percent: a loss is not averaged in
    for variant, _ in points:
        common &= set(report.task_means(variant["id"]))
    if not common:
        return None
    figure, axes = pyplot().subplots(figsize=(6.5, 4.2))
    for setup in TRADEOFF_SETUPS:
        series = sorted(
            (params, statistics.mean(report.task_means(v["id"])[t] for t in common), v["id"])
            for v, params in points
            if v["setup"] == setup
        )
        if not series:
            continue
        xs, ys, labels = zip(*series, strict=True)
        axes.plot(xs, ys, marker="o", label=setup)
        for x, y, label in series:
            axes.annotate(label, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    axes.set_xscale("log")
    axes.set_xlabel("trained parameters (log scale)")
    axes.set_ylabel(f"mean dev score over {len(common)} task(s) (%)")
    axes.set_title(f"{report.name}: accuracy vs trained parameters")
    axes.grid(alpha=0.3, which="both")
    axes.legend(fontsize=8)
    return _save(figure, destination)


def _is_scalearn(variant: Mapping[str, Any]) -> bool:
    """Whether a report variant's fusion is ScaLearn (fusion/scalearn.py), whose recorded values are scales."""
    config = variant.get("options", {}).get("fusion_config")
    return config is not None and recorded_fusion_config(config).is_scalearn


def fusion_attention_by_target(report: Report, variant: str) -> dict[str, FusionActivation]:
    """The variant's per-target activations averaged over seeds, in the experiment's task order."""
    runs = report.activations.get(variant, {})
    return {task: average_activations(runs[task]) for task in report.tasks if runs.get(task)}


_LOSS_ONLY = "scored by a loss (lower is better, e.g. a generation task's answer_loss), which is not in percent"


def _delta_note(report: Report) -> str:
    """Why Figure 3 was not drawn: no finished `full` run, no other setup beside it, or (an experiment of generation
    tasks) no task they share scored in percent, so that the note does not ask for runs that have finished."""
    full = next((v["id"] for v in report.variants if v["setup"] == "full"), None)
    finished = set(report.task_means(full)) if full else set()
    if not finished:
        return "Figure 3 (delta vs Full) needs finished `full` runs."
    if not set(report.averaged(report.tasks)) & finished:
        return f"Figure 3 (delta vs Full) plots differences in points; every task `{full}` finished is {_LOSS_ONLY}."
    return f"Figure 3 (delta vs Full) needs another setup's results beside `{full}`'s."


def _tradeoff_note(report: Report) -> str:
    """Why the trade-off curve was not drawn; as _delta_note, the tasks the variants share may all be losses."""
    ran = [v["id"] for v in report.variants if v["setup"] in TRADEOFF_SETUPS and report.task_means(v["id"])]
    shared = set(report.tasks).intersection(*(report.task_means(v) for v in ran)) if ran else set()
    if len(ran) >= 2 and shared and not shared & set(report.averaged(report.tasks)):
        return (
            "The accuracy vs trained-parameters curve plots mean scores in percent; every task its setups share is "
            f"{_LOSS_ONLY}."
        )
    return (
        f"The accuracy vs trained-parameters curve needs two or more of {', '.join(TRADEOFF_SETUPS)} with results "
        "on a common task."
    )


def write_figures(report: Report, directory: str | os.PathLike) -> list[Path]:
    """Every figure the report's results allow, as PNGs in `directory`; added to report.figures / figure_notes."""
    directory = Path(directory)
    written: list[Path | None] = [plot_delta_vs_full(report, directory / "figure3_delta_vs_full.png")]
    if written[-1] is None:
        report.figure_notes.append(_delta_note(report))
    for variant in report.variants:
        by_target = fusion_attention_by_target(report, variant["id"])
        if by_target:
            seeds = max(len(r) for r in report.activations[variant["id"]].values())
            scalearn = _is_scalearn(variant) or any(a.is_scalearn for a in by_target.values())
            what = "mean ScaLearn scale (over the hidden dimensions)" if scalearn else "mean fusion attention"
            written.append(
                plot_fusion_attention(
                    by_target,
                    directory / f"fusion_attention_{variant['id']}.png",
                    f"{report.name} · {variant['id']}: {what} on the dev set (rows: target task, "
                    f"columns: adapter; mean over up to {seeds} seed(s))",
                    SCALE_BAR_LABEL if scalearn else "mean softmax weight",
                    scales=scalearn,
                )
            )
    written.append(plot_tradeoff(report, directory / "tradeoff_parameters.png"))
    if written[-1] is None:
        report.figure_notes.append(_tradeoff_note(report))
    figures = [p for p in written if p is not None]
    report.figures.extend(figures)
    return figures


def plot_run_fusion_attention(activation: FusionActivation, path: str | os.PathLike) -> Path:
    """One fusion run's heatmap, rows = layers, columns = adapters (annotated), for `adapterfusion analyze-fusion`:
    softmax weights on ATTENTION_SCALE, a ScaLearn fusion's scales over their own range (_scale_colours)."""
    destination = check_figure_path(path, "the figure path")
    values = activation.values
    broken = int((~np.isfinite(values)).sum())
    if broken:  # drawn blank and hatched, they would read as adapters the fusion does not hold
        raise ConfigError(
            f"{activation.fusion}: {broken} of {values.size} fusion activation values are NaN or infinite, so the "
            "heatmap would show nothing there; the run's fusion produced non-finite outputs: train it again"
        )
    scalearn = activation.is_scalearn
    cmap, low, high = _scale_colours(values) if scalearn else _weight_colours(values)
    figure, axis = pyplot().subplots(
        figsize=(max(3.5, 0.7 * len(activation.adapters) + 2), max(2.5, 0.4 * len(activation.layers) + 1.2))
    )
    image = axis.imshow(values, cmap=cmap, vmin=low, vmax=high, aspect="auto")
    _annotate(axis, values, 8, (cmap, low, high))
    axis.set_xticks(range(len(activation.adapters)), activation.adapters, rotation=45, ha="right")
    axis.set_yticks(range(len(activation.layers)), [f"layer {layer + 1}" for layer in activation.layers])
    target = activation.info.get("task")
    axis.set_title(
        f"{activation.fusion}{f' (target {target})' if target else ''}: "
        f"{SCALE_LABEL if scalearn else 'mean fusion attention'} over {activation.tokens} dev tokens",
        fontsize=9,
    )
    figure.colorbar(image, ax=axis, label=SCALE_BAR_LABEL if scalearn else "mean softmax weight")
    return _save(figure, destination)
