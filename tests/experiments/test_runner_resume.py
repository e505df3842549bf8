"""A job interrupted mid-training continues from its newest checkpoint when the experiment runs again, unless its
settings changed or a job it depends on runs again (then its checkpoints belong to another run)."""

import json
from pathlib import Path

import pytest

from adapterfusion.experiments import ResultsStore, run_experiment
from adapterfusion.training.callbacks import FusionStepCallback
from tiny_experiments import tiny_experiment

STEPS_PER_EPOCH = 2  # 16 training examples in batches of 8
TRAINING = dict(epochs=2, batch_size=8, max_length=32, learning_rate=1e-2, logging_steps=1, patience=None)


def _interrupt(monkeypatch, setup: str) -> None:
    """Ctrl-C right after the first epoch's checkpoint of the `setup` job is saved."""

    def on_save(self, args, state, control, **kwargs):
        if f"/{setup}/" in args.output_dir and state.global_step == STEPS_PER_EPOCH:
            raise KeyboardInterrupt

    monkeypatch.setattr(FusionStepCallback, "on_save", on_save, raising=False)


def _run_metrics(out, job_id: str) -> dict:
    with ResultsStore(out, readonly=True) as store:
        job = next(j for j in store.jobs() if j.id == job_id)
    return json.loads((Path(job.run_dir) / "metrics.json").read_text())


@pytest.mark.slow
def test_an_interrupted_job_resumes_from_its_checkpoint(tmp_path, tiny_encoder_dir, monkeypatch):
    out = tmp_path / "out"
    spec = tiny_experiment(tiny_encoder_dir, out, tasks=["rte"], setups=["st-a"], training=TRAINING)
    with monkeypatch.context() as patch:
        _interrupt(patch, "st-a")
        with pytest.raises(KeyboardInterrupt):
            run_experiment(spec, progress=False, report=False)
    summary = run_experiment(spec, progress=False, report=False)
    assert summary.ok and summary.ran == ["st-a-rf16/rte/seed-1"], summary.failed
    metrics = _run_metrics(out, "st-a-rf16/rte/seed-1")
    assert metrics["resumed_from"] == f"checkpoints/checkpoint-{STEPS_PER_EPOCH}"
    assert metrics["global_step"] == 2 * STEPS_PER_EPOCH and len(metrics["epochs"]) == 2


@pytest.mark.slow
def test_a_fusion_whose_adapters_are_retrained_starts_over(tmp_path, tiny_encoder_dir, monkeypatch):
    out = tmp_path / "out"
    setups = [{"name": "st-a"}, {"name": "fusion-st-a", "tasks": ["rte"]}]
    spec = tiny_experiment(tiny_encoder_dir, out, setups=setups, training=TRAINING, fusion={"rte": ["sst2"]})
    with monkeypatch.context() as patch:
        _interrupt(patch, "fusion-st-a")
        with pytest.raises(KeyboardInterrupt):
            run_experiment(spec, progress=False, report=False)
    assert any("fusion-st-a" in str(path) for path in out.rglob("checkpoint-*"))
    changed = {**spec, "setups": [{"name": "st-a", "learning_rate": 5e-3}, setups[1]]}
    summary = run_experiment(changed, force=True, progress=False, report=False)
    assert summary.ok and "fusion-st-a/rte/seed-1" in summary.ran
    assert _run_metrics(out, "fusion-st-a/rte/seed-1")["resumed_from"] is None
