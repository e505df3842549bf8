"""Model selection on the dev set, as Houlsby et al. 2019 choose their "Adapters (8-256)" and "Adapters (64)" rows:
per task and seed, of the variants a `select` rule admits (experiments/sweep.py), the one with the best dev score:
the highest, or the least for a lower-is-better metric (a generation task's answer_loss), as training's checkpoint
choice decides.

Only dev scores are looked at (a report holds no other), and a further dev set of a task (MNLI mismatched) reports
the variant that the task's main dev set (MNLI matched) chose, so it never selects. An undefined score (NaN: a
correlation of a constant prediction) never wins; a tie goes to the variant listed first in the experiment file.

Two tables come of it: "Houlsby Table 1" (a row per rule: a column per task, the mean, and the trained parameters per
task in % of the encoder's) and the settings each choice had, per task and seed.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from adapterfusion.experiments.report import MISSING, Cell, Report, Table, direction_note, mean_cell, score_cell
from adapterfusion.experiments.sweep import SWEEP_KEY, ordered_keys, same_setting, setting_label

PARAMETERS_COLUMN = "params / task (%)"
MEAN_COLUMN = "mean"


@dataclass(frozen=True)
class Choice:
    """The variant chosen for one task and seed, and its dev score in percent, or as recorded when lower is better
    (NaN: undefined). `missing`: the rule's variants with no dev score for that task and seed (not finished, or no
    score recorded), which the choice could not consider."""

    seed: int
    variant: str
    score: float
    missing: tuple[str, ...] = ()


def candidates(report: Report, rule: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The report's variants that `rule` admits: those of its sweep whose settings match the fixed ones."""
    fixed = {k: v for k, v in rule.items() if k != SWEEP_KEY}
    return [
        v
        for v in report.variants
        if (v.get("sweep") or {}).get("group") == rule[SWEEP_KEY]
        and all(
            k in v["sweep"]["settings"] and same_setting(v["sweep"]["settings"][k], value) for k, value in fixed.items()
        )
    ]


def _by_seed(report: Report, variant: str, row: str) -> dict[int, float]:
    return dict(report.scores.get(variant, {}).get(row, []))


def select(report: Report, rule: Mapping[str, Any]) -> dict[str, list[Choice]]:
    """Row (task, or a task's further dev set) -> the chosen variant per seed, chosen on the task's main dev score."""
    ids = [v["id"] for v in candidates(report, rule)]
    chosen: dict[str, list[Choice]] = {}
    for task in report.tasks:
        if task in report.extra_rows:
            continue
        seeds = sorted({seed for vid in ids for seed in _by_seed(report, vid, task)})
        for seed in seeds:
            scored = [(vid, _by_seed(report, vid, task).get(seed)) for vid in ids]
            finite = [(vid, s) for vid, s in scored if s is not None and math.isfinite(s)]
            if finite:
                pick = min if report.lower_is_better(task) else max  # both keep the first of equal scores
                best = pick(finite, key=lambda pair: pair[1])
            else:  # every candidate's score is undefined: the row says so
                best = next((vid, s) for vid, s in scored if s is not None)
            missing = tuple(vid for vid, s in scored if s is None)
            chosen.setdefault(task, []).append(Choice(seed, best[0], best[1], missing))
            for row, base in report.extra_rows.items():
                extra = _by_seed(report, best[0], row).get(seed) if base == task else None
                if extra is not None:
                    chosen.setdefault(row, []).append(Choice(seed, best[0], extra))
    return chosen


def _missing_notes(picks: Mapping[str, Mapping[str, list[Choice]]]) -> list[str]:
    """A note per rule and task whose choice was made without some of its variants (a job not finished, or done
    without a dev score): the row reads as a choice among all of them otherwise."""
    notes = []
    for name, by_row in picks.items():
        for task, choices in by_row.items():
            partial = [c for c in choices if c.missing]
            if partial:
                which = "; ".join(f"seed {c.seed}: without {', '.join(c.missing)}" for c in partial)
                notes.append(f"{name}, {task}: chosen among the variants with a dev score only ({which}).")
    return notes


