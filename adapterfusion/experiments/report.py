"""The report of an experiment, made only from its results store and run folders (never from live models):

* Table 1 — rows = tasks, columns = setup variants, cell = mean ± std over seeds of the dev metric in percent,
  plus a mean row (Pfeiffer et al. Table 1);
* Table 2 — each fusion variant against the variant whose adapters it fuses: per-task delta with ↗ (> +0.3),
  ↘ (< −0.3) or →, and an "Improved k/n" row (Table 2 there);
* a metric that is best at its least (tasks/spec.py's LOWER_IS_BETTER, the set training's checkpoint choice uses:
  a generation task's answer_loss) is shown as it is, not ×100, left out of the mean rows, and compared with the
  sign flipped (↗ marks a decrease); selection.py picks its minimum;
* Table 3 — adapter variants by reduction factor, when more than one ran (appendix Table 3);
* figures (adapterfusion.experiments.figures) when matplotlib is installed.

`build_report` makes the tables in memory; experiments/report_files.py's `write_report` writes them and the figures
to `<output_dir>/report/`. Std is the sample standard deviation (n − 1); a cell with one seed has no ±.
"""

from __future__ import annotations

import csv
import io
import math
import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapterfusion._validation import short_repr
from adapterfusion.analysis.fusion_attention import FUSION_ATTENTION_FILE, FusionActivation, load_fusion_activation
from adapterfusion.errors import SerializationError
from adapterfusion.experiments.analyses import SPAN_ABLATION
from adapterfusion.experiments.paths import relative_to_experiment_file
from adapterfusion.experiments.store import ResultsStore
from adapterfusion.tasks.extra_dev import extra_dev_label
from adapterfusion.tasks.spec import LOWER_IS_BETTER
from adapterfusion.training.errors import RunFileError
from adapterfusion.training.run_files import CONFIG_FILE, read_json

TREND_THRESHOLD = 0.3  # percentage points (Pfeiffer et al. Table 2)
MISSING = "–"
UNDEFINED = "undefined"  # a done run's score that has no value: a correlation of a constant prediction
CARVED_MARK = "†"


def trend_arrow(delta: float) -> str:
    """↗ above +0.3 points, ↘ below −0.3, → otherwise (the boundary itself is →). The delta is rounded to 1e-9
    first, so 70.3 − 70.0 counts as exactly 0.3 despite float error."""
    rounded = round(delta, 9)
    return "↗" if rounded > TREND_THRESHOLD else "↘" if rounded < -TREND_THRESHOLD else "→"


@dataclass(frozen=True)
class Cell:
    """One table cell: `value` (a mean in percent, or a delta in points), `std` over `n` seeds (None when n < 2),
    and the text shown in Markdown and CSV."""

    value: float | None
    std: float | None = None
    n: int = 0
    text: str = MISSING


@dataclass(frozen=True)
class Table:
    id: str
    title: str
    rows: tuple[str, ...]
    columns: tuple[str, ...]
    cells: dict[tuple[str, str], Cell]
    row_marks: dict[str, str] = field(default_factory=dict)  # row -> footnote mark shown after its label
    notes: tuple[str, ...] = ()
    row_header: str = "task"  # the first column's heading in Markdown

    def cell(self, row: str, column: str) -> Cell:
        return self.cells.get((row, column), Cell(None))

    def markdown(self) -> str:
        header = [self.row_header, *self.columns]
        lines = [
            f"### {self.title}",
            "",
            "| " + " | ".join(header) + " |",
            "|" + "|".join(["---"] + [":---:"] * len(self.columns)) + "|",
        ]
        for row in self.rows:
            label = row + self.row_marks.get(row, "")
            lines.append("| " + " | ".join([label, *(self.cell(row, c).text for c in self.columns)]) + " |")
        if self.notes:
            lines += ["", *self.notes]
        return "\n".join(lines) + "\n"

    def csv(self) -> str:
        """Long format, one line per cell: row, column, value, std, n, text (the Markdown cell)."""
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(["row", "column", "value", "std", "n", "text"])
        for row in self.rows:
            for column in self.columns:
                cell = self.cell(row, column)
                writer.writerow(
                    [
                        row,
                        column,
                        "" if cell.value is None else repr(cell.value),
                        "" if cell.std is None else repr(cell.std),
                        cell.n,
                        cell.text,
                    ]
                )
        return buffer.getvalue()

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "rows": list(self.rows),
            "columns": list(self.columns),
            "row_marks": dict(self.row_marks),
            "notes": list(self.notes),
            "cells": [
                {"row": r, "column": c, "value": cell.value, "std": cell.std, "n": cell.n, "text": cell.text}
                for r in self.rows
                for c in self.columns
                for cell in [self.cell(r, c)]
            ],
        }


