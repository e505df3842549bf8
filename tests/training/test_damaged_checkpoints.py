"""`train(..., resume=True)` over a run whose newest checkpoint has every file but a damaged one (a truncated
optimizer, scheduler or RNG state, a trainer_state.json that is no trainer state), whose config.json is not an
object, or whose checkpoints path is a file: the library's error naming the checkpoint and what to do (remove it,
resume from the one before, start over), never a traceback from torch or transformers, and nothing written."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from adapterfusion.errors import RunFileError
from adapterfusion.training import TrainingError, train
from adapterfusion.training.callbacks import FusionStepCallback

STEPS_PER_EPOCH = 4  # 32 training examples in batches of 8
SETTINGS = dict(epochs=3, batch_size=8, max_length=32, patience=None, keep_checkpoints=True)
RUN = Path("rte") / "st-a" / "seed-3"


class Killed(Exception):
    """Stands for the process being killed."""


def _run(output_dir: Path, encoder: Path, data_dir: Path, resume: bool = False):
    return train(
        "rte",
        "st-a",
        seed=3,
        encoder=encoder,
        data_dir=data_dir,
        output_dir=output_dir,
        training_config=SETTINGS,
        max_examples={"train": 32, "validation": 16},
        resume=resume,
    )


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory, tiny_encoder_dir, demo_data_dir) -> Path:
    """The output dir of a run killed right after saving its second checkpoint (checkpoint-4 and checkpoint-8)."""
    output = tmp_path_factory.mktemp("interrupted")

    def on_save(self, args, state, control, **kwargs):
        if state.global_step == 2 * STEPS_PER_EPOCH:
            raise Killed("killed after saving step 8")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(FusionStepCallback, "on_save", on_save, raising=False)
        with pytest.raises(Killed):
            _run(output, tiny_encoder_dir, demo_data_dir)
    checkpoints = sorted(p.name for p in (output / RUN / "checkpoints").iterdir())
    assert checkpoints == ["checkpoint-4", "checkpoint-8"]
    return output


def snapshot(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _newest(name: str, damage: Callable[[Path], None]) -> Callable[[Path], None]:
    return lambda run_dir: damage(run_dir / "checkpoints" / "checkpoint-8" / name)


def _write(text: str) -> Callable[[Path], None]:
    return lambda path: path.write_text(text)


def _checkpoints_a_file(run_dir: Path) -> None:
    shutil.rmtree(run_dir / "checkpoints")
    (run_dir / "checkpoints").write_text("x")


# (id, damage to the run folder, error type, words the message must hold)
DAMAGED = [
    ("optimizer-truncated", _newest("optimizer.pt", _truncate), TrainingError, ("optimizer.pt", "checkpoint-8")),
    ("scheduler-truncated", _newest("scheduler.pt", _truncate), TrainingError, ("scheduler.pt", "checkpoint-8")),
    ("rng-state-truncated", _newest("rng_state.pth", _truncate), TrainingError, ("rng_state.pth", "checkpoint-8")),
    ("trainer-state-empty-object", _newest("trainer_state.json", _write("{}")), TrainingError, ("global_step",)),
    ("trainer-state-a-list", _newest("trainer_state.json", _write("[]")), TrainingError, ("JSON list",)),
    (
        "trainer-state-unknown-key",
        _newest("trainer_state.json", _write('{"global_step": 8, "max_steps": 12, "log_history": [], "x": 1}')),
        TrainingError,
        ("['x']",),
    ),
    (
        "trainer-state-log-entries-not-objects",
        _newest("trainer_state.json", _write('{"global_step": 8, "max_steps": 12, "log_history": [1]}')),
        TrainingError,
        ("log_history",),
    ),
    (
        "trainer-state-best-checkpoint-a-number",
        _newest(
            "trainer_state.json",
            _write('{"global_step": 8, "max_steps": 12, "log_history": [], "best_model_checkpoint": 4}'),
        ),
        TrainingError,
        ("best_model_checkpoint",),
    ),
]


@pytest.mark.parametrize(("damage", "error", "words"), [d[1:] for d in DAMAGED], ids=[d[0] for d in DAMAGED])
def test_a_damaged_newest_checkpoint_names_it_and_the_one_before(
    interrupted, tmp_path, tiny_encoder_dir, demo_data_dir, damage, error, words
):
    output = tmp_path / "out"
    shutil.copytree(interrupted, output)
    damage(output / RUN)
    before = snapshot(output)
    with pytest.raises(error) as raised:
        _run(output, tiny_encoder_dir, demo_data_dir, resume=True)
    message = str(raised.value)
    for word in (*words, "is damaged", str(output / RUN / "checkpoints" / "checkpoint-8"), "the one before it"):
        assert word in message, message
    assert "(checkpoint-4)" in message and "overwrite=True" in message
    assert snapshot(output) == before


def test_a_damaged_only_checkpoint_says_to_start_over(interrupted, tmp_path, tiny_encoder_dir, demo_data_dir):
    output = tmp_path / "out"
    shutil.copytree(interrupted, output)
    shutil.rmtree(output / RUN / "checkpoints" / "checkpoint-4")
    _truncate(output / RUN / "checkpoints" / "checkpoint-8" / "optimizer.pt")
    with pytest.raises(TrainingError, match=r"checkpoint-8: it is damaged .*to start over \(or train with overwrite"):
        _run(output, tiny_encoder_dir, demo_data_dir, resume=True)


@pytest.mark.parametrize("document", ["[1]", '"run"', "3"])
def test_a_run_config_that_is_not_an_object_is_a_run_file_error(
    interrupted, tmp_path, tiny_encoder_dir, demo_data_dir, document
):
    output = tmp_path / "out"
    shutil.copytree(interrupted, output)
    (output / RUN / "config.json").write_text(document)
    expected = r"config.json holds a JSON \w+, not the object train\(\) writes.*start over"
    with pytest.raises(RunFileError, match=expected):
        _run(output, tiny_encoder_dir, demo_data_dir, resume=True)


def test_a_checkpoints_path_that_is_a_file_is_said_as_such(interrupted, tmp_path, tiny_encoder_dir, demo_data_dir):
    output = tmp_path / "out"
    shutil.copytree(interrupted, output)
    _checkpoints_a_file(output / RUN)
    before = snapshot(output)
    with pytest.raises(TrainingError, match=r"checkpoints' is a file, not a folder; remove it"):
        _run(output, tiny_encoder_dir, demo_data_dir, resume=True)
    assert snapshot(output) == before


def test_an_intact_checkpoint_still_resumes(interrupted, tmp_path, tiny_encoder_dir, demo_data_dir):
    output = tmp_path / "out"
    shutil.copytree(interrupted, output)
    result = _run(output, tiny_encoder_dir, demo_data_dir, resume=True)
    assert result.metrics_path.is_file()
