"""What a training checkpoint holds of the model, and which checkpoint a run goes back to.

A `checkpoints/checkpoint-<step>/` folder is the HF Trainer's own (optimizer.pt, scheduler.pt, rng_state*.pth,
trainer_state.json, training_args.bin) with the model's weights in `model.safetensors`: only the *trainable*
parameters, keyed by parameter name (shared tensors are no problem), since the frozen rest is already on disk and the
same in every checkpoint. The Trainer trains `TrainableWeights`, a view of the model whose state dict is exactly those
parameters, so its own resume (`train(resume_from_checkpoint=...)`) and best-checkpoint loading
(`load_best_model_at_end`) read them through the public `nn.Module.load_state_dict`, and its `save_model` writes them;
nothing of the Trainer's private checkpoint code is overridden. Runs saved before this named the same file
`trainable.safetensors`; `adopt_legacy_weights` renames it before such a run resumes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from safetensors.torch import save as safetensors_bytes
from torch import nn
from transformers import EarlyStoppingCallback, TrainerControl, TrainerState

from adapterfusion._validation import short_repr
from adapterfusion.io.atomic import atomic_write_bytes
from adapterfusion.training.errors import TrainingError

TRAINABLE_FILE = "model.safetensors"  # transformers' SAFE_WEIGHTS_NAME, so its resume finds the weights
LEGACY_TRAINABLE_FILE = "trainable.safetensors"
# What the Trainer's checkpoint holds besides our trainable weights; trainer_state.json comes last, after the others.
RESUME_FILES = ("optimizer.pt", "scheduler.pt", "trainer_state.json")


class LoadResult(NamedTuple):
    """What `load_state_dict` reports, as torch's own result does: no key is ever missing or unexpected here."""

    missing_keys: list[str]
    unexpected_keys: list[str]


class TrainableWeights(nn.Module):
    """`model` as the Trainer sees it: the same forward, and a state dict of only its trainable parameters (by
    parameter name); `load_state_dict` refuses a state dict that names other parameters or lacks a trainable one."""

    # The loss is a mean over the batch, not normalised by the Trainer's num_items_in_batch (AdaptedModel says so too).
    accepts_loss_kwargs = False

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.model(*args, **kwargs)

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, Any]:  # type: ignore[override]
        return {name: p.detach() for name, p in self.model.named_parameters() if p.requires_grad}

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False) -> LoadResult:
        parameters = dict(self.model.named_parameters())
        problem = weights_mismatch(self.model, state_dict)
        if problem is not None:
            raise TrainingError(f"the checkpoint does not fit this model: it {problem}")
        with torch.no_grad():
            for name, tensor in state_dict.items():
                parameters[name].copy_(tensor)
        return LoadResult([], [])

    def save(self, folder: str | os.PathLike) -> None:
        """The trainable weights into `folder`/TRAINABLE_FILE, written atomically: a kill never leaves half a file."""
        tensors = {name: t.cpu().contiguous() for name, t in self.state_dict().items()}
        atomic_write_bytes(Path(folder) / TRAINABLE_FILE, safetensors_bytes(tensors, metadata={"format": "pt"}))


def weights_mismatch(model: nn.Module, tensors: Mapping[str, Any]) -> str | None:
    """Why `tensors` (a checkpoint's trainable weights) cannot be loaded into `model`, or None: a parameter the model
    lacks, a trainable one left out, a shape other than the parameter's (copy_ would broadcast one that fits, and
    fail deep in torch on one that does not) or a tensor that is not floating point (copy_ would round it)."""
    parameters = dict(model.named_parameters())
    unknown = sorted(set(tensors) - set(parameters))
    if unknown:
        return f"holds parameters this model lacks: {unknown[:5]}"
    missing = sorted(name for name, p in parameters.items() if p.requires_grad and name not in tensors)
    if missing:
        return f"lacks trainable parameters of this model: {missing[:5]}"
    for name, tensor in tensors.items():
        shape = tuple(parameters[name].shape)
        if not isinstance(tensor, torch.Tensor) or tuple(tensor.shape) != shape:
            found = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
            return f"holds {name} of shape {found}, where this model's parameter has shape {shape}"
        if not tensor.is_floating_point():
            expected = parameters[name].dtype
            return f"holds {name} as {tensor.dtype}, not a floating-point tensor as this model's ({expected})"
    return None


def check_checkpoint_fits(model: nn.Module, checkpoint: Path) -> None:
    """Before a resume: refuse a checkpoint whose trainable weights are not this model's (replaced by hand, or copied
    from a run of another model), naming it and what to do, where the Trainer would fail inside torch or, worse, load
    them broadcast or rounded without a word."""
    try:
        tensors = load_file(str(weights_file(checkpoint)))
    except (OSError, SafetensorError) as error:
        raise TrainingError(
            f"cannot resume from the checkpoint {checkpoint}: its weights cannot be read ({error})"
        ) from None
    problem = weights_mismatch(model, tensors)
    if problem is not None:
        raise TrainingError(
            f"cannot resume from the checkpoint {checkpoint}: it {problem}, so it was not saved by this run's model. "
            "Remove it (a resume then continues from the checkpoint before it, if there is one), or remove the run's "
            "checkpoints folder to start over (or train with overwrite=True)"
        )