@dataclass
class Report:
    """Everything the tables and figures are made of. scores[variant][task] = [(seed, dev metric in percent, or as
    recorded when lower is better)];
    parameters[variant] = trained parameter counts of its runs; activations[variant][task] = one
    FusionActivation per seed; carved[task] = how its missing splits were made."""

    name: str
    output_dir: Path
    tasks: tuple[str, ...]
    variants: tuple[dict[str, Any], ...]
    scores: dict[str, dict[str, list[tuple[int, float]]]]
    metrics: dict[str, str]
    parameters: dict[str, list[int]]
    activations: dict[str, dict[str, list[FusionActivation]]]
    carved: dict[str, dict[str, Any]]
    job_counts: dict[str, int]
    warnings: list[str] = field(default_factory=list)  # "<variant>/<task> seed <s>: <message>", from metrics.json
    tables: list[Table] = field(default_factory=list)
    figures: list[Path] = field(default_factory=list)
    figure_notes: list[str] = field(default_factory=list)
    source: str | None = None  # the experiment file the runner recorded, if any
    extra_rows: dict[str, str] = field(default_factory=dict)  # row of a further dev set -> its task (MNLI mm)
    run_parameters: dict[tuple[str, str, int], tuple[int, int]] = field(default_factory=dict)  # trainable, encoder
    select: dict[str, dict[str, Any]] = field(default_factory=dict)  # the experiment's `select` rules (sweep.py)

    @property
    def recorded_output_dir(self) -> str:
        """The output dir as the experiment file writes it (relative to the file's folder), so a report made in
        another clone or from another working dir says the same; as given for an experiment with no file."""
        if not self.source:
            return str(self.output_dir)
        return relative_to_experiment_file(str(self.output_dir.resolve()), self.source) or str(self.output_dir)

    def variant(self, variant_id: str) -> dict[str, Any]:
        return next(v for v in self.variants if v["id"] == variant_id)

    def table(self, table_id: str) -> Table | None:
        return next((t for t in self.tables if t.id == table_id), None)

    def lower_is_better(self, row: str) -> bool:
        """Whether a row's (a task's, or a further dev set's) metric is best at its least, as training's checkpoint
        choice decides it (LOWER_IS_BETTER): its scores are as recorded, not in percent."""
        return self.metrics.get(self.extra_rows.get(row, row)) in LOWER_IS_BETTER

    def averaged(self, rows: Sequence[str]) -> tuple[str, ...]:
        """The rows a mean row averages: those scored in percent (a loss is not averaged with accuracies)."""
        return tuple(row for row in rows if not self.lower_is_better(row))

    def task_means(self, variant_id: str) -> dict[str, float]:
        """Mean over seeds per task, for the tasks this variant has results on."""
        return {
            task: statistics.mean(finite)
            for task, runs in self.scores.get(variant_id, {}).items()
            for finite in [[v for _, v in runs if math.isfinite(v)]]
            if finite
        }

    def markdown(self) -> str:
        done, total = self.job_counts.get("done", 0), sum(self.job_counts.values())
        lines = [
            f"# Report: {self.name}",
            "",
            f"Made from {done} of {total} jobs done in `{self.recorded_output_dir}` (`adapterfusion report`).",
            "",
        ]
        lines += [table.markdown() for table in self.tables]
        if self.warnings:
            lines += ["### Warnings", "", "Runs whose dev results need a second look before the tables are read:", ""]
            lines += [f"- {warning}" for warning in self.warnings]
            lines.append("")
        if self.carved:
            lines.append("Splits:")
            lines += [f"- {CARVED_MARK} {task}: {_describe_carve(info)}" for task, info in self.carved.items()]
            lines.append("")
        if self.figures or self.figure_notes:
            lines += ["## Figures", ""]
            lines += [f"![{p.stem}]({p.name})" for p in self.figures]
            lines += [f"- {note}" for note in self.figure_notes]
            lines.append("")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "output_dir": self.recorded_output_dir,
            "tasks": list(self.tasks),
            "variants": list(self.variants),
            "metrics": self.metrics,
            "job_counts": self.job_counts,
            "carved": self.carved,
            "warnings": self.warnings,
            "tables": [t.to_dict() for t in self.tables],
            "figures": [p.name for p in self.figures],
            "figure_notes": self.figure_notes,
            "scores": {
                v: {t: [{"seed": s, "value": x} for s, x in runs] for t, runs in by_task.items()}
                for v, by_task in self.scores.items()
            },
        }


