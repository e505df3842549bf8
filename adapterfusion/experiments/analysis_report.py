"""The report's part for an experiment's `analyses` (experiments/analyses.py): the numbers of Houlsby et al.'s §3.6
as tables, read from the results store and run folders like the rest of the report (never from live models).

* span-ablation: one table per ablated adapter set and task, rows = first removed layer, columns = last removed
  layer (0-based, as the paper's Fig. 6), cell = dev score with the adapter removed from that span minus the score
  with none removed, in points, mean over seeds;
* init-scale: rows = the swept init std, columns = tasks, cell = dev score (mean ± std over seeds);
* adapter-size: rows = bottleneck size (hidden size // reduction factor) and the `lines` variants, columns = tasks.

The figures of the same numbers are drawn by experiments/analysis_figures.py.
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapterfusion.adapters.config import AdapterConfig
from adapterfusion.errors import ConfigError
from adapterfusion.experiments.analyses import (
    ADAPTER_SIZE,
    ANALYSES_KEY,
    INIT_SCALE,
    SPAN_ABLATION,
    ablation_variant,
    sweep_analysis_name,
)
from adapterfusion.experiments.report import MISSING, Cell, Report, Table, score_cell
from adapterfusion.experiments.span_ablation import SpanAblation
from adapterfusion.experiments.store import JobRecord, ResultsStore
from adapterfusion.experiments.sweep import number_text
from adapterfusion.io.atomic import atomic_write_json
from adapterfusion.training.errors import RunFileError
from adapterfusion.training.run_files import CONFIG_FILE, read_json


@dataclass
class AnalysisResults:
    """The experiment's analyses (as its spec records them), each span-ablation's results by variant, task and seed,
    and the encoder's hidden size as its runs recorded it (for bottleneck sizes)."""

    analyses: list[dict[str, Any]] = field(default_factory=list)
    ablations: dict[str, dict[str, list[tuple[int, SpanAblation]]]] = field(default_factory=dict)
    hidden_size: int | None = None

    def ablation(self, variant: str, task: str) -> list[SpanAblation]:
        return [result for _, result in sorted(self.ablations.get(variant, {}).get(task, []), key=lambda r: r[0])]


def read_analyses(output_dir: str | os.PathLike, store: ResultsStore | None = None) -> AnalysisResults:
    """The analyses of the experiment in `output_dir` and the span-ablation jobs' results found done there."""
    own = store is None
    store = ResultsStore(output_dir, readonly=True) if store is None else store
    try:
        records, spec = store.jobs(), store.recorded_spec()
    finally:
        if own:
            store.close()
    results = AnalysisResults(analyses=list(spec.get(ANALYSES_KEY) or []))
    variants = {ablation_variant(a) for a in results.analyses if a.get("kind") == SPAN_ABLATION}
    for record in records:
        if record.state != "done" or not record.metrics:
            continue
        if record.variant in variants:
            try:
                result = SpanAblation.from_dict(record.metrics)
            except (ConfigError, KeyError, TypeError, ValueError):
                continue  # a damaged record: the report shows what can be read
            results.ablations.setdefault(record.variant, {}).setdefault(record.task, []).append((record.seed, result))
        elif results.hidden_size is None:
            results.hidden_size = _hidden_size(record)
    return results


def _hidden_size(record: JobRecord) -> int | None:
    if not record.run_dir:
        return None
    try:
        config = read_json(Path(record.run_dir) / CONFIG_FILE, "the report leaves its bottleneck sizes out")
    except RunFileError:
        return None
    identity = config.get("encoder_identity") if isinstance(config, dict) else None  # a damaged one: not read
    size = identity.get("hidden_size") if isinstance(identity, dict) else None
    return size if isinstance(size, int) and not isinstance(size, bool) else None


def mean_drops(results: Sequence[SpanAblation]) -> dict[tuple[int, int], float]:
    """Span -> its drop in points, mean over the given seeds' results (NaN where a score is undefined)."""
    spans = results[0].spans if results else {}
    return {span: statistics.mean(r.drop(*span) for r in results) for span in spans}


