"""Bad-input cases at one boundary, the training loop: train() and TrainingConfig settings, resume from checkpoints,
callbacks, optimizer groups, batching and the progress a run writes."""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import torch
import transformers
from safetensors.torch import load_file, save_file

import adapterfusion as af
import adapterfusion.training
from adapterfusion.demo import demo_data_dir
from adapterfusion.errors import ConfigError
from adapterfusion.training import TrainingError
from adapterfusion.training.callbacks import FusionStepCallback
from adapterfusion.training.setups import SETUPS, Setup, SetupContext, SetupPlan, register_setup
from catalogue import Action, BadInput
from tiny_models import tiny_encoder

B = BadInput
GROUP = "training loop"

_RESUMABLE = {
    "epochs": 3,
    "batch_size": 8,
    "max_length": 32,
    "patience": None,
    "keep_checkpoints": True,
    "warmup_ratio": 0,
    "logging_steps": 1,
}


class _Killed(Exception):
    """Stands for the process being killed."""


def _kill_after_step_4(self: Any, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
    if state.global_step == 4:
        raise _Killed("killed after saving step 4")


def _train_with(**settings: Any) -> Callable[[Path], Action]:
    """train('rte', 'st-a') with the training `settings`, on a data folder with nothing in it: a setting that is
    refused must be refused before the data is looked for."""
    return lambda folder: (
        lambda: af.training.train("rte", "st-a", output_dir=folder / "runs", data_dir=folder, training_config=settings)
    )


def _resume_after(edit: Callable[[Path], None]) -> Callable[[Path], Action]:
    """train('rte', 'st-a', resume=True) of a run on a tiny BERT killed after its second checkpoint (checkpoint-2 and
    checkpoint-4, 16 demo rows in batches of 8), the newest checkpoint's folder changed by `edit`."""

    def prepare(folder: Path) -> Action:
        common = dict(
            encoder=_saved_bert(folder),
            output_dir=folder / "runs",
            data_dir=demo_data_dir(),
            training_config=_RESUMABLE,
            max_examples={"train": 16, "validation": 8},
        )
        with mock.patch.object(FusionStepCallback, "on_save", _kill_after_step_4, create=True):
            try:
                af.training.train("rte", "st-a", **common)
            except _Killed:
                pass
        edit(folder / "runs" / "rte" / "st-a" / "seed-42" / "checkpoints" / "checkpoint-4")
        return lambda: af.training.train("rte", "st-a", resume=True, **common)

    return prepare


def _kill_after_step_6(self: Any, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
    if state.global_step == 6:
        raise _Killed("killed after saving its last checkpoint, step 6")


def _resume_moved_run(folder: Path) -> Action:
    """A 3-epoch run on a tiny BERT (16 demo rows in batches of 8, learning rate 1e-3) killed right after saving its
    last checkpoint, its runs folder then moved (the folder it was trained in is gone), and train(..., resume=True)
    in its new place; the best checkpoint is checkpoint-2, where the dev loss was lowest. The action returns whether
    the run reported the first epoch's dev loss as the best one. The resume goes to a temporary folder, as the case's
    folder must stay as it was."""
    settings = {**_RESUMABLE, "learning_rate": 1e-3}
    common: dict[str, Any] = dict(
        encoder=_saved_bert(folder),
        data_dir=demo_data_dir(),
        training_config=settings,
        max_examples={"train": 16, "validation": 8},
    )
    with tempfile.TemporaryDirectory() as trained_in:
        with mock.patch.object(FusionStepCallback, "on_save", _kill_after_step_6, create=True):
            try:
                af.training.train("rte", "st-a", output_dir=Path(trained_in) / "runs", **common)
            except _Killed:
                pass
        shutil.copytree(Path(trained_in) / "runs", folder / "moved")

    def action() -> str:
        with tempfile.TemporaryDirectory() as moved_to:
            runs = shutil.copytree(folder / "moved", Path(moved_to) / "runs")
            result = af.training.train("rte", "st-a", output_dir=runs, resume=True, **common)
            metrics = json.loads(result.metrics_path.read_text(encoding="utf-8"))
            losses = [epoch["loss"] for epoch in metrics["epochs"]]
            best = "the first epoch's" if metrics["best"]["loss"] == losses[0] else "another epoch's"
            return f"resumed; dev losses {[round(x, 4) for x in losses]}; reported as best: {best} dev loss"

    return action


def _weights(edit: Callable[[dict[str, torch.Tensor]], None]) -> Callable[[Path], None]:
    """A checkpoint edit: its model.safetensors rewritten with the tensors `edit` changed."""

    def apply(checkpoint: Path) -> None:
        tensors = load_file(checkpoint / "model.safetensors")
        edit(tensors)
        save_file(tensors, checkpoint / "model.safetensors", metadata={"format": "pt"})

    return apply


def _global_step(step: int) -> Callable[[Path], None]:
    """A checkpoint edit: its trainer_state.json says global_step `step`."""

    def apply(checkpoint: Path) -> None:
        state = json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))
        (checkpoint / "trainer_state.json").write_text(json.dumps({**state, "global_step": step}), encoding="utf-8")

    return apply