# ---- reading the results -------------------------------------------------------------------------------------
def _dev_score(metrics: dict[str, Any]) -> tuple[str, float] | None:
    """(metric name, best-checkpoint dev value) of a metrics.json record: in percent, but a lower-is-better metric
    (a loss) as it is."""
    key, best = metrics.get("metric_for_best"), metrics.get("best")
    if not isinstance(key, str) or not key or not isinstance(best, dict):
        return None
    value = best.get(key, best.get(f"eval_{key}"))
    if isinstance(value, bool) or not isinstance(value, (int, float)):  # true is no score (JSON reads it as 1)
        return None
    scale = 1.0 if key in LOWER_IS_BETTER else 100.0
    score = scale * float(value)  # 1e308 in percent is inf too
    return None if math.isinf(score) else (key, score)  # NaN stays: an undefined score (a constant prediction's)


def _part(report: Report, record: Any, key: str) -> dict[str, Any]:
    """The mapping a done job's metrics hold under `key` (parameters, extra_dev), {} when absent; one of another
    shape (a metrics record edited by hand, or damaged) is left out with a warning, not a traceback."""
    value = record.metrics.get(key)
    if value is None or isinstance(value, dict):
        return value or {}
    report.warnings.append(
        f"{record.variant}/{record.task} seed {record.seed}: its metrics' {key!r} is {short_repr(value)}, not a "
        "mapping; left out of the report"
    )
    return {}


def _read_json(path: Path) -> dict[str, Any] | None:
    """A run's JSON file, or None when it is missing or damaged: the report is made from what can be read."""
    try:
        return read_json(path, "the report leaves this run's details out")
    except RunFileError:
        return None


