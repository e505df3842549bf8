"""An experiment's report on disk: `write_report(output_dir)` builds it from the results store and run folders
(experiments/report.py) and writes `<output_dir>/report/`: tables.md, one CSV per table (table1.csv, table2.csv,
table3.csv), tables.json and, with matplotlib installed, the figures (experiments/figures.py); an experiment's
`analyses` add their tables and figures (experiments/analysis_report.py, analysis_figures.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from adapterfusion.experiments.analysis_figures import write_analysis_figures
from adapterfusion.experiments.analysis_report import (
    SPAN_ABLATION_FILE,
    analysis_tables,
    read_analyses,
    write_ablation_records,
)
from adapterfusion.experiments.errors import ExperimentError
from adapterfusion.experiments.figures import write_figures
from adapterfusion.experiments.report import Report, build_report
from adapterfusion.experiments.selection import selection_tables
from adapterfusion.experiments.store import ResultsStore, check_results_dir
from adapterfusion.io.atomic import atomic_write_json, atomic_write_text, folder_lock
from adapterfusion.io.paths import check_writable_folder

REPORT_DIR = "report"
REPORT_FILES = ("tables.md", "tables.json", "table1.csv", "table2.csv", "table3.csv")


def _writable_report_dir(output_dir: Path) -> Path:
    """`<output_dir>/report/`, checked before the report is built: anything but a folder this process can write in
    there (a file, a read-only results folder) is refused (io/paths.py). report/ is ours, each report rewrites its
    files, unless it is a link: we make it a plain folder, so a link leads to a folder of the user's, which may hold
    files of our names (tables.md) and is written into only while it is empty."""
    linked = (output_dir / REPORT_DIR).is_symlink()
    return check_writable_folder(
        output_dir / REPORT_DIR,
        "the report folder",
        writes=REPORT_FILES,
        ours=lambda folder: not linked,
        only_ours=f"a folder we made (it is a link to {os.path.realpath(output_dir / REPORT_DIR)!r})"
        if linked
        else None,
        error=ExperimentError,
        fix=f"copy {output_dir} to a folder you can write to and run `adapterfusion report` on the copy",
    )


def write_report(output_dir: str | os.PathLike, store: ResultsStore | None = None, figures: bool = True) -> Report:
    """Build the report and write `<output_dir>/report/`: tables.md, one CSV per table, tables.json and, with
    matplotlib installed, the figures. Returns the Report (its `figures` lists the PNGs written)."""
    if store is None and not os.path.isdir(output_dir):  # the experiment file or a missing folder: said as such
        check_results_dir(output_dir)
    directory = _writable_report_dir(Path(output_dir))
    report = build_report(output_dir, store)
    report.tables += selection_tables(report)  # the experiment's `select` rows (Houlsby Table 1), if it has any
    analyses = read_analyses(output_dir, store)  # Houlsby §3.6: span ablation, init scale, adapter size
    report.tables += analysis_tables(report, analyses)
    directory.mkdir(parents=True, exist_ok=True)
    # one report's files at a time: `adapterfusion report` while the runner writes its own would leave the tables of
    # one beside the CSVs of the other (and remove what the other just listed)
    with folder_lock(directory):
        before = _files_of_report(directory)
        ablations = write_ablation_records(analyses, directory)
        if figures:
            try:
                write_figures(report, directory)
                write_analysis_figures(report, analyses, directory)
            except ImportError as err:  # matplotlib, an optional extra, is missing
                report.figure_notes.append(f"figures skipped: {err} (pip install 'adapterfusion[plots]')")
        for table in report.tables:
            atomic_write_text(directory / f"{table.id}.csv", table.csv())
        atomic_write_json(directory / "tables.json", report.to_dict())
        atomic_write_text(directory / "tables.md", report.markdown())
        now = _named_files(report.to_dict()) | ({ablations.name} if ablations is not None else set())
        _remove_stale(directory, before - now)
    return report


def _named_files(record: dict[str, Any]) -> set[str]:
    """The files a report wrote besides tables.md and tables.json, from its tables.json record."""
    names = {str(name) for name in record.get("figures", [])}
    names |= {f"{table['id']}.csv" for table in record.get("tables", []) if isinstance(table, dict) and "id" in table}
    return names | {SPAN_ABLATION_FILE}


def _files_of_report(directory: Path) -> set[str]:
    """What the report already in `directory` wrote, as its tables.json lists it (empty when there is none)."""
    try:
        record = json.loads((directory / "tables.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    return _named_files(record) if isinstance(record, dict) else set()


def _remove_stale(directory: Path, names: set[str]) -> None:
    """Files an earlier report wrote that this one does not (a variant's heatmap that is gone, a table no longer
    made, figures left by a report run with figures=False): removed, so the folder shows one report. Only plain
    files with the earlier report's own names; a name that is not a plain file name is left alone."""
    for name in names:
        path = directory / name
        if Path(name).name == name and not path.is_symlink() and path.is_file():
            path.unlink()
