"""Bad-input cases at one boundary, runs: training calls, run folders, stores and the CLI commands around them."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import adapterfusion as af
import adapterfusion.training
from adapterfusion.errors import ConfigError
from adapterfusion.experiments.errors import ExperimentSpecError
from adapterfusion.tasks import TaskError
from adapterfusion.training import AdapterStore, TrainingError
from adapterfusion.training.errors import RunFileError
from catalogue import Action, BadInput, a_file, cli, experiment
from task_data import DATA_DIR

B = BadInput


def _rte_fusion_with_sources(*sources: str) -> Callable[[Path], Action]:
    """train('rte', 'fusion-st-a') fusing `sources`, into the case's folder."""
    return lambda folder: (
        lambda: af.training.train(
            "rte",
            "fusion-st-a",
            output_dir=folder / "runs",
            store=folder / "store",
            setup_options={"sources": list(sources)},
        )
    )


def _train_adapter_with_data_dir_file(folder: Path) -> Action:
    data_dir = a_file(folder)
    return lambda: cli(
        "train-adapter", "--task", "rte", "--data-dir", str(data_dir), "--output-dir", str(folder / "runs")
    )


# ---- helpers -------------------------------------------------------------------------------------------------------
def _finished_run(folder: Path, task: str, setup: str, seed: int, stored: bool = False) -> Path:
    """The run folder `runs/<task>/<setup>/seed-<seed>` of an earlier finished run (and its store entry)."""
    run = folder / "runs" / task / setup / f"seed-{seed}"
    (run / "adapter").mkdir(parents=True)
    (run / "adapter" / "adapter.safetensors").write_bytes(b"the adapter the user keeps")
    (run / "config.json").write_text(json.dumps({"format_version": 1, "task": task, "setup": setup, "seed": seed}))
    (run / "metrics.json").write_text(json.dumps({"format_version": 1, "best": {"accuracy": 0.71}}))
    if stored:
        entry = AdapterStore(folder / "store").path(str(af.default_encoder_path()), task, setup, seed)
        (entry / "adapter").mkdir(parents=True)
        (entry / "adapter" / "adapter.safetensors").write_bytes(b"the stored adapter a fusion fused")
        (entry / "entry.json").write_text(json.dumps({"task": task, "setup": setup, "seed": seed}))
    return run


def _train_again(task: str, setup: str, seed: int, stored: bool = False, **kwargs: Any):
    """An earlier finished run, then train() of the same task/setup/seed into the same output dir and store."""

    def prepare(folder: Path) -> Action:
        _finished_run(folder, task, setup, seed, stored)
        return lambda: af.training.train(
            task, setup, seed=seed, output_dir=folder / "runs", store=folder / "store", **kwargs
        )

    return prepare


def _train_multitask_again(folder: Path) -> Action:
    _finished_run(folder, "mt-a", "mt-a", 42)
    return lambda: af.training.train_multitask(["rte", "cb"], output_dir=folder / "runs", store=folder / "store")


def _crashed_run(folder: Path, task: str = "rte", setup: str = "st-a", seed: int = 42) -> Path:
    """The run folder a crashed `train-adapter` left: config.json and a partial checkpoint, no metrics.json."""
    run = folder / "runs" / task / setup / f"seed-{seed}"
    (run / "checkpoints" / "checkpoint-2").mkdir(parents=True)
    (run / "checkpoints" / "checkpoint-2" / "model.safetensors").write_bytes(b"half a checkpoint")
    (run / "config.json").write_text(json.dumps({"format_version": 1, "task": task, "setup": setup, "seed": seed}))
    return run


def _training_command(folder: Path, command: str = "train-adapter", *extra: str) -> Action:
    return lambda: cli(
        command, "--output-dir", str(folder / "runs"), "--store", str(folder / "store"), "--data-dir", str(DATA_DIR),
        *extra,
    )  # fmt: skip


def _after_crash(folder: Path) -> Action:
    _crashed_run(folder)
    return _training_command(folder, "train-adapter", "--task", "rte")


def _while_running(folder: Path) -> Action:
    """Another process trains runs/rte/st-a/seed-42 right now (it holds the folder's run.lock)."""
    run = folder / "runs" / "rte" / "st-a" / "seed-42"
    run.mkdir(parents=True)
    (run / "config.json").write_text("{}")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time\n"
            "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\n"
            "os.write(fd, f'{os.getpid()}\\n'.encode())\n"
            "time.sleep(120)\n",
            str(run / "run.lock"),
        ]
    )
    while not (run / "run.lock").is_file() or not (run / "run.lock").read_text():
        time.sleep(0.05)
    command = _training_command(folder, "train-adapter", "--task", "rte")

    def action() -> Any:
        try:
            return command()
        finally:
            holder.kill()
            holder.wait()

    return action


