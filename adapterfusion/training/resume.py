"""Where an interrupted run continues: the newest complete checkpoint in its checkpoints/ folder, if the run's
config.json says it was saved by a run of the same settings (continuing another run's checkpoint would mix two runs).
Every recipe resumes through this one check, naming the config keys that make a checkpoint its own."""

from __future__ import annotations

import itertools
import json
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from adapterfusion.errors import RunFileError
from adapterfusion.io.paths import describe
from adapterfusion.training.checkpoints import checkpoint_damage, passed_over_checkpoints, resumable_checkpoints
from adapterfusion.training.errors import StartOverWarning, TrainingError
from adapterfusion.training.run_files import CONFIG_FILE, read_json

# What makes a checkpoint belong to a train() run: the same task, setup, seed, encoder (its path and the digest of its
# weights: other weights saved at the same path would finish another encoder's run), data (where from, how many rows,
# the sha256 of the files read: an edited file would finish the run on other rows; and of the encoded splits: an edited
# tokenizer gives other tokens from the same files), store and training config.
# Not "encoder_files": the digest of the weights themselves is exact, where files may be re-saved with equal weights.
RESUME_KEYS = (
    "task_spec",
    "setup",
    "setup_options",
    "seed",
    "encoder_key",
    "encoder_identity",
    "store",
    "training",
    "data",
    "data_files",
    "encoded_sha256",
)

# Keys a config.json saved before runs recorded them lacks: such a run resumes as it did then (nothing to compare).
RECORDED_LATER = ("encoder_identity", "data_files", "encoded_sha256")

# TrainingConfig fields that change how a run is logged, kept or computed, not what it trains: a resume may change
# them (checkpointing turned on after running out of memory, a log every step to watch it).
FREE_ON_RESUME = (
    "logging_steps",
    "report_to",
    "dataloader_workers",
    "save_total_limit",
    "keep_checkpoints",
    "gradient_checkpointing",
)


def without_free_settings(training: Mapping[str, Any]) -> dict[str, Any]:
    """`training` less the FREE_ON_RESUME settings: what decides a run's result, which an experiment's job and spec
    hashes cover (a job whose logging settings changed keeps its result and resumes with the new ones)."""
    return {name: value for name, value in training.items() if name not in FREE_ON_RESUME}


# TrainingConfig fields added after runs were already saved, with the value that behaves as those runs did: a run
# saved before a field existed resumes when the call sets that value.
TRAINING_SETTINGS_ADDED_LATER: dict[str, Any] = {"fast_dropout": False}


def resume_point(run_dir: Path, run_config: Mapping[str, Any], keys: Sequence[str] = RESUME_KEYS) -> Path | None:
    """The checkpoint an interrupted run continues from (None: nothing to resume, start over). A checkpoint left by
    a run whose config.json differs from `run_config` in any of `keys` is refused, and so is a damaged one (a file
    that the Trainer would fail to load), with which checkpoint to remove."""
    folder = run_dir / "checkpoints"
    start_over = f"remove {folder} to start over (or train with overwrite=True)"
    found = describe(folder)
    if found not in ("a folder", "nothing"):
        raise TrainingError(
            f"cannot resume {run_dir}: its checkpoints path {str(folder)!r} is {found}, not a folder; remove it to "
            "start the run over (or train with overwrite=True)"
        )
    checkpoints = list(itertools.islice(resumable_checkpoints(folder), 2))  # the newest, and the one before it
    if not checkpoints:
        _say_passed_over(folder)
        return None
    checkpoint = checkpoints[0]
    previous = read_json(
        run_dir / CONFIG_FILE,
        f"it says which run the checkpoint {checkpoint.name} belongs to, so {run_dir} cannot be resumed; {start_over}",
    )
    if not isinstance(previous, dict):
        raise RunFileError(
            f"{run_dir / CONFIG_FILE} holds a JSON {type(previous).__name__}, not the object train() writes; it says "
            f"which run the checkpoint {checkpoint.name} belongs to, so {run_dir} cannot be resumed; {start_over}"
        )
    current = json.loads(json.dumps({key: run_config[key] for key in keys}))  # as config.json holds it
    if isinstance(previous.get("training"), dict):
        previous["training"] = TRAINING_SETTINGS_ADDED_LATER | previous["training"]
        if isinstance(current.get("training"), dict):
            for name in FREE_ON_RESUME:
                for settings in (previous["training"], current["training"]):
                    settings.pop(name, None)
    for key in RECORDED_LATER:
        if key in keys and key not in previous:
            previous[key] = current[key]
    changed = [_describe_change(key, previous.get(key), current[key]) for key in keys]
    if any(change for key, change in zip(keys, changed, strict=True) if key != "encoded_sha256"):
        # another change (max_examples, max_length, the data files) explains encoded data that differ: blaming an
        # edited tokenizer as well would send the user looking for an edit that was never made
        changed = ["" if key == "encoded_sha256" else change for key, change in zip(keys, changed, strict=True)]
    # another model: say which (its folder may end as the first one's, /a/models/bert and /b/models/bert, and share
    # its encoder_key, when its other weights were not saved at the run's encoder path)
    other_weights = "encoder_identity" in keys and previous.get("encoder_identity") != current["encoder_identity"]
    moved = previous.get("encoder") != run_config.get("encoder")
    if "encoder_key" in keys and (previous.get("encoder_key") != current["encoder_key"] or (other_weights and moved)):
        then, now = (
            previous.get("encoder", previous.get("encoder_key")),
            run_config.get("encoder", current["encoder_key"]),
        )
        changed = [
            f"the encoder was {then!r}, now {now!r}" if key == "encoder_key" else change
            for key, change in zip(keys, changed, strict=True)
            if key != "encoder_identity"
        ]
    if any(changed):
        raise TrainingError(
            f"cannot resume {run_dir}: its checkpoint {checkpoint.name} was saved by a run with other settings "
            f"({'; '.join(change for change in changed if change)}); train with the settings it was started with, "
            f"or {start_over}"
        )
    _check_undamaged(checkpoint, checkpoints[1:], start_over)
    return checkpoint