def ablation_table(variant: str, task: str, results: Sequence[SpanAblation]) -> Table:
    """The triangular table of one adapter set on one task: cell (first, last) = mean drop in points."""
    layers = results[0].num_layers
    drops = mean_drops(results)
    cells = {
        (f"first {i}", f"last {j}"): Cell(value, n=len(results), text=_points(value)) for (i, j), value in drops.items()
    }
    metric = results[0].metric
    baseline = statistics.mean(100.0 * r.baseline[metric] for r in results)
    singles = [drops[(i, i)] for i in range(layers)]
    notes = (
        f"Dev {metric} with no layer ablated: {baseline:.2f} ({results[0].examples} dev examples, "
        f"{len(results)} seed(s)); each cell is the change in points with the adapter removed from layers "
        f"first..last (0-based); '{MISSING}': no span.",
        f"All layers removed (span 0..{layers - 1}, the frozen encoder under the trained head): "
        f"{_points(drops[(0, layers - 1)])}. One layer removed: from {_points(max(singles))} to "
        f"{_points(min(singles))} (mean {_points(statistics.mean(singles))}).",
    )
    return Table(
        id=f"{variant}_{task}",
        title=f"Span ablation ({variant}, {task}): change in dev {metric} when the adapter is removed from a span",
        rows=tuple(f"first {i}" for i in range(layers)),
        columns=tuple(f"last {j}" for j in range(layers)),
        cells=cells,
        notes=notes,
        row_header="first \\ last",
    )


def _points(value: float) -> str:
    return "undefined" if math.isnan(value) else f"{value:+.1f}"


def sweep_variants(report: Report, group: str, key: str) -> list[tuple[Any, str]]:
    """(swept value of `key`, variant id) of the sweep `group`'s variants, ordered by the value."""
    found = [
        (variant["sweep"]["settings"][key], variant["id"])
        for variant in report.variants
        if (variant.get("sweep") or {}).get("group") == group and key in variant["sweep"]["settings"]
    ]
    return sorted(found, key=lambda item: float(item[0]))


def _task_columns(report: Report, variants: Sequence[str]) -> tuple[str, ...]:
    return tuple(t for t in report.tasks if any(report.scores.get(v, {}).get(t) for v in variants))


def init_scale_table(report: Report, analysis: dict[str, Any], table_id: str = "init_scale") -> Table | None:
    """Dev score per swept init std (rows) and task (columns); None before any run of the sweep is done."""
    points = sweep_variants(report, analysis["sweep"], "init_std")
    columns = _task_columns(report, [v for _, v in points])
    if not columns:
        return None
    rows = {f"init std {number_text(value)}": variant for value, variant in points}
    title = f"Initialisation scale ({analysis['sweep']}): dev score against the adapter's init std"
    return _score_table(report, table_id, title, rows, columns, _metric_note(report, columns), "init std")


def bottleneck_sizes(report: Report, group: str, hidden_size: int | None) -> list[tuple[int | None, Any, str]]:
    """(bottleneck size, reduction factor, variant id) of the sweep's variants, largest reduction factor first
    (smallest bottleneck); the size is None when no run recorded the hidden size. A reduction factor that leaves no
    bottleneck for that hidden size is left out (unused_factors): no run of it can have trained, and it failed the
    whole report when a Hub encoder's hidden size was unknown as the file was read."""
    points = sorted(sweep_variants(report, group, "reduction_factor"), key=lambda item: -float(item[0]))
    out: list[tuple[int | None, Any, str]] = []
    for rf, variant in points:
        try:
            size = None if hidden_size is None else AdapterConfig(reduction_factor=rf).bottleneck_size(hidden_size, 0)
        except ConfigError:
            continue
        out.append((size, rf, variant))
    return out


def unused_factors(report: Report, group: str, hidden_size: int | None) -> list[Any]:
    """The sweep's reduction factors that bottleneck_sizes leaves out: no adapter of them fits the hidden size."""
    kept = {variant for _, _, variant in bottleneck_sizes(report, group, hidden_size)}
    return [rf for rf, variant in sweep_variants(report, group, "reduction_factor") if variant not in kept]