def build_report(output_dir: str | os.PathLike, store: ResultsStore | None = None) -> Report:
    """Collect the done jobs' metrics and run folders of the experiment in `output_dir` and build its tables."""
    output_dir = Path(output_dir)
    own = store is None
    store = ResultsStore(output_dir, readonly=True) if store is None else store
    try:
        meta, records, counts, spec = store.meta(), store.jobs(), store.counts(), store.recorded_spec()
    finally:
        if own:
            store.close()
    tasks = tuple(spec.get("tasks") or dict.fromkeys(r.task for r in records))
    variants = tuple(
        spec.get("variants")
        or [
            {"id": v, "setup": s, "options": {}, "adapter_variant": None}
            for v, s in dict.fromkeys((r.variant, r.setup) for r in records)
        ]
    )
    report = Report(
        name=meta.get("name", output_dir.name),
        output_dir=output_dir,
        source=meta.get("source") or None,
        tasks=tasks,
        variants=variants,
        scores={},
        metrics={},
        parameters={},
        activations={},
        carved={},
        job_counts={k: n for k, n in counts.items() if n},
    )
    for record in records:
        if record.state != "done" or not record.metrics:
            continue
        for task, metrics in record.task_metrics().items():  # a multi-task job scores each of its tasks
            score = _dev_score(metrics)
            if score is not None:
                report.metrics.setdefault(task, score[0])
                report.scores.setdefault(record.variant, {}).setdefault(task, []).append((record.seed, score[1]))
            elif record.setup != SPAN_ABLATION:  # said: its cell would show the other seeds' mean as if complete
                report.warnings.append(
                    f"{record.variant}/{task} seed {record.seed}: done, but its metrics hold no finite dev "
                    f"{metrics.get('metric_for_best') or 'score'} (best: {short_repr(metrics.get('best'))}); left out "
                    "of the tables"
                )
        for split, extra in _part(report, record, "extra_dev").items():  # MNLI mismatched: a row of its own
            score = _dev_score({"metric_for_best": record.metrics.get("metric_for_best"), "best": extra})
            if score is None:  # said, as for the main dev set: the row would show the other seeds' mean
                report.warnings.append(
                    f"{record.variant}/{record.task} seed {record.seed}: done, but its further dev set {split!r} "
                    f"holds no finite dev {record.metrics.get('metric_for_best') or 'score'} ({short_repr(extra)}); "
                    "left out of the tables"
                )
                continue
            row = extra_dev_label(record.task, split)
            report.extra_rows[row] = record.task
            report.scores.setdefault(record.variant, {}).setdefault(row, []).append((record.seed, score[1]))
        found = record.metrics.get("warnings")
        report.warnings += [
            f"{record.variant}/{record.task} seed {record.seed}: {message}"
            for message in (found if isinstance(found, list) else [])
            if isinstance(message, str)
        ]
        parameters = _part(report, record, "parameters")
        trainable, encoder = parameters.get("trainable"), parameters.get("encoder")
        if isinstance(trainable, int) and not isinstance(trainable, bool):
            report.parameters.setdefault(record.variant, []).append(trainable)
            if isinstance(encoder, int) and not isinstance(encoder, bool):
                report.run_parameters[(record.variant, record.task, record.seed)] = (trainable, encoder)
        run_dir = Path(record.run_dir) if record.run_dir else None
        if run_dir is None:
            continue
        config = _read_json(run_dir / CONFIG_FILE)
        data = config.get("data") if isinstance(config, dict) else None
        for info in data if isinstance(data, list) else [data]:  # a multi-task run lists one per task
            if not isinstance(info, dict):  # none, or a record of another shape: nothing to say of its splits
                continue
            carve, task = info.get("carve_out"), info.get("task", record.task)
            if isinstance(carve, dict) and carve and isinstance(task, str) and task not in report.carved:
                report.carved[task] = carve
        if (run_dir / FUSION_ATTENTION_FILE).is_file():
            try:
                activation = load_fusion_activation(run_dir / FUSION_ATTENTION_FILE)
            except SerializationError as err:  # said, or the figure's mean over seeds would drop the run unseen
                report.figure_notes.append(
                    f"{record.variant}/{record.task} seed {record.seed}: left out of the fusion attention figure, "
                    f"as its {FUSION_ATTENTION_FILE} cannot be read ({err})"
                )
                continue
            report.activations.setdefault(record.variant, {}).setdefault(record.task, []).append(activation)
    if report.extra_rows:  # each further dev set's row right after its task's
        report.tasks = tuple(
            row for task in report.tasks for row in (task, *(r for r, t in report.extra_rows.items() if t == task))
        )
    rules = spec.get("select") or []  # [{"name": row, "sweep": ..., <fixed settings>}, ...], in the file's order
    rules = [{"name": k, **v} for k, v in rules.items()] if isinstance(rules, dict) else rules  # an early dict form
    report.select = {rule["name"]: {k: v for k, v in rule.items() if k != "name"} for rule in rules}
    report.tables = [t for t in (table1(report), table2(report), table3(report)) if t is not None]
    report.warnings = [_as_the_file_writes(warning, spec, report.source) for warning in report.warnings]
    return report


