"""An experiment's report on disk: `write_report(output_dir)` builds it from the results store and run folders
(experiments/report.py) and writes `<output_dir>/report/`: tables.md, one CSV per table (table1.csv, table2.csv,
table3.csv), tables.json and, with matplotlib installed, the figures (experiments/figures.py).
"""

from __future__ import annotations

import os
from pathlib import Path

from adapterfusion.experiments.errors import ExperimentError
from adapterfusion.experiments.report import Report, build_report
from adapterfusion.experiments.store import ResultsStore
from adapterfusion.io.atomic import atomic_write_json, atomic_write_text

REPORT_DIR = "report"


def _writable_report_dir(output_dir: Path) -> Path:
    """`<output_dir>/report/`, made if missing; a folder this process cannot write to (a read-only results folder)
    is refused before anything is written."""
    directory = output_dir / REPORT_DIR
    try:
        directory.mkdir(parents=True, exist_ok=True)
        writable = os.access(directory, os.W_OK)
    except OSError as err:
        writable, reason = False, err.strerror
    else:
        reason = "it is read-only"
    if not writable:
        raise ExperimentError(
            f"cannot write the report into {directory} ({reason}); copy {output_dir} to a folder "
            "you can write to and run `adapterfusion report` on the copy"
        )
    return directory


def write_report(output_dir: str | os.PathLike, store: ResultsStore | None = None, figures: bool = True) -> Report:
    """Build the report and write `<output_dir>/report/`: tables.md, one CSV per table, tables.json and, with
    matplotlib installed, the figures. Returns the Report (its `figures` lists the PNGs written)."""
    report = build_report(output_dir, store)
    directory = _writable_report_dir(Path(output_dir))
    if figures:
        try:
            from adapterfusion.experiments.figures import write_figures
        except ImportError as err:
            report.figure_notes.append(f"figures skipped: {err} (pip install 'adapterfusion[plots]')")
        else:
            write_figures(report, directory)
    for table in report.tables:
        atomic_write_text(directory / f"{table.id}.csv", table.csv())
    atomic_write_json(directory / "tables.json", report.to_dict())
    atomic_write_text(directory / "tables.md", report.markdown())
    return report