def _trainer_state(**changes: Any) -> Callable[[Path], None]:
    """A checkpoint edit: its trainer_state.json with `changes` (None removes a key)."""

    def apply(checkpoint: Path) -> None:
        state = json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))
        state = {key: value for key, value in {**state, **changes}.items() if value is not None}
        (checkpoint / "trainer_state.json").write_text(json.dumps(state), encoding="utf-8")

    return apply


def _bias_of_one(tensors: dict[str, torch.Tensor]) -> None:
    """The bias of the head's hidden layer (32 values) replaced by one value, which copy_ broadcasts."""
    name = "heads.rte.layers.1.bias"
    tensors[name] = tensors[name][:1].clone()


def _bias_of_other_shape(tensors: dict[str, torch.Tensor]) -> None:
    tensors["heads.rte.layers.1.bias"] = torch.zeros(3, 3)


def _integer_weights(tensors: dict[str, torch.Tensor]) -> None:
    for name, tensor in tensors.items():
        tensors[name] = tensor.to(torch.int64)


def _saved_bert(folder: Path) -> Path:
    """A tiny random BERT saved with the shipped tokenizer in the case's folder."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(af.default_encoder_path())
    tiny_encoder("bert", vocab_size=tokenizer.vocab_size).save_pretrained(folder / "bert")
    tokenizer.save_pretrained(folder / "bert")
    return folder / "bert"


def _train_in_temporary_folder(settings: dict[str, Any]) -> Callable[[Path], Action]:
    """train('rte', 'st-a', training_config=`settings`) on a tiny BERT and 16 demo rows (8 validation rows); the
    action returns the best checkpoint's dev metrics. The run goes to a temporary folder, as the case's folder must
    stay as it was."""

    def prepare(folder: Path) -> Action:
        bert = _saved_bert(folder)

        def action() -> Any:
            with tempfile.TemporaryDirectory() as runs:
                result = af.training.train(
                    "rte",
                    "st-a",
                    encoder=bert,
                    output_dir=runs,
                    data_dir=demo_data_dir(),
                    training_config=settings,
                    max_examples={"train": 16, "validation": 8},
                )
                best = json.loads(result.metrics_path.read_text(encoding="utf-8"))["best"]
                return f"trained; dev accuracy {best['accuracy']}, dev loss finite: {math.isfinite(best['loss'])}"

        return action

    return prepare


def _freeze_everything(model: Any, context: SetupContext) -> SetupPlan:
    """A user's setup recipe that adds the task's head, then leaves no parameter trainable."""
    model.add_head(context.task.name, af.ClassificationHead(num_labels=2, labels=context.task.label_names))
    model.requires_grad_(False)
    return SetupPlan(head=context.task.name, trainable=[])


def _setup_training_nothing(folder: Path) -> Action:
    """train('rte', 'frozen-all'), a setup registered for the action only whose recipe freezes every parameter, on
    a tiny BERT and 16 demo rows; the run goes to a temporary folder, as the case's folder must stay as it was."""
    bert = _saved_bert(folder)

    def action() -> Any:
        with tempfile.TemporaryDirectory() as runs, mock.patch.dict(SETUPS):
            register_setup(Setup("frozen-all", _freeze_everything, {}, "trains nothing"))
            return af.training.train(
                "rte",
                "frozen-all",
                encoder=bert,
                output_dir=runs,
                data_dir=demo_data_dir(),
                training_config={"max_steps": 1, "batch_size": 8, "max_length": 32, "patience": None},
                max_examples={"train": 16, "validation": 8},
            )

    return action


