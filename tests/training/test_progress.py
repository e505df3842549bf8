"""progress.json: the format a live display reads (round trip, text, never an error), and a real run writing it at
each epoch's start and end with the planned epoch count."""

import json

import pytest

import adapterfusion.training.callbacks as callbacks_module
from adapterfusion.training import train
from adapterfusion.training.progress import PROGRESS_FILE, RunProgress, read_progress, write_progress


def test_round_trip_and_text(tmp_path):
    assert read_progress(tmp_path) is None  # nothing written yet
    progress = RunProgress(epoch=2, epochs=3, step=10, max_steps=15, phase="training", updated_at=1.5)
    write_progress(tmp_path, progress)
    assert read_progress(tmp_path) == progress
    assert progress.describe() == "epoch 2/3"
    assert RunProgress(3, 3, phase="evaluating").describe() == "epoch 3/3 eval"
    assert [p.name for p in tmp_path.iterdir()] == [PROGRESS_FILE]  # no temp file left behind


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        "[1, 2]",
        '{"epochs": 3}',
        '{"epoch": "2", "epochs": 3}',
        '{"epoch": 2, "epochs": 3, "phase": "sleeping"}',
    ],
)
def test_a_file_that_is_not_ours_reads_as_none(tmp_path, text):
    (tmp_path / PROGRESS_FILE).write_text(text)
    assert read_progress(tmp_path) is None


def test_a_run_writes_each_epochs_start_and_end(tmp_path, tiny_encoder_dir, demo_data_dir, monkeypatch):
    written = []

    def recording(run_dir, progress):
        written.append((progress.epoch, progress.epochs, progress.phase, progress.step))
        write_progress(run_dir, progress)

    monkeypatch.setattr(callbacks_module, "write_progress", recording)
    result = train(
        "rte",
        "head",
        seed=1,
        encoder=tiny_encoder_dir,
        data_dir=demo_data_dir,
        output_dir=tmp_path,
        training_config=dict(epochs=2, max_steps=None, batch_size=8, max_length=32, patience=None, logging_steps=1),
        max_examples={"train": 16, "validation": 8},
    )
    # 16 examples, batch 8: two steps per epoch.
    assert written == [(1, 2, "training", 0), (1, 2, "evaluating", 2), (2, 2, "training", 2), (2, 2, "evaluating", 4)]
    last = read_progress(result.run_dir)
    assert (last.epoch, last.epochs, last.phase, last.max_steps) == (2, 2, "evaluating", 4)
    assert json.loads((result.run_dir / PROGRESS_FILE).read_text())["epochs"] == 2