def _say_passed_over(folder: Path) -> None:
    """Warn that a resume starts over although `folder` holds checkpoints (a kill mid-save leaves one incomplete; a
    hand-edited or blown-up one is damaged), naming each and why: a silent start from step 0 looks like a resume."""
    passed_over = passed_over_checkpoints(folder) if describe(folder) == "a folder" else {}
    if passed_over:
        reasons = "; ".join(f"{name} {reason}" for name, reason in passed_over.items())
        warnings.warn(
            f"resume=True: no checkpoint in {folder} can be continued from ({reasons}), so the run starts over "
            "from its first step, and these are removed",
            StartOverWarning,
            stacklevel=3,
        )


def _check_undamaged(checkpoint: Path, older: Sequence[Path], start_over: str) -> None:
    """Refuse to resume from `checkpoint` if the Trainer would fail to load it, saying which one to go back to."""
    damage = checkpoint_damage(checkpoint)
    if damage is None:
        return
    fix = (
        f"Remove {checkpoint} to resume from the one before it ({older[0].name}), or {start_over}"
        if older
        else f"No checkpoint before it is complete: {start_over}"
    )
    raise TrainingError(f"cannot resume from the checkpoint {checkpoint}: it is damaged ({damage}). {fix}")


def _describe_change(key: str, previous: Any, current: Any) -> str:
    """'' when a resume key is unchanged; else what changed, field by field for the training config."""
    if previous == current:
        return ""
    if key == "training" and isinstance(previous, dict) and isinstance(current, dict):
        fields = sorted(name for name in previous.keys() | current.keys() if previous.get(name) != current.get(name))
        return "training differs: " + ", ".join(
            f"{name} was {previous.get(name, '<unset>')!r}, now {current.get(name, '<unset>')!r}" for name in fields
        )
    if key == "encoder_identity" and isinstance(previous, dict) and isinstance(current, dict):
        digest = "weights_sha256"
        if previous.get(digest) != current.get(digest):
            return (
                f"the encoder's weights differ (sha256 {str(previous.get(digest))[:12]} then, "
                f"{str(current.get(digest))[:12]} now: other weights were saved at its path)"
            )
    if key == "data_files" and isinstance(previous, dict) and isinstance(current, dict):
        return "the data files differ: " + ", ".join(
            f"{path} (sha256 {str(previous.get(path, '<not read>'))[:12]} then, "
            f"{str(current.get(path, '<not read>'))[:12]} now)"
            for path in sorted(previous.keys() | current.keys())
            if previous.get(path) != current.get(path)
        )
    if key == "encoded_sha256":
        return (
            "the encoded data differ, from the same data files: the encoder's tokenizer (its vocabulary, special "
            "tokens or chat template) was edited since the run started, or another adapterfusion version encodes them"
        )
    return f"{key} differs"