CASES: tuple[BadInput, ...] = (
    B(
        "train-resume-checkpoint-weight-broadcast",
        GROUP,
        "train(..., resume=True) whose newest checkpoint's model.safetensors holds a head bias of shape (1,) for the "
        "model's (32,) (resumed with that one value broadcast over all 32, without a word)",
        TrainingError,
        ("cannot resume from the checkpoint", "checkpoint-4", "shape (1,)", "shape (32,)", "Remove it"),
        _resume_after(_weights(_bias_of_one)),
    ),
    B(
        "train-resume-checkpoint-weight-other-shape",
        GROUP,
        "train(..., resume=True) whose newest checkpoint's model.safetensors holds a head bias of shape (3, 3) (a raw "
        "RuntimeError from copy_: 'The size of tensor a (32) must match the size of tensor b (3)')",
        TrainingError,
        ("cannot resume from the checkpoint", "checkpoint-4", "shape (3, 3)", "overwrite=True"),
        _resume_after(_weights(_bias_of_other_shape)),
    ),
    B(
        "train-resume-checkpoint-weights-integer",
        GROUP,
        "train(..., resume=True) whose newest checkpoint's model.safetensors holds int64 tensors (resumed from the "
        "weights rounded to integers, mostly 0, without a word)",
        TrainingError,
        ("cannot resume from the checkpoint", "torch.int64", "not a floating-point tensor"),
        _resume_after(_weights(_integer_weights)),
    ),
    B(
        "train-resume-trainer-state-step-past-end",
        GROUP,
        "train(..., resume=True) whose newest checkpoint (checkpoint-4 of a 6-step run) has a trainer_state.json "
        "saying global_step 1000 (resumed past the end: no step trained, reported finished at step 1000)",
        TrainingError,
        ("checkpoint-4: it is damaged", "global_step 1000", "saved after step 4", "checkpoint-2"),
        _resume_after(_global_step(1000)),
    ),
    B(
        "train-resume-trainer-state-step-negative",
        GROUP,
        "train(..., resume=True) whose newest checkpoint has a trainer_state.json saying global_step -3 (a "
        "ConfigError about a 'fusion step=-3' the user never set)",
        TrainingError,
        ("checkpoint-4: it is damaged", "global_step -3", "saved after step 4"),
        _resume_after(_global_step(-3)),
    ),
    B(
        "train-epochs-overflow-step-count",
        GROUP,
        "train('rte', 'st-a', training_config={'epochs': 1e308}) (a raw OverflowError from the Trainer's step count, "
        "'cannot convert float infinity to integer', once the data was loaded, over an unfinished run folder)",
        ConfigError,
        ("epochs=1e+308", "<= 1e+06", "warm-up (warmup_ratio)"),
        _train_with(epochs=1e308),
    ),
    B(
        "train-adam-epsilon-zero-in-float32",
        GROUP,
        "train('rte', 'st-a', training_config={'adam_epsilon': 1e-50}) (0 in float32: the adapter's down-projection, "
        "whose gradients are 0 while its up-projection is, got 0/0 = NaN, and the run stopped on a NaN loss that "
        "blamed the learning rate)",
        ConfigError,
        ("adam_epsilon=1e-50", "float32's smallest normal number", "the default is 1e-8"),
        _train_with(adam_epsilon=1e-50),
    ),
    B(
        "train-setup-trains-nothing",
        GROUP,
        "train('rte', <a registered setup whose recipe leaves no parameter requiring grad>) (a raw ValueError from "
        "torch's AdamW, 'optimizer got an empty parameter list', once the data was loaded)",
        TrainingError,
        ("nothing to train", "requires grad", "SetupPlan.trainable"),
        _setup_training_nothing,
    ),
    B(
        "train-eval-batch-size-beyond-dev-set",
        GROUP,
        "train('rte', 'st-a', training_config={'eval_batch_size': 10**15}) over an 8-row dev set (not an error: one "
        "batch of the dev set; was a raw RuntimeError from torch's allocator, 'you tried to allocate "
        "4000000000000000 bytes', after the first epoch, where the Trainer repeats a batch's loss eval_batch_size "
        "times)",
        None,
        ("trained; dev accuracy", "dev loss finite: True"),
        _train_in_temporary_folder(
            {"epochs": 1, "batch_size": 8, "eval_batch_size": 10**15, "max_length": 32, "patience": None}
        ),
    ),
    B(
        "train-resume-trainer-state-without-control",
        GROUP,
        "train(..., resume=True) whose newest checkpoint's trainer_state.json has stateful_callbacks without the "
        "TrainerControl state (resumed and trained, then a raw KeyError 'TrainerControl' at the next save)",
        TrainingError,
        ("checkpoint-4: it is damaged", "lack the TrainerControl state", "checkpoint-2"),
        _resume_after(_trainer_state(stateful_callbacks={})),
    ),
    B(
        "train-resume-trainer-state-callback-not-object",
        GROUP,
        "train(..., resume=True) whose newest checkpoint's trainer_state.json holds stateful_callbacks "
        "{'TrainerControl': 'junk'} (a raw AttributeError from the Trainer: \"'str' object has no attribute 'get'\")",
        TrainingError,
        ("checkpoint-4: it is damaged", "'TrainerControl' as 'junk'", "not a callback state"),
        _resume_after(_trainer_state(stateful_callbacks={"TrainerControl": "junk"})),
    ),
    B(
        "train-resume-trainer-state-control-unknown-arg",
        GROUP,
        "train(..., resume=True) whose newest checkpoint's trainer_state.json holds TrainerControl args "
        "{'should_stop': True} (a raw TypeError from TrainerControl(**args))",
        TrainingError,
        ("checkpoint-4: it is damaged", "'TrainerControl' args should_stop=True", "does not take"),
        _resume_after(_trainer_state(stateful_callbacks={"TrainerControl": {"args": {"should_stop": True}}})),
    ),
    B(
        "train-resume-trainer-state-without-batch-size",
        GROUP,
        "train(..., resume=True) whose newest checkpoint's trainer_state.json lacks train_batch_size (a raw "
        "TypeError from the Trainer's check of it: \"unsupported operand type(s) for //: 'NoneType' and 'int'\")",
        TrainingError,
        ("checkpoint-4: it is damaged", "['train_batch_size']"),
        _resume_after(_trainer_state(train_batch_size=None)),
    ),
    B(
        "train-resume-run-folder-moved",
        GROUP,
        "train(..., resume=True) of a run killed after saving its last checkpoint, its runs folder moved since (the "
        "trainer state names the best checkpoint by its old absolute path: the Trainer dropped it, ended on the last "
        "epoch's weights and reported them as the best)",
        None,
        ("resumed", "reported as best: the first epoch's dev loss"),
        _resume_moved_run,
    ),
    B(
        "train-dataloader-workers-a-million",
        GROUP,
        "train('rte', 'st-a', training_config={'dataloader_workers': 10**6}) (accepted: each worker is a process, so "
        "the Trainer would start a million of them once the data was loaded)",
        ConfigError,
        ("dataloader_workers=1000000", "in 0..1024", "each worker is a process"),
        _train_with(dataloader_workers=10**6),
    ),
)
