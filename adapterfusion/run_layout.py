"""The names inside a run folder and an AdapterStore entry, and the one spelling of a seed's folder, `seed-<seed>`.
Training writes them, the store and the zoo look them up, provenance and the runner read them back; all of those
take the names from here, so this module imports nothing."""

from __future__ import annotations

CONFIG_FILE = "config.json"  # a run's settings and provenance (training/run.py)
METRICS_FILE = "metrics.json"  # a finished run's results
ENTRY_FILE = "entry.json"  # an AdapterStore entry's record (training/store.py)
MT_A_TASKS_DIR = "tasks"  # inside an MT-A run: tasks/<task>/adapter and head, one folder per task
MT_A_MARKER_FILE = "mt_a.json"  # beside an MT-A run's fine-tuned encoder: the base encoder, seed, tasks and run folder
SEED_PREFIX = "seed-"


def seed_folder(seed: int) -> str:
    """The folder (or job-id part) of one seed: `seed-<seed>`."""
    return f"{SEED_PREFIX}{int(seed)}"


def seed_of(folder_name: str) -> int:
    """The seed a `seed-<seed>` folder name holds."""
    return int(folder_name.removeprefix(SEED_PREFIX))