def _as_the_file_writes(message: str, spec: dict[str, Any], source: str | None) -> str:
    """A run's warning with the experiment's absolute data_dir and output_dir as its experiment file writes them
    (relative to its folder): a report committed beside the file then names no folder of the machine it ran on."""
    for key in ("data_dir", "output_dir"):
        path = spec.get(key)
        if isinstance(path, str) and os.path.isabs(path) and path.rstrip("/"):
            message = message.replace(path, relative_to_experiment_file(path, source) or path)
    return message


def _describe_carve(carve: dict[str, Any]) -> str:
    roles = carve.get("carved_roles")
    roles = " and ".join(
        roles if isinstance(roles, list) and roles and all(isinstance(r, str) for r in roles) else ["validation"]
    )
    return (
        f"{roles} carved from its {carve.get('source_split')!r} split ({carve.get('source_size')} rows, "
        f"validation fraction {carve.get('fraction')}, seeded by each run's seed); its dev numbers are on the "
        "carved validation split, not the official dev set"
    )


# ---- the tables --------------------------------------------------------------------------------------------
def score_cell(runs: Sequence[tuple[int, float]]) -> Cell:
    """Mean ± sample std of the seeds' scores; an undefined score (NaN) is left out of both and counted in the
    text, and a cell of undefined scores only reads UNDEFINED."""
    if not runs:
        return Cell(None)
    values = [v for _, v in runs if math.isfinite(v)]
    undefined = f" ({len(runs) - len(values)} {UNDEFINED})" if len(values) < len(runs) else ""
    if not values:
        return Cell(None, None, 0, UNDEFINED)
    mean = statistics.mean(values)
    if len(values) == 1:
        return Cell(mean, None, 1, f"{mean:.2f}{undefined}")
    std = statistics.stdev(values)  # sample std, n - 1
    return Cell(mean, std, len(values), f"{mean:.2f} ± {std:.2f}{undefined}")


def mean_cell(task_means: dict[str, float], tasks: Sequence[str]) -> Cell:
    present = [task_means[t] for t in tasks if t in task_means]
    if not present:
        return Cell(None)
    mean = statistics.mean(present)
    partial = f" ({len(present)}/{len(tasks)} tasks)" if len(present) < len(tasks) else ""
    return Cell(mean, None, len(present), f"{mean:.2f}{partial}")


def _score_table(report: Report, table_id: str, title: str, columns: Sequence[str], notes: Sequence[str]) -> Table:
    cells: dict[tuple[str, str], Cell] = {}
    means = {column: report.task_means(column) for column in columns}
    for column in columns:
        by_task = report.scores.get(column, {})
        for task in report.tasks:
            cells[(task, column)] = score_cell(by_task.get(task, []))
        cells[("mean", column)] = mean_cell(means[column], report.averaged(report.tasks))
    rows: tuple[str, ...] = (*report.tasks, "mean")
    # Columns that ran on different tasks (a setup entry's `tasks`) get a comparable mean over the tasks they share.
    with_results = [column for column in columns if means[column]]
    shared = [t for t in report.averaged(report.tasks) if all(t in means[c] for c in with_results)]
    if shared and any(len(report.averaged(list(means[c]))) > len(shared) for c in with_results):
        shared_row = f"mean ({', '.join(shared)})"
        for column in columns:
            cells[(shared_row, column)] = mean_cell(means[column], shared)
        rows = (*rows, shared_row)
    marks = {task: CARVED_MARK for task in report.tasks if task in report.carved}
    return Table(table_id, title, rows, tuple(columns), cells, marks, tuple(notes))


