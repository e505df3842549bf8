"""A NaN/inf loss stops the run with a message that says where, why and what is left, and keeps the last good
checkpoint on disk; nothing is written as the run's result."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from adapterfusion.training import TrainingError, train
from adapterfusion.training.callbacks import FusionStepCallback
from adapterfusion.training.checkpoints import TRAINABLE_FILE, last_good_checkpoint

STEPS_PER_EPOCH = 2  # 16 training examples in batches of 8
SETTINGS = dict(epochs=3, batch_size=8, max_length=32, learning_rate=1e-3, logging_steps=1, patience=None)


def _poison_weights_at(step: int, monkeypatch) -> None:
    """Set the trainable weights to inf when training reaches `step`, as a diverging run would."""
    original = FusionStepCallback.on_step_begin

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == step:
            with torch.no_grad():
                for parameter in self.model.parameters():
                    if parameter.requires_grad:
                        parameter.fill_(float("inf"))
        return original(self, args, state, control, **kwargs)

    monkeypatch.setattr(FusionStepCallback, "on_step_begin", on_step_begin)


def test_nan_loss_after_a_saved_epoch_stops_with_a_clear_message_and_keeps_that_checkpoint(
    tmp_path, tiny_encoder_dir, demo_data_dir, monkeypatch
):
    _poison_weights_at(STEPS_PER_EPOCH + 1, monkeypatch)  # one step into the second epoch
    with pytest.raises(TrainingError) as error:
        train(
            "rte",
            "head",
            seed=1,
            encoder=tiny_encoder_dir,
            data_dir=demo_data_dir,
            output_dir=tmp_path,
            training_config=SETTINGS,
            max_examples={"train": 16, "validation": 8},
        )
    message = str(error.value)
    run_dir = tmp_path / "rte" / "head" / "seed-1"
    good = run_dir / "checkpoints" / f"checkpoint-{STEPS_PER_EPOCH}"
    for words in (
        "training stopped",
        f"in training step {STEPS_PER_EPOCH + 2}",
        "1.50 epochs done",
        "learning_rate=0.001",
        "fp16",
        f"last good checkpoint is {good}",
        "no metrics.json",
    ):
        assert words in message, (words, message)
    assert "nan" in message or "inf" in message
    saved = load_file(str(good / TRAINABLE_FILE))
    assert saved and all(torch.isfinite(t).all() for t in saved.values())
    assert json.loads((run_dir / "config.json").read_text())["setup"] == "head"
    assert not (run_dir / "metrics.json").exists() and not (run_dir / "head").exists()


def test_last_good_checkpoint_skips_one_saved_after_the_weights_blew_up(tmp_path):
    for step, value in ((2, 1.0), (4, 2.0), (6, float("nan"))):
        (tmp_path / f"checkpoint-{step}").mkdir()
        save_file({"w": torch.full((2,), value)}, str(tmp_path / f"checkpoint-{step}" / TRAINABLE_FILE))
    (tmp_path / "checkpoint-8").mkdir()  # killed before its weights were written
    assert last_good_checkpoint(tmp_path) == tmp_path / "checkpoint-4"
    assert last_good_checkpoint(tmp_path / "none") is None