def settings_text(report: Report, variant: str) -> str:
    """A chosen variant's swept settings as its id writes them ('rf6 lr3e-3 ep2'), else its id."""
    settings = (report.variant(variant).get("sweep") or {}).get("settings") or {}
    return " ".join(setting_label(k, settings[k]) for k in ordered_keys(settings)) or variant


def parameter_share(report: Report, variant: str, task: str, seed: int) -> float | None:
    """Trained parameters of one run (its head included) in % of the encoder's, from its metrics.json."""
    counts = report.run_parameters.get((variant, task, seed))
    if counts is None or not counts[1]:
        return None
    return 100.0 * counts[0] / counts[1]


def selection_tables(report: Report, rules: Mapping[str, Mapping[str, Any]] | None = None) -> list[Table]:
    """The Houlsby-shaped table and the table of chosen settings for `rules` (default: the experiment's `select`),
    or none without rules. write_report adds them to the report's tables."""
    rules = report.select if rules is None else rules
    if not rules:
        return []
    picks = {name: select(report, rule) for name, rule in rules.items()}
    columns = (*report.tasks, MEAN_COLUMN, PARAMETERS_COLUMN)
    cells: dict[tuple[str, str], Cell] = {}
    for name, by_row in picks.items():
        means = {}
        for row in report.tasks:
            runs = [(c.seed, c.score) for c in by_row.get(row, [])]
            cells[(name, row)] = score_cell(runs)
            finite = [s for _, s in runs if math.isfinite(s)]
            if finite:
                means[row] = statistics.mean(finite)
        cells[(name, MEAN_COLUMN)] = mean_cell(means, report.averaged(report.tasks))
        shares = [
            share
            for task in report.tasks
            if task not in report.extra_rows
            for c in by_row.get(task, [])
            for share in [parameter_share(report, c.variant, task, c.seed)]
            if share is not None
        ]
        share = statistics.mean(shares) if shares else None
        cells[(name, PARAMETERS_COLUMN)] = Cell(share, None, len(shares), MISSING if share is None else f"{share:.2f}%")
    notes = (
        "Each row chooses, per task and seed, the variant of its sweep with the best dev score (the main dev set: "
        "a further dev set such as MNLI mismatched shows the variant that MNLI matched chose); cells are the "
        "chosen runs' dev scores in percent, mean ± sample std over seeds. These are dev scores of dev-selected "
        "runs, so they are optimistic; the paper reports the GLUE test server's scores of its choices.",
        f"{PARAMETERS_COLUMN}: trained parameters of the chosen runs (head included), in % of the encoder's, "
        "averaged over tasks and seeds. Mean: the mean of the row's task columns.",
        *direction_note(report, report.tasks),
        *_missing_notes(picks),
    )
    houlsby = Table(
        "houlsby_table1",
        "Houlsby Table 1: dev results of the variants selected on dev",
        tuple(rules),
        columns,
        cells,
        notes=notes,
        row_header="method",
    )
    chosen_cells: dict[tuple[str, str], Cell] = {}
    base_tasks = tuple(t for t in report.tasks if t not in report.extra_rows)
    for name, by_row in picks.items():
        for task in base_tasks:
            picked = by_row.get(task, [])
            text = "; ".join(f"seed {c.seed}: {settings_text(report, c.variant)}" for c in picked) or MISSING
            chosen_cells[(task, name)] = Cell(None, None, len(picked), text)
    settings = Table(
        "selected_settings",
        "Settings chosen on dev, per task and seed",
        base_tasks,
        tuple(rules),
        chosen_cells,
        notes=("rf = reduction factor (bottleneck = hidden size / rf), lr = learning rate, ep = epochs.",),
    )
    return [houlsby, settings]
