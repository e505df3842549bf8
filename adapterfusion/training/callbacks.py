"""The Trainer callbacks every run uses: the fusion temperature step, and the progress.json a live display reads."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from adapterfusion.training.progress import RunProgress, write_progress

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel


class FusionStepCallback(TrainerCallback):
    """Feeds the global step to the fusion temperature schedule (a pure function of the step)."""

    def __init__(self, model: AdaptedModel) -> None:
        self.model = model

    def on_step_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any):
        self.model.set_fusion_step(state.global_step)


class BestCheckpointInRun(TrainerCallback):
    """On a resume, points the restored state's best checkpoint at the checkpoint of that name in this run's folder.
    The saved state names it by absolute path: after the run folder was moved that path is gone, and the Trainer
    forgets which checkpoint was best (the run ends on its last weights, reported as the best); after it was copied,
    the path is the original run's folder, whose weights the Trainer loads at the end."""

    def __init__(self, name: str) -> None:
        self.name = name

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any):
        here = Path(args.output_dir or ".") / self.name
        state.best_model_checkpoint = str(here) if here.is_dir() else None


class ProgressFileCallback(TrainerCallback):
    """Writes the run's progress.json (training/progress.py) at each epoch's start and end, so a runner in another
    process can show the running job's epoch. Epochs are the Trainer's (passes over the training set)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.epochs_ended = 0

    def planned_epochs(self, state: TrainerState) -> int:
        return max(1, int(state.num_train_epochs or 1))

    def write(self, state: TrainerState, epoch: int, phase: str) -> None:
        if not state.is_world_process_zero:  # every rank of a distributed run is at the same place
            return
        write_progress(
            self.run_dir,
            RunProgress(epoch, self.planned_epochs(state), state.global_step, state.max_steps, phase, time.time()),
        )

    def epoch_ended(self, state: TrainerState, epoch: int) -> None:
        self.epochs_ended += 1
        self.write(state, epoch, "evaluating")

    def on_epoch_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any):
        self.write(state, round(state.epoch or 0) + 1, "training")

    def on_epoch_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any):
        self.epoch_ended(state, max(1, math.ceil((state.epoch or 0) - 1e-9)))  # max_steps may end it early

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any):
        if not self.epochs_ended:  # resumed from its last epoch's checkpoint: no epoch ran, still say where it ended
            self.on_epoch_end(args, state, control, **kwargs)


class StepEpochProgressCallback(ProgressFileCallback):
    """progress.json for a run whose epochs are a fixed number of optimizer steps rather than passes over one
    training set (MT-A: all tasks' examples over the batch size); the last epoch may be cut short by max_steps."""

    def __init__(self, run_dir: Path, steps_per_epoch: int) -> None:
        super().__init__(run_dir)
        self.steps_per_epoch = steps_per_epoch

    def planned_epochs(self, state: TrainerState) -> int:
        return max(1, math.ceil(state.max_steps / self.steps_per_epoch))

    def on_epoch_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any):
        pass

    def on_epoch_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any):
        if not self.epochs_ended:
            self.epoch_ended(state, max(1, math.ceil(state.global_step / self.steps_per_epoch)))

    def on_step_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any):
        if state.global_step % self.steps_per_epoch == 0:
            self.write(state, state.global_step // self.steps_per_epoch + 1, "training")

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any):
        if state.global_step % self.steps_per_epoch == 0 or state.global_step >= state.max_steps:
            self.epoch_ended(state, math.ceil(state.global_step / self.steps_per_epoch))
