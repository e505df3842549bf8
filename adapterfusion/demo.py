"""The demo data pack shipped inside the package (see `demo_data/DATA_LICENSES.md`).

`demo_data_dir()` is a data folder in the `<task>/<split>.jsonl.gz` layout that `load_task_data(task, data_dir=...)`
and experiment files (`data_dir`) read: RTE, CB, MRPC and SICK complete (train + validation), a seeded 2,000-row
slice of SST-2 train with its full validation, and a seeded 3,000-row slice of MNLI `validation_matched`, from which
the loader carves train/validation. Built by `scripts/make_demo_data.py`; for demos and tests, not for results.
"""

from __future__ import annotations

from pathlib import Path

DEMO_TASKS = ("rte", "cb", "mrpc", "sick", "sst2", "mnli")


def demo_data_dir() -> Path:
    """The folder of the shipped demo data pack."""
    return Path(__file__).resolve().parent / "demo_data"
