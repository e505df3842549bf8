"""Bad-input cases at one boundary, runs: training calls, run folders, stores and the CLI commands around them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import adapterfusion as af
import adapterfusion.training
from adapterfusion.training import AdapterStore, TrainingError
from catalogue import Action, BadInput

B = BadInput


# ---- helpers -------------------------------------------------------------------------------------------------------
def _finished_run(folder: Path, task: str, setup: str, seed: int, stored: bool = False) -> Path:
    """The run folder `runs/<task>/<setup>/seed-<seed>` of an earlier finished run (and its store entry)."""
    run = folder / "runs" / task / setup / f"seed-{seed}"
    (run / "adapter").mkdir(parents=True)
    (run / "adapter" / "adapter.safetensors").write_bytes(b"the adapter the user keeps")
    (run / "config.json").write_text(json.dumps({"format_version": 1, "task": task, "setup": setup, "seed": seed}))
    (run / "metrics.json").write_text(json.dumps({"format_version": 1, "best": {"accuracy": 0.71}}))
    if stored:
        entry = AdapterStore(folder / "store").path(str(af.default_encoder_path()), task, setup, seed)
        (entry / "adapter").mkdir(parents=True)
        (entry / "adapter" / "adapter.safetensors").write_bytes(b"the stored adapter a fusion fused")
        (entry / "entry.json").write_text(json.dumps({"task": task, "setup": setup, "seed": seed}))
    return run


def _train_again(task: str, setup: str, seed: int, stored: bool = False, **kwargs: Any):
    """An earlier finished run, then train() of the same task/setup/seed into the same output dir and store."""

    def prepare(folder: Path) -> Action:
        _finished_run(folder, task, setup, seed, stored)
        return lambda: af.training.train(
            task, setup, seed=seed, output_dir=folder / "runs", store=folder / "store", **kwargs
        )

    return prepare


def _train_multitask_again(folder: Path) -> Action:
    _finished_run(folder, "mt-a", "mt-a", 42)
    return lambda: af.training.train_multitask(["rte", "cb"], output_dir=folder / "runs", store=folder / "store")


CASES: tuple[BadInput, ...] = (
    # silent acceptances: an earlier result replaced without a word (data loss)
    B(
        "train-api-rerun",
        "silent acceptances",
        "train('cb', 'st-a', seed=1, store=S) again with other settings, over a finished run whose adapter is in "
        "the store (was replaced without a word: overwrite defaulted to True, and fusions of it broke)",
        TrainingError,
        ("cb/st-a seed 1", "was trained before", "the store holds its adapter", "overwrite=True"),
        _train_again("cb", "st-a", 1, stored=True, training_config={"learning_rate": 1e-3}),
    ),
    B(
        "train-api-resume-finished",
        "silent acceptances",
        "train(..., resume=True) over a finished run (it found no checkpoint and trained from scratch over it)",
        TrainingError,
        ("cb/st-a seed 1", "finished", "rebuild_run", "overwrite=True"),
        _train_again("cb", "st-a", 1, stored=True, resume=True),
    ),
    B(
        "train-multitask-rerun",
        "silent acceptances",
        "train_multitask(['rte', 'cb']) over a finished MT-A run folder (was replaced without a word)",
        TrainingError,
        ("mt-a seed 42", "was trained before", "overwrite=True"),
        _train_multitask_again,
    ),
)
