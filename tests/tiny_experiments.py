"""Helpers for the experiment runner tests (tests/experiments, tests/reliability): a tiny experiment over two task
slices of the shipped demo data (so it runs in every clone) on the tiny random BERT (the tiny_encoder_dir fixture of
tests/conftest.py), sized to run in seconds, and an executor that finishes jobs without training."""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path

from adapterfusion.demo import demo_data_dir
from adapterfusion.experiments.report import Report

FAST = dict(max_steps=2, batch_size=8, max_length=32, learning_rate=1e-2, logging_steps=1, patience=None)
SLICE = {"train": 16, "validation": 16}


def tiny_experiment(encoder: Path, output_dir: Path, seeds=(1,), **changes) -> dict:
    """head + st-a + fusion-st-a on rte and sst2: with one seed, 6 jobs (2 stage-1 before 2 fusions)."""
    return {
        "name": "tiny",
        "encoder": str(encoder),
        "tasks": ["rte", "sst2"],
        "seeds": list(seeds),
        "setups": ["head", "st-a", "fusion-st-a"],
        "data_dir": str(demo_data_dir()),
        "output_dir": str(output_dir),
        "max_examples": SLICE,
        "training": FAST,
        **changes,
    }


class DoneExecutor:
    """Finishes every job at once with made-up metrics, to test the runner around the jobs without training."""

    capacity = 1

    def submit(self, payload):
        future = Future()
        future.set_result({"ok": True, "metrics": {"best": {"accuracy": 0.5}, "metric_for_best": "accuracy"}})
        return future

    def shutdown(self):
        pass


def report_with(variants: list[dict], scores: dict, tasks=("sst2", "rte")) -> Report:
    """A Report made of given variants and scores alone (no output dir), for tests of the tables and figures."""
    return Report(
        name="r",
        output_dir=Path("."),
        tasks=tasks,
        variants=tuple(variants),
        scores=scores,
        metrics={t: "accuracy" for t in tasks},
        parameters={},
        activations={},
        carved={},
        job_counts={},
    )