def direction_note(report: Report, rows: Sequence[str]) -> list[str]:
    """The note on `rows` whose metric is lower-is-better (empty without such rows): shown as it is, not in
    percent, and left out of the means."""
    lower = [row for row in rows if report.lower_is_better(row)]
    if not lower:
        return []
    names = sorted({report.metrics[report.extra_rows.get(row, row)] for row in lower})
    return [
        f"{', '.join(lower)}: dev {'/'.join(names)} as recorded, not in percent; lower is better, so the least "
        "is best (checkpoint and dev selection alike). Left out of the means, which average the scores in percent."
    ]


def _score_notes(report: Report) -> list[str]:
    percent = sorted({m for m in report.metrics.values() if m not in LOWER_IS_BETTER})
    as_is = sorted({m for m in report.metrics.values() if m in LOWER_IS_BETTER})
    what = f"{'/'.join(percent or ['metric'])} in percent" if percent or not as_is else "/".join(as_is)
    notes = [
        f"Dev-set {what}: mean ± sample standard deviation (n − 1) over seeds; a cell "
        f"from one seed shows no ±. The mean row averages the per-task means. {MISSING} = no finished run.",
        *direction_note(report, report.tasks),
    ]
    if report.carved:
        notes.append(f"{CARVED_MARK} splits carved out of the available data (see Splits below).")
    return notes


def table1(report: Report) -> Table:
    return _score_table(
        report,
        "table1",
        "Table 1: dev results per task and setup",
        [v["id"] for v in report.variants],
        _score_notes(report),
    )


def table2(report: Report) -> Table | None:
    """Each fusion variant against the variant whose adapters it fuses; None without fusion variants."""
    pairs = [(v["id"], v["adapter_variant"]) for v in report.variants if v.get("adapter_variant")]
    if not pairs:
        return None
    columns = tuple(f"{fusion} vs {base}" for fusion, base in pairs)
    cells: dict[tuple[str, str], Cell] = {}
    for column, (fusion, base) in zip(columns, pairs, strict=True):
        ours, theirs = report.task_means(fusion), report.task_means(base)
        improved = compared = 0
        for task in report.tasks:
            if task not in ours or task not in theirs:
                cells[(task, column)] = Cell(None)
                continue
            delta = ours[task] - theirs[task]
            arrow = trend_arrow(-delta if report.lower_is_better(task) else delta)  # a lower loss is better
            compared += 1
            improved += arrow == "↗"
            cells[(task, column)] = Cell(delta, None, 1, f"{delta:+.2f} {arrow}")
        cells[("Improved", column)] = Cell(
            float(improved), None, compared, f"{improved}/{compared}" if compared else MISSING
        )
    notes = [
        f"Difference of the per-task means in percentage points: ↗ > +{TREND_THRESHOLD}, ↘ < −{TREND_THRESHOLD}, "
        f"→ otherwise. Improved k/n: tasks with ↗ among the n tasks both setups finished."
    ]
    lower = [task for task in report.tasks if report.lower_is_better(task)]
    if lower:
        notes.append(
            f"{', '.join(lower)}: lower is better, so the difference is in the metric's own units and its arrow is "
            f"flipped: ↗ marks a decrease of more than {TREND_THRESHOLD} (an improvement), ↘ an increase."
        )
    marks = {task: CARVED_MARK for task in report.tasks if task in report.carved}
    return Table(
        "table2",
        "Table 2: fusion vs the adapters it fuses",
        (*report.tasks, "Improved"),
        columns,
        cells,
        marks,
        tuple(notes),
    )


def table3(report: Report) -> Table | None:
    """Adapter variants side by side by reduction factor, for every setup that ran more than one; else None."""
    by_setup: dict[str, list[tuple[float, str]]] = {}
    for variant in report.variants:
        rf = (variant.get("options") or {}).get("reduction_factor")
        if isinstance(rf, (int, float)) and not variant.get("adapter_variant"):
            by_setup.setdefault(variant["setup"], []).append((float(rf), variant["id"]))
    columns = [vid for entries in by_setup.values() if len({rf for rf, _ in entries}) > 1 for _, vid in sorted(entries)]
    if not columns:
        return None
    return _score_table(report, "table3", "Table 3: adapters by reduction factor", columns, _score_notes(report))