def weights_file(checkpoint: Path) -> Path:
    """The checkpoint's trainable-weights file (the legacy name when only that one is there)."""
    legacy = checkpoint / LEGACY_TRAINABLE_FILE
    return legacy if legacy.is_file() and not (checkpoint / TRAINABLE_FILE).is_file() else checkpoint / TRAINABLE_FILE


def adopt_legacy_weights(checkpoint: Path) -> None:
    """A checkpoint saved under the legacy file name gets the name the Trainer's resume looks for."""
    if weights_file(checkpoint).name == LEGACY_TRAINABLE_FILE:
        os.replace(checkpoint / LEGACY_TRAINABLE_FILE, checkpoint / TRAINABLE_FILE)


def checkpoint_step(checkpoint: str | os.PathLike) -> int | None:
    """The optimizer step a `checkpoint-<step>` folder was saved after (None: not such a name)."""
    name = Path(checkpoint).name
    step = name.rpartition("-")[2]
    return int(step) if name.startswith("checkpoint-") and step.isdigit() else None


def _checkpoints_newest_first(checkpoint_dir: str | os.PathLike) -> list[Path]:
    steps = [(step, p) for p in Path(checkpoint_dir).glob("checkpoint-*") if (step := checkpoint_step(p)) is not None]
    return [checkpoint for _, checkpoint in sorted(steps, reverse=True)]


def _finite_weights(checkpoint: Path) -> bool:
    """Whether the checkpoint's trainable weights load and are all finite."""
    try:
        tensors = load_file(str(weights_file(checkpoint)))
    except (OSError, SafetensorError):
        return False
    return all(bool(torch.isfinite(t).all()) for t in tensors.values())


def last_good_checkpoint(checkpoint_dir: str | os.PathLike) -> Path | None:
    """The newest `checkpoint-<step>` in `checkpoint_dir` whose saved weights are all finite: where to go back to
    after a NaN/inf loss (a checkpoint saved after the weights blew up is no good)."""
    return next((c for c in _checkpoints_newest_first(checkpoint_dir) if _finite_weights(c)), None)


def _incompleteness(checkpoint: Path) -> str | None:
    """What a resume from `checkpoint` could not restore (None: nothing): weights, optimizer and scheduler state, RNG
    state (one file, or one per rank) and a readable trainer state. A kill mid-save or mid-rotation leaves some out."""
    missing = [name for name in RESUME_FILES if not (checkpoint / name).is_file()]
    if missing:
        return f"lacks {', '.join(missing)}"
    if not any(checkpoint.glob("rng_state*.pth")):
        return "lacks its RNG state (rng_state*.pth)"
    try:
        json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "has an unreadable trainer_state.json"
    return None


def why_not_resumable(checkpoint: Path) -> str | None:
    """Why a resume passes `checkpoint` over (None: it is complete, with finite weights)."""
    problem = _incompleteness(checkpoint)
    if problem is None and not _finite_weights(checkpoint):
        problem = "has weights that are unreadable or not finite"
    return problem


def resumable_checkpoints(checkpoint_dir: str | os.PathLike) -> Iterator[Path]:
    """The complete checkpoints with finite weights in `checkpoint_dir`, newest first, each judged when reached."""
    return (c for c in _checkpoints_newest_first(checkpoint_dir) if why_not_resumable(c) is None)


def passed_over_checkpoints(checkpoint_dir: str | os.PathLike) -> dict[str, str]:
    """Each `checkpoint-<step>` in `checkpoint_dir` a resume cannot continue from, newest first, with why."""
    reasons = {c.name: why_not_resumable(c) for c in _checkpoints_newest_first(checkpoint_dir)}
    return {name: reason for name, reason in reasons.items() if reason is not None}


