"""`progress.json`: where a running training run is (epoch k of n, optimizer step), rewritten atomically by the
training loop at each epoch's start and end. A runner in another process, or on a Ray node sharing the disk, shows
it by reading the file: no channel to the run is needed, and a run killed mid-epoch leaves its last position."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

from adapterfusion.io.atomic import atomic_write_json
from adapterfusion.training.run_files import read_json

PROGRESS_FILE = "progress.json"
PHASES = ("training", "evaluating")


@dataclass(frozen=True)
class RunProgress:
    """`epoch` (1-based) is the epoch being trained, or the one just trained while `phase` is "evaluating";
    `epochs` is how many the run plans (early stopping may end it sooner)."""

    epoch: int
    epochs: int
    step: int = 0
    max_steps: int = 0
    phase: str = "training"
    updated_at: float = 0.0

    def describe(self) -> str:
        """e.g. "epoch 2/3", or "epoch 2/3 eval" while that epoch's dev set is scored."""
        text = f"epoch {self.epoch}/{self.epochs}"
        return f"{text} eval" if self.phase == "evaluating" else text


def write_progress(run_dir: str | os.PathLike, progress: RunProgress) -> None:
    atomic_write_json(Path(run_dir) / PROGRESS_FILE, dataclasses.asdict(progress))


def read_progress(run_dir: str | os.PathLike) -> RunProgress | None:
    """The run's last written progress; None when it has written none yet or the file is not one of ours (a live
    display must never fail on it)."""
    try:
        data = read_json(Path(run_dir) / PROGRESS_FILE, "the run rewrites it at its next epoch")
        progress = RunProgress(**{f.name: data[f.name] for f in dataclasses.fields(RunProgress) if f.name in data})
    except (ValueError, TypeError):  # RunFileError is a ValueError
        return None
    ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (progress.epoch, progress.epochs))
    return progress if ints and progress.phase in PHASES else None