def adapter_size_table(
    report: Report, analysis: dict[str, Any], hidden_size: int | None, table_id: str = "adapter_size"
) -> Table | None:
    """Dev score per bottleneck size of the sweep and per `lines` variant (rows) and task (columns)."""
    points = bottleneck_sizes(report, analysis["sweep"], hidden_size)
    rows = {f"size {'?' if m is None else m} (rf {number_text(rf)})": v for m, rf, v in points}
    rows.update({line: line for line in analysis.get("lines", [])})
    columns = _task_columns(report, list(rows.values()))
    if not columns:
        return None
    title = f"Adapter size ({analysis['sweep']}): dev score against the bottleneck size"
    note = _metric_note(report, columns) + f" Hidden size {hidden_size}; size = hidden size // rf."
    unused = unused_factors(report, analysis["sweep"], hidden_size)
    if unused:
        shown = ", ".join(number_text(rf) for rf in unused)
        note += f" Left out (no bottleneck for hidden size {hidden_size}, so no run of it can train): rf {shown}."
    return _score_table(report, table_id, title, rows, columns, note, "variant")


def _score_table(
    report: Report, table_id: str, title: str, rows: dict[str, str], columns: tuple[str, ...], note: str, header: str
) -> Table:
    """A table of each row's variant's dev score (mean ± sd over seeds) per task column: both sweep analyses'."""
    return Table(
        id=table_id,
        title=title,
        rows=tuple(rows),
        columns=columns,
        cells={
            (row, task): score_cell(report.scores.get(variant, {}).get(task, []))
            for row, variant in rows.items()
            for task in columns
        },
        notes=(note,),
        row_header=header,
    )


def _metric_note(report: Report, tasks: Sequence[str]) -> str:
    metrics = ", ".join(f"{t}: {report.metrics.get(t, '?')}" for t in tasks)
    lower = [t for t in tasks if report.lower_is_better(t)]
    as_is = f" {', '.join(lower)}: as recorded, not in percent; lower is better." if lower else ""
    return f"Best-checkpoint dev score in percent, mean ± std over seeds ({metrics}).{as_is}"


SPAN_ABLATION_FILE = "span_ablation.json"


def _portable(source: dict[str, Any], output_dir: Path) -> dict[str, Any]:
    """A record's source with the paths a clone would write the same: a run folder relative to the output dir, a
    zoo entry as <encoder key>/<task>/<setup>/seed-<n> inside its store (runs before 2026-11-26 recorded both as
    absolute paths)."""
    out = dict(source)
    if isinstance(out.get("run_dir"), str) and Path(out["run_dir"]).is_absolute():
        run_dir = Path(out["run_dir"])
        if run_dir.is_relative_to(output_dir.resolve()):
            out["run_dir"] = run_dir.relative_to(output_dir.resolve()).as_posix()
    if isinstance(out.get("entry"), str) and Path(out["entry"]).is_absolute():
        out["entry"] = Path(*Path(out["entry"]).parts[-4:]).as_posix()
    return out


def write_ablation_records(results: AnalysisResults, directory: str | os.PathLike) -> Path | None:
    """The span-ablation results behind the tables (every span's metrics, per variant, task and seed) as
    `directory`/span_ablation.json, so a committed report carries its raw numbers; None without any."""
    if not results.ablations:
        return None
    records = {
        variant: {
            task: [
                {"seed": seed, **result.to_dict(), "source": _portable(result.source, Path(directory).parent)}
                for seed, result in sorted(runs, key=lambda run: run[0])
            ]
            for task, runs in by_task.items()
        }
        for variant, by_task in results.ablations.items()
    }
    path = Path(directory) / SPAN_ABLATION_FILE
    atomic_write_json(path, records)
    return path


def analysis_tables(report: Report, results: AnalysisResults) -> list[Table]:
    """Every table the analyses' finished results allow, in the order the experiment lists the analyses."""
    tables: list[Table | None] = []
    for analysis in results.analyses:
        kind = analysis.get("kind")
        if kind == SPAN_ABLATION:
            variant = ablation_variant(analysis)
            tables += [
                ablation_table(variant, task, results.ablation(variant, task))
                for task in analysis.get("tasks", [])
                if results.ablation(variant, task)
            ]
        elif kind == INIT_SCALE:
            tables.append(init_scale_table(report, analysis, sweep_analysis_name(analysis, results.analyses)))
        elif kind == ADAPTER_SIZE:
            name = sweep_analysis_name(analysis, results.analyses)
            tables.append(adapter_size_table(report, analysis, results.hidden_size, name))
    return [t for t in tables if t is not None]