def resumable_checkpoint(checkpoint_dir: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint with finite weights in `checkpoint_dir` (None if there is none): where an
    interrupted run continues."""
    return next(resumable_checkpoints(checkpoint_dir), None)


def best_checkpoint_name(checkpoint: Path) -> str | None:
    """The folder name of the best checkpoint a checkpoint's trainer state records (None: none recorded, or no
    readable state), whatever folder its absolute path was in when saved."""
    try:
        best = json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8")).get("best_model_checkpoint")
    except (OSError, ValueError, AttributeError):
        return None
    return Path(best).name if isinstance(best, str) and best else None


def checkpoint_damage(checkpoint: Path) -> str | None:
    """What is wrong with a complete checkpoint that the Trainer's resume would fail on deep inside torch or
    transformers (None: nothing found): a torch.save archive (optimizer, scheduler, RNG or scaler state) that is
    damaged, or a trainer_state.json that is not a trainer state. Read, not loaded: nothing of it is unpickled."""
    for path in sorted(checkpoint.glob("*.pt")) + sorted(checkpoint.glob("rng_state*.pth")):
        problem = _archive_damage(path)
        if problem:
            return f"{path.name} {problem}"
    return _trainer_state_damage(checkpoint / "trainer_state.json")


def _archive_damage(path: Path) -> str | None:
    """Why the torch.save archive `path` cannot be loaded (truncated, overwritten, unreadable), or None."""
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()  # reads every entry and checks its CRC
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as error:
        return f"is not a readable torch.save archive ({type(error).__name__}: {error})"
    return f"holds a damaged entry {bad!r}" if bad is not None else None


_STATE_FIELDS = frozenset(field.name for field in dataclasses.fields(TrainerState))
_NUMBER = (int, float)
# The trainer state's fields the Trainer computes with on resume: the types it needs them in, and whether they must be
# there (the others may be left out or null).
_STATE_TYPES: dict[str, tuple[tuple[type, ...], bool]] = {
    "global_step": ((int,), True),
    "max_steps": ((int,), True),
    "log_history": ((list,), True),
    "epoch": (_NUMBER, False),
    "num_train_epochs": (_NUMBER, False),
    "logging_steps": (_NUMBER, False),
    "eval_steps": (_NUMBER, False),
    "save_steps": (_NUMBER, False),
    "train_batch_size": ((int,), True),  # the Trainer divides it on resume
    "best_metric": (_NUMBER, False),
    "best_global_step": ((int,), False),
    "best_model_checkpoint": ((str,), False),
    "stateful_callbacks": ((dict,), False),
}


def _trainer_state_damage(path: Path) -> str | None:
    """Why `path` is not a trainer state the Trainer can resume from, or None."""
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        return f"{path.name} cannot be read as JSON ({error})"
    if not isinstance(state, dict):
        return f"{path.name} holds a JSON {type(state).__name__}, not a trainer state object"
    unknown = sorted(set(state) - _STATE_FIELDS)
    if unknown:
        return f"{path.name} holds keys a trainer state does not have: {unknown[:5]}"
    if isinstance(state.get("log_history"), list) and not all(isinstance(e, dict) for e in state["log_history"]):
        return f"{path.name}: its log_history holds entries that are not objects"
    wrong = [key for key, (types, required) in _STATE_TYPES.items() if not _fits(state.get(key), types, required)]
    if wrong:
        return f"{path.name} lacks the trainer state's {wrong} or holds values of the wrong type there"
    callbacks = _callback_states_damage(state.get("stateful_callbacks") or {})
    if callbacks is not None:
        return f"{path.name}: its stateful_callbacks {callbacks}"
    # the Trainer names a checkpoint after the step it saved it at; another step would resume past the run's end (and
    # report a run of no further steps as finished) or before its start
    step, saved_at = state["global_step"], checkpoint_step(path.parent)
    if step < 0 or (saved_at is not None and step != saved_at):
        where = "" if saved_at is None else f", but {path.parent.name} was saved after step {saved_at}"
        return f"{path.name} says global_step {step}{where}"
    return None


# The callback states a run saves, which the Trainer rebuilds on resume as `cls(**args)` with `attributes` set: what
# a fresh one holds says which arguments and attributes there are, and of which kind. TrainerControl's is always saved
# (the Trainer writes it back into the resumed state at its next save, failing if it is not there).
_CALLBACK_STATES: dict[str, Any] = {"TrainerControl": TrainerControl, "EarlyStoppingCallback": EarlyStoppingCallback}


def _callback_states_damage(callbacks: Mapping[str, Any]) -> str | None:
    """What is wrong with a trainer state's stateful_callbacks that the Trainer's resume would fail on, or None."""
    if "TrainerControl" not in callbacks:
        return "lack the TrainerControl state the Trainer saves with every checkpoint"
    for name, data in callbacks.items():
        for entry in data if isinstance(data, list) else [data]:
            if not isinstance(entry, dict) or not all(
                isinstance(entry.get(k, {}), dict) for k in ("args", "attributes")
            ):
                return (
                    f"hold {name!r} as {short_repr(entry)}, not a callback state (an object of 'args' and 'attributes')"
                )
            if name not in _CALLBACK_STATES:
                continue  # a callback this run does not have: the Trainer ignores it
            fresh = _CALLBACK_STATES[name]().state()
            for part in ("args", "attributes"):
                for key, value in entry.get(part, {}).items():
                    if key not in fresh[part] or not _same_kind(value, fresh[part][key]):
                        return f"hold {name!r} {part} {key}={short_repr(value)}, which {name} does not take"
    return None


def _same_kind(value: object, default: object) -> bool:
    """Whether a saved callback value is of the kind of a fresh callback's `default` (a bool is no number)."""
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(default, bool)
    if isinstance(default, _NUMBER):
        return isinstance(value, _NUMBER)
    return value is None or isinstance(value, type(default))


def _fits(value: object, types: tuple[type, ...], required: bool) -> bool:
    """Whether a trainer state field's `value` (None when null or left out) is one of `types` (a bool is no number)."""
    if value is None:
        return not required
    return isinstance(value, types) and not isinstance(value, bool)