def _evaluate_crashed(folder: Path) -> Action:
    run = _crashed_run(folder)
    return lambda: cli("evaluate", str(run))


def _fuse_over_unfinished_source(folder: Path) -> Action:
    _crashed_run(folder, "cb", "st-a", 42)
    return _training_command(folder, "fuse", "--task", "rte", "--sources", "cb", "--max-examples", "8")


def _train(*args: Any, **kwargs: Any):
    return lambda folder: lambda: af.training.train(*args, output_dir=folder / "runs", data_dir=DATA_DIR, **kwargs)


CASES: tuple[BadInput, ...] = (
    # silent acceptances: an earlier result replaced without a word (data loss)
    B(
        "train-api-rerun",
        "silent acceptances",
        "train('cb', 'st-a', seed=1, store=S) again with other settings, over a finished run whose adapter is in "
        "the store (was replaced without a word: overwrite defaulted to True, and fusions of it broke)",
        TrainingError,
        ("cb/st-a seed 1", "was trained before", "the store holds its adapter", "overwrite=True"),
        _train_again("cb", "st-a", 1, stored=True, training_config={"learning_rate": 1e-3}),
    ),
    B(
        "train-api-resume-finished",
        "silent acceptances",
        "train(..., resume=True) over a finished run (it found no checkpoint and trained from scratch over it)",
        TrainingError,
        ("cb/st-a seed 1", "finished", "rebuild_run", "overwrite=True"),
        _train_again("cb", "st-a", 1, stored=True, resume=True),
    ),
    B(
        "train-multitask-rerun",
        "silent acceptances",
        "train_multitask(['rte', 'cb']) over a finished MT-A run folder (was replaced without a word)",
        TrainingError,
        ("mt-a seed 42", "was trained before", "overwrite=True"),
        _train_multitask_again,
    ),
    # silent acceptances: a training value that trains nothing
    B(
        "training-lr-zero-experiment",
        "experiment files",
        "training: {learning_rate: 0} in an experiment file (the job was reported done; the warning only in job.log)",
        ExperimentSpecError,
        ("training.learning_rate", "learning_rate=0", "> 0"),
        experiment(training={"learning_rate": 0}),
        cli=True,
    ),
    B(
        "training-lr-zero-cli",
        "command line",
        "adapterfusion train-adapter --learning-rate 0",
        ConfigError,
        ("learning_rate=0.0", "> 0"),
        lambda folder: _training_command(folder, "train-adapter", "--task", "rte", "--learning-rate", "0"),
        cli=True,
    ),
    B(
        "training-lr-negative-api",
        "silent acceptances",
        "train(..., training_config={'learning_rate': -1e-4})",
        ConfigError,
        ("learning_rate=-0.0001", "> 0"),
        _train("rte", "st-a", training_config={"learning_rate": -1e-4}),
    ),
    B(
        "training-epochs-zero-cli",
        "command line",
        "adapterfusion train-adapter --epochs 0",
        ConfigError,
        ("epochs=0.0", "> 0"),
        lambda folder: _training_command(folder, "train-adapter", "--task", "rte", "--epochs", "0"),
        cli=True,
    ),
    B(
        "training-seed-negative-cli",
        "command line",
        "adapterfusion train-adapter --seed -1",
        ConfigError,
        ("seed=-1", "0..4294967295"),
        lambda folder: _training_command(folder, "train-adapter", "--task", "rte", "--seed", "-1"),
        cli=True,
    ),
    B(
        "training-max-examples-zero",
        "silent acceptances",
        "train(..., max_examples=0) (a run over no examples)",
        TaskError,
        ("max_examples", "0", ">= 1"),
        _train("rte", "st-a", max_examples=0),
    ),
    B(
        "fuse-adapter-seed-negative",
        "command line",
        "adapterfusion fuse --adapter-seed -1 (was told to train a seed -1 adapter first)",
        TrainingError,
        ("adapter_seed=-1", "0..4294967295"),
        lambda folder: _training_command(folder, "fuse", "--task", "rte", "--sources", "cb", "--adapter-seed", "-1"),
        cli=True,
    ),
    # unknown names in a training call
    B(
        "training-config-unknown-key",
        "silent acceptances",
        "train(..., training_config={'learnin_rate': 1e-4}) (a raw TypeError from the dataclass)",
        ConfigError,
        ("'learnin_rate'", "Did you mean 'learning_rate'?", "Known keys"),
        _train("rte", "st-a", training_config={"learnin_rate": 1e-4}),
    ),
    B(
        "train-unknown-setup",
        "silent acceptances",
        "train('rte', 'st_a')",
        TrainingError,
        ("unknown setup 'st_a'", "Did you mean 'st-a'?", "Known setups"),
        _train("rte", "st_a"),
    ),
    B(
        "train-foreign-setup-option",
        "silent acceptances",
        "train('rte', 'st-a', setup_options={'reduction_factr': 4}) (an option of no setup, misspelt)",
        TrainingError,
        ("'reduction_factr'", "Did you mean 'reduction_factor'?", "st-a"),
        _train("rte", "st-a", setup_options={"reduction_factr": 4}),
    ),
    B(
        "train-adapter-data-dir-is-file",
        "command line",
        "adapterfusion train-adapter --data-dir <a file> (was told '<file>/rte does not exist')",
        TaskError,
        ("the data folder", "is a file, not a folder", "<task>/<split>"),
        _train_adapter_with_data_dir_file,
        cli=True,
    ),
    B(
        "train-fusion-source-twice",
        "silent acceptances",
        "train('rte', 'fusion-st-a', setup_options={'sources': ['cb', 'cb']}) (was accepted)",
        TrainingError,
        ("['cb']", "more than once"),
        _rte_fusion_with_sources("cb", "cb"),
    ),
    B(
        "train-fusion-unknown-source",
        "silent acceptances",
        "train('rte', 'fusion-st-a', setup_options={'sources': ['mnlii']}) (was told to train it first)",
        TaskError,
        ("unknown task 'mnlii'", "Did you mean 'mnli'?", "Known tasks"),
        _rte_fusion_with_sources("mnlii"),
    ),
    B(
        "fuse-unknown-source",
        "command line",
        "adapterfusion fuse --task rte --sources nosuchtask (was told to train it first)",
        TaskError,
        ("unknown task 'nosuchtask'", "Known tasks"),
        lambda folder: _training_command(folder, "fuse", "--task", "rte", "--sources", "nosuchtask"),
        cli=True,
    ),
    # the state of a run folder
    B(
        "train-adapter-after-crash",
        "command line",
        "adapterfusion train-adapter over the folder a crashed train-adapter left (was called 'trained before')",
        TrainingError,
        ("rte/st-a seed 42", "unfinished run", "crashed", "--resume", "--overwrite"),
        _after_crash,
        cli=True,
    ),
    B(
        "train-adapter-while-running",
        "command line",
        "a second adapterfusion train-adapter into the run folder another one is training (was called 'trained "
        "before')",
        TrainingError,
        ("rte/st-a seed 42", "another process (pid", "wait for that process"),
        _while_running,
        cli=True,
    ),
    B(
        "evaluate-crashed-run",
        "command line",
        "adapterfusion evaluate on the folder a crashed run left",
        RunFileError,
        ("unfinished run", "crashed", "--resume", "--overwrite"),
        _evaluate_crashed,
        cli=True,
    ),
    B(
        "fuse-source-unfinished",
        "command line",
        "adapterfusion fuse over a source whose train-adapter run crashed (was told to train it first)",
        TrainingError,
        ("cb", "unfinished run", "--resume"),
        _fuse_over_unfinished_source,
        cli=True,
    ),
    # #21's second trial: what the first validators let through
    B(
        "train-training-config-list",
        "silent acceptances",
        "train(..., training_config=[1]) (was a TypeError from dict())",
        ConfigError,
        ("training_config=[1]", "list", "mapping"),
        _train("rte", "st-a", training_config=[1]),
    ),
    B(
        "train-setup-options-list",
        "silent acceptances",
        "train(..., setup_options=['reduction_factor']) (was a ValueError from dict())",
        ConfigError,
        ("setup_options=['reduction_factor']", "list", "mapping"),
        _train("rte", "st-a", setup_options=["reduction_factor"]),
    ),
    B(
        "train-overwrite-string",
        "silent acceptances",
        "train(..., overwrite='no') over a finished run (was replaced: 'no' is truthy)",
        ConfigError,
        ("overwrite='no'", "true or false"),
        _train_again("cb", "st-a", 1, overwrite="no", data_dir=DATA_DIR),
    ),
    B(
        "train-resume-string",
        "silent acceptances",
        "train(..., resume='no')",
        ConfigError,
        ("resume='no'", "true or false"),
        _train("rte", "st-a", resume="no"),
    ),
)
