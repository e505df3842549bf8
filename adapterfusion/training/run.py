"""The run folder every recipe writes, the start-up every recipe shares, and reading back what a run wrote.

    <output_dir>/<task>/<setup>/seed-<seed>/
        config.json     written first, so a failed run still says what it was: its settings and provenance
                        (library, transformers and git versions, hardware)
        metrics.json    written last: only a finished run has it
        progress.json   rewritten at each epoch for live displays (training/progress.py)
        checkpoints/    the trainer's, removed after a successful run unless TrainingConfig.keep_checkpoints

`train()` (api.py) and `train_multitask()` (multitask.py) resolve their TrainingConfig with `training_config_for`,
then open a `Run`: it checks the encoder and the output folder, seeds, loads the tokenizer and the wrapped encoder,
and writes both JSON files with the format version and provenance. Every JSON file the training package reads back
(a run's files, a store entry, an MT-A encoder's mt_a.json, fusion_attention.json) goes through `read_json`: one
error type, RunFileError, whose message names the file and the fix.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapterfusion._validation import check_mapping
from adapterfusion._version import __version__
from adapterfusion.analysis.fusion_attention import FUSION_ATTENTION_FILE
from adapterfusion.defaults import default_encoder_path, named_encoder
from adapterfusion.encoder_folders import saved_by_save_pretrained
from adapterfusion.encoder_loading import Encoder, load_encoder_model, load_language_model, load_tokenizer
from adapterfusion.encoders import resolve_encoder
from adapterfusion.errors import ConfigError
from adapterfusion.injection import plain_save
from adapterfusion.io.atomic import atomic_write_json, is_temp_name
from adapterfusion.io.paths import check_writable_folder, path_part
from adapterfusion.model import AdaptedModel, wrap
from adapterfusion.run_layout import CONFIG_FILE, METRICS_FILE, MT_A_MARKER_FILE, seed_folder
from adapterfusion.training.config import TrainingConfig
from adapterfusion.training.errors import TrainingError
from adapterfusion.training.hardware import hardware_info
from adapterfusion.training.progress import PROGRESS_FILE
from adapterfusion.training.run_files import LOCK_FILE, RUN_FORMAT_VERSION
from adapterfusion.training.run_lock import lock_holder

ENCODER_DIR = "encoder"  # a run's fine-tuned encoder, where a setup changes encoder weights
# Every file and folder a run writes in its folder: what clear_run_dir may remove, and nothing else.
RUN_ENTRIES = (
    CONFIG_FILE,
    METRICS_FILE,
    LOCK_FILE,
    PROGRESS_FILE,
    FUSION_ATTENTION_FILE,
    "checkpoints",
    "adapter",
    "fusion",
    "head",
    ENCODER_DIR,
    "tasks",  # MT-A's per-task pieces
)


class RunFolder:
    """The two files every run folder has; mixed into the result types (`run_dir` is theirs)."""

    run_dir: Path

    @property
    def config_path(self) -> Path:
        return self.run_dir / CONFIG_FILE

    @property
    def metrics_path(self) -> Path:
        return self.run_dir / METRICS_FILE


def run_dir_for(output_dir: str | os.PathLike, task: str, setup: str, seed: int) -> Path:
    """`<output_dir>/<task>/<setup>/seed-<seed>`; task and setup must be plain names, so it stays inside output_dir."""
    return Path(output_dir) / path_part(task, "task") / path_part(setup, "setup") / seed_folder(seed)


# What a run writes inside the folders of RUN_ENTRIES (paths relative to the run folder), besides the encoder's
# files: a piece's two files (serialization/pieces.py) and the Trainer's checkpoint-<step>/ folders. Removing a run
# removes these and nothing else: a file the user put inside one of those folders (notes in adapter/, a plot in
# checkpoints/) stays, and so does its folder.
_RUN_WRITES = re.compile(
    r"(?:tasks/[^/]+/)?(adapter|fusion|head)/\1(?:\.safetensors|_config\.json)|checkpoints/checkpoint-\d+/.+"
)


def written_by_run(name: str) -> bool:
    """Whether `name` (relative to a run folder, '/'-separated) inside one of RUN_ENTRIES' folders is a file a run
    writes there: a piece's file, a checkpoint's, one save_encoder or MT-A's marker leaves in encoder/ (HuggingFace's
    model and tokenizer files), or the temp file a killed atomic write of one left (io/atomic.py)."""
    folder, _, file = name.rpartition("/")
    if folder == ENCODER_DIR and (saved_by_save_pretrained(file) or file == MT_A_MARKER_FILE):
        return True
    return bool(_RUN_WRITES.fullmatch(name)) or (bool(folder) and is_temp_name(file))


def clear_run_dir(run_dir: str | os.PathLike, keep_checkpoints: bool = False, also: Iterable[str] = ()) -> None:
    """Remove what a run wrote in its folder (RUN_ENTRIES, and the names in `also`) before the run starts again;
    anything else there, such as a file the user put beside the run or inside one of its folders, stays. With
    `keep_checkpoints` its checkpoints/ stay for a resume, and the config.json that says which run they belong to."""
    run_dir = Path(run_dir)
    holder = lock_holder(run_dir / LOCK_FILE)
    if holder is not None and holder != os.getpid():  # its run.lock would go from under a live run, and its files
        raise TrainingError(
            f"run folder {str(run_dir)!r} is being trained by process {holder or '(starting)'} (it holds "
            f"{LOCK_FILE}); wait for that run to end or stop it, or give this run another output folder"
        )
    kept = {"checkpoints", CONFIG_FILE} if keep_checkpoints else set()
    for name in (*RUN_ENTRIES, *also):
        if name not in kept:
            remove_run_entry(run_dir, name, ignore_errors=True)


def remove_run_entry(run_dir: Path, name: str, ignore_errors: bool = False) -> None:
    """Remove the file, link or folder `name` a run wrote in `run_dir` (a link itself, never what it leads to), if
    it is there. Of a folder only the files a run writes go (written_by_run), then the folders that leaves empty: a
    file of the user's inside it stays where it is. `ignore_errors`: a folder's file that cannot be removed stays."""
    entry = run_dir / name
    if not os.path.isdir(entry) or os.path.islink(entry):
        if os.path.lexists(entry):
            entry.unlink()
        return
    emptied = {str(entry)}  # the folders to remove once empty: the entry, and those something was removed from
    for root, folders, files in os.walk(entry, topdown=False):  # links to folders are listed, not followed
        relative = Path(root).relative_to(run_dir).as_posix()
        with contextlib.suppress(*((OSError,) if ignore_errors else ())):
            for file in (*files, *(f for f in folders if os.path.islink(os.path.join(root, f)))):
                if written_by_run(f"{relative}/{file}"):
                    os.unlink(os.path.join(root, file))
                    emptied.add(root)
            if (root in emptied or written_by_run(f"{relative}/x")) and not os.listdir(root):  # x: any file in it
                os.rmdir(root)
                emptied.add(os.path.dirname(root))


def save_encoder(model, tokenizer: Any, directory: Path) -> Path:
    """The encoder of a model without adapters or fusions, as a plain HuggingFace folder (save_pretrained of the
    unwrapped model's weights) with its tokenizer: what a run that changed encoder weights leaves."""
    model.model.save_pretrained(directory, state_dict=plain_encoder_state(model))
    tokenizer.save_pretrained(directory)
    return directory


def plain_encoder_state(model) -> dict[str, Any]:
    """The encoder's state dict under the unwrapped model's keys (what `model.unload()` would save), without
    unloading (injection/plain_save.py). Only for models without adapters."""
    if model.adapter_names or model.fusion_names:
        raise TrainingError("plain_encoder_state: the model holds adapters or fusions; save those with save_* instead")
    return plain_save.plain_state(model.model)


# ---- provenance ----------------------------------------------------------------------------------------------------
def git_sha() -> str | None:
    """The commit of the library's checkout; ADAPTERFUSION_GIT_SHA when it runs from a copy without .git (stripped;
    blank counts as unset: a run recorded '  \n' as its commit)."""
    given = os.environ.get("ADAPTERFUSION_GIT_SHA", "").strip()
    if given:
        return given
    try:
        result = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() or None if result.returncode == 0 else None


def provenance() -> dict[str, Any]:
    """What a run's config.json records about the software and machine it ran on."""
    import transformers

    return {
        "library_version": __version__,
        "transformers_version": transformers.__version__,
        "git_sha": git_sha(),
        "hardware": hardware_info(),
    }


def jsonable(value: Any) -> Any:
    """`value` as plain JSON values: mappings and sequences recursively, objects through their to_dict(), anything
    else by repr()."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "to_dict"):
        return value.to_dict()
    return value if isinstance(value, (str, int, float, bool, type(None))) else repr(value)


# ---- start-up ------------------------------------------------------------------------------------------------------
def training_config_for(setup: str, given: TrainingConfig | Mapping[str, Any] | None, seed: int) -> TrainingConfig:
    """The run's TrainingConfig with its seed: `given` as it is, or a dict of overrides of the setup's paper
    defaults (TrainingConfig.for_setup). The run's seed is the `seed` argument (it names the run folder); a seed in
    `given` that says otherwise is refused, where replacing it would train another seed than the one asked for."""
    if isinstance(given, TrainingConfig):
        if given.seed not in (seed, TrainingConfig.seed):  # the class default: a config that set no seed
            raise _conflicting_seed(f"TrainingConfig(seed={given.seed!r})", seed)
        return given.replace(seed=seed)
    overrides = check_mapping(given, "training_config", "{'learning_rate': 1e-4, 'epochs': 3}")
    if "seed" in overrides and overrides["seed"] != seed:
        raise _conflicting_seed(f"training_config={{'seed': {overrides['seed']!r}}}", seed)
    return TrainingConfig.for_setup(setup, **{**overrides, "seed": seed})


def _conflicting_seed(given: str, seed: int) -> ConfigError:
    return ConfigError(
        f"{given} disagrees with the run's seed={seed!r}: a run's seed is the seed argument (it names the run folder "
        f"seed-<seed>, and the default is 42); pass seed= the seed you want and leave it out of the training config"
    )


@dataclass
class Run(RunFolder):
    """One run being trained: its folder, seed and encoder, and the two JSON files it writes. `writes` is False on
    the non-zero ranks of a distributed launch (torchrun / accelerate launch): they train in step with rank 0 but
    write nothing. `started` is when the run began, for its wall time."""

    run_dir: Path
    seed: int
    encoder: str
    writes: bool = True
    started: float = field(default_factory=time.perf_counter)
    resolved: Encoder | None = field(default=None, repr=False)  # what `encoder` names (encoders.resolve_encoder)

    @classmethod
    def open(
        cls,
        output_dir: str | os.PathLike,
        task: str,
        setup: str,
        seed: int,
        encoder: str | os.PathLike | None,
        writes: bool = True,
    ) -> Run:
        """Check the encoder (default: the shipped MiniLM) and that `output_dir` can be written; nothing is written
        yet, so a caller can still refuse to replace an earlier run."""
        encoder = named_encoder(encoder) if encoder is not None else default_encoder_path()
        resolved = resolve_encoder(encoder)
        return cls(
            run_dir_for(check_writable_folder(output_dir, "output_dir"), task, setup, seed),
            seed,
            str(encoder),
            writes,
            resolved=resolved,
        )

    def begin(self) -> Any:
        """Create the run folder, seed every RNG with the run's seed, and return the encoder's tokenizer."""
        import transformers

        if self.writes:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        transformers.set_seed(self.seed)
        return load_tokenizer(self.source)

    def wrapped_encoder(self, language_model: bool = False) -> AdaptedModel:
        """The encoder, wrapped for adapters (model.wrap), fresh from its folder or Hub id; with `language_model`
        loaded with its LM head (encoder_loading.load_language_model), for generation tasks."""
        return wrap((load_language_model if language_model else load_encoder_model)(self.source))

    @property
    def source(self) -> Encoder:
        return self.resolved or resolve_encoder(self.encoder, reach_hub=False)

    def start_over(self, keep_checkpoints: bool = False) -> None:
        """For overwrite=True, before the new config.json: the earlier run's end marker goes (a crash from here on
        must not leave it looking finished), and so do its checkpoints (a later resume=True would continue the
        earlier run's weights under the new run's settings), unless this run resumes from one of them."""
        if self.writes:
            self.metrics_path.unlink(missing_ok=True)
            if not keep_checkpoints:
                remove_run_entry(self.run_dir, "checkpoints")

    def write_config(self, settings: Mapping[str, Any]) -> None:
        """config.json: the format version, `settings` and the provenance."""
        if self.writes:
            atomic_write_json(
                self.config_path, jsonable({"format_version": RUN_FORMAT_VERSION, **settings, **provenance()})
            )

    def write_metrics(self, results: Mapping[str, Any]) -> dict[str, Any]:
        """metrics.json, the run's last file: the format version, `results` and the wall time so far. Returns what
        was written."""
        metrics = {"format_version": RUN_FORMAT_VERSION, **results, "wall_seconds": time.perf_counter() - self.started}
        if self.writes:
            atomic_write_json(self.metrics_path, metrics)
        return metrics
