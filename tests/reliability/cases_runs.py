"""Bad-input cases at one boundary, runs: training calls, run folders, stores and the CLI commands around them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import transformers

import adapterfusion as af
import adapterfusion.training
from adapterfusion.errors import ConfigError
from adapterfusion.experiments import ResultsStore
from adapterfusion.experiments.errors import ExperimentSpecError
from adapterfusion.tasks import TaskError
from adapterfusion.training import AdapterStore, TrainingError
from adapterfusion.training.errors import RunFileError
from catalogue import Action, BadInput, a_file, cli, edit_json, experiment, experiment_dict
from task_data import DATA_DIR
from tiny_decoders import tiny_decoder
from tiny_models import tiny_encoder

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


# ---- output paths that hold another run's, a store's or the user's files -------------------------------------------
def _prune_into(target: Callable[[Path], Path]) -> Callable[[Path], Action]:
    """prune of the finished fusion run runs/rte/fusion-st-a/seed-1 with --output `target(folder)`."""

    def prepare(folder: Path) -> Action:
        run = _finished_run(folder, "rte", "fusion-st-a", 1)
        output = target(folder)
        return lambda: cli("prune", str(run), "--keep", "1", "--output", str(output))

    return prepare


def _another_runs_prune(folder: Path) -> Path:
    """A folder an earlier prune of another run (seed-2) wrote: its pruning.json names that run."""
    other = _finished_run(folder, "rte", "fusion-st-a", 2)
    (folder / "pruned" / "fusion").mkdir(parents=True)
    record = {"before": {}, "after": {}, "kept": ["rte"], "dropped": ["cb"], "source_run": str(other.resolve())}
    (folder / "pruned" / "pruning.json").write_text(json.dumps(record))
    return folder / "pruned"


def _put_run_missing(name: str) -> Callable[[Path], Action]:
    """AdapterStore.put of a finished st-a run of a tiny BERT whose adapter/ lacks `name` and holds the user's notes."""

    def prepare(folder: Path) -> Action:
        run = _finished_run(folder, "rte", "st-a", 1)
        (run / "adapter" / "adapter.safetensors").unlink()
        model = af.wrap(tiny_encoder("bert"))
        model.add_adapter("rte", "pfeiffer")
        model.add_head("rte", af.ClassificationHead(num_labels=2))
        model.save_adapter("rte", run / "adapter")
        model.save_head("rte", run / "head")
        (run / "adapter" / name).unlink()
        (run / "adapter" / "notes.md").write_text("why this adapter is the good one")
        edit_json(run / "config.json", lambda config: config.update(encoder="some-org/some-encoder"))
        return lambda: AdapterStore(folder / "store").put(run)

    return prepare


def _store_entry(folder: Path) -> Path:
    _finished_run(folder / "st-a", "rte", "st-a", 1, stored=True)
    return AdapterStore(folder / "st-a" / "store").path(str(af.default_encoder_path()), "rte", "st-a", 1)


def _json_onto(target: Callable[[Path, Path], Path], command: str = "evaluate") -> Callable[[Path], Action]:
    """`adapterfusion <command> RUN --json <target(folder, RUN)>`, RUN a finished run inside an experiment's output
    dir (out/, with its experiment.db) and next to an AdapterStore (store/)."""

    def prepare(folder: Path) -> Action:
        run = _finished_run(folder / "out", "rte", "st-a", 1, stored=True)
        ResultsStore(folder / "out").close()
        extra = ("--keep", "1") if command == "prune" else ()
        return lambda: cli(command, str(run), *extra, "--json", str(target(folder, run)))

    return prepare


def _output_dir_holding(files: dict[str, str], output_dir: str = "mine", home: bool = False):
    """`adapterfusion run` of an experiment whose output_dir (relative to the experiment file, or '~' with HOME at
    it when `home`) already holds the user's `files`."""

    def prepare(folder: Path) -> Action:
        mine = folder / "mine"
        for name, text in files.items():
            (mine / name).parent.mkdir(parents=True, exist_ok=True)
            (mine / name).write_text(text)
        path = mine / "experiment.json" if "experiment.json" in files else folder / "experiment.json"
        path.write_text(json.dumps(experiment_dict(folder, output_dir=output_dir)))
        run = lambda: cli("run", str(path), "--no-progress")  # noqa: E731
        if not home:
            return run
        return lambda: _with_home(mine, run)

    return prepare


def _with_home(home: Path, action: Action) -> Any:
    with mock.patch.dict(os.environ, {"HOME": str(home)}):
        return action()


def _ours_holding_the_experiment_file(folder: Path) -> Action:
    """The experiment file saved as experiment.json in an experiment's output dir, with output_dir '.'."""
    ResultsStore(folder / "out").close()
    path = folder / "out" / "experiment.json"
    path.write_text(json.dumps(experiment_dict(folder, output_dir=".")))
    return lambda: cli("run", str(path), "--no-progress")


def _edited_record(folder: Path) -> Action:
    """`adapterfusion run out/experiment.json`, the runner's record of an experiment, edited to name no setup."""
    record = {
        "name": "tiny",
        "encoder": "some-org/some-encoder",
        "tasks": ["rte"],
        "variants": [{"id": "head", "setup": "hed", "options": {}, "training": {}, "adapter_variant": None}],
        "output_dir": "out",
        "spec_hash": "0123456789abcdef",
        "source": "../experiment.json",
    }
    ResultsStore(folder / "out").close()
    (folder / "out" / "experiment.json").write_text(json.dumps(record))
    return lambda: cli("run", str(folder / "out" / "experiment.json"), "--no-progress")


def _layernorm_only_on_llama(folder: Path) -> Action:
    """An experiment of layernorm-only on a tiny Llama-style decoder (RMSNorm only) saved in the case's folder."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(af.default_encoder_path())
    llama = tiny_decoder("llama", vocab_size=tokenizer.vocab_size)
    llama.save_pretrained(folder / "llama")
    tokenizer.save_pretrained(folder / "llama")
    return experiment(encoder=str(folder / "llama"), setups=["head", "layernorm-only"])(folder)


# ---- decoders: instruction data (prompt + answer) and resuming on another model -------------------------------------
_LM_FAST = {"max_steps": 1, "batch_size": 4, "max_length": 32, "patience": None, "logging_steps": 1}


def _tiny_llama(folder: Path, chat_template: str | None = None) -> Path:
    """A tiny random Llama saved with the shipped tokenizer (and `chat_template`, if given) in the case's folder."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(af.default_encoder_path())
    tokenizer.chat_template = chat_template
    tiny_decoder("llama", vocab_size=tokenizer.vocab_size).save_pretrained(folder / "llama")
    tokenizer.save_pretrained(folder / "llama")
    return folder / "llama"


def _answers(folder: Path, train: list[dict[str, str]], **options: Any):
    """A generation task over `train` rows (and four good validation rows), written into the case's folder."""
    from adapterfusion.tasks import instruction_task
    from task_data import write_jsonl

    good = [{"prompt": f"what colour is thing {i} ?", "answer": "blue"} for i in range(4)]
    files = {"train": write_jsonl(folder / "train.jsonl", train), "validation": write_jsonl(folder / "dev.jsonl", good)}
    return instruction_task("answers", data_files={r: str(p) for r, p in files.items()}, **options)


def _train_answers(
    train: list[dict[str, str]],
    template: str | None = None,
    setup_options: dict[str, Any] | None = None,
    **options: Any,
):
    """train(<generation task of `train` rows and task `options`>, 'st-a', setup_options=`setup_options`) on a tiny
    Llama whose tokenizer has the chat template `template`, into the case's folder."""

    def prepare(folder: Path) -> Action:
        spec, llama = _answers(folder, train, **options), _tiny_llama(folder, template)
        return lambda: af.training.train(
            spec,
            "st-a",
            encoder=llama,
            output_dir=folder / "runs",
            training_config=_LM_FAST,
            setup_options=setup_options,
        )

    return prepare


def _resume_on_another_model(folder: Path) -> Action:
    """An rte st-a run on the tiny Llama cut short after its checkpoint (its metrics.json removed, as a kill would
    leave it), then train(..., resume=True) with a copy of that model in another folder."""
    import shutil

    llama = _tiny_llama(folder)
    settings = {**_LM_FAST, "keep_checkpoints": True}
    common = dict(output_dir=folder / "runs", data_dir=DATA_DIR, max_examples={"train": 8, "validation": 4})
    run = af.training.train("rte", "st-a", encoder=llama, training_config=settings, **common)
    run.metrics_path.unlink()
    other = shutil.copytree(llama, folder / "llama-copy")
    return lambda: af.training.train("rte", "st-a", encoder=other, training_config=settings, resume=True, **common)


def _head_on_llama_with_bert_tokenizer(folder: Path) -> Action:
    """train('rte', 'head') on a tiny Llama saved with the shipped (BERT) tokenizer, which makes token_type_ids;
    the run goes to a temporary folder, as the case's folder must stay as it was."""
    import tempfile

    llama = _tiny_llama(folder)

    def action() -> str:
        with tempfile.TemporaryDirectory() as runs:
            result = af.training.train(
                "rte",
                "head",
                encoder=llama,
                data_dir=DATA_DIR,
                output_dir=runs,
                max_examples={"train": 8, "validation": 4},
                training_config=_LM_FAST,
            )
        return f"trained a head on the decoder: accuracy={result.metrics['accuracy']:.2f}"

    return action


CASES: tuple[BadInput, ...] = (
    B(
        "train-st-a-reduction-factor-zero",
        "runs",
        "train('rte', 'st-a', setup_options={'reduction_factor': 0}) (refused only once the encoder and data loaded)",
        TrainingError,
        ("reduction_factor=0", "positive number"),
        lambda folder: (
            lambda: af.training.train("rte", "st-a", output_dir=folder / "runs", setup_options={"reduction_factor": 0})
        ),
    ),
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
        "training-lr-beyond-float32-experiment",
        "experiment files",
        "training: {learning_rate: 1.0e+39} in an experiment file (passed every check, then failed inside torch's "
        "Adam: 'value cannot be converted to type float without overflow', leaving an unfinished run folder)",
        ExperimentSpecError,
        ("training.learning_rate", "learning_rate=1e+39", "<= 3.4e+38"),
        experiment(training={"learning_rate": 1.0e39}),
        cli=True,
    ),
    B(
        "training-lr-zero-cli",
        "command line",
        "adapterfusion train-adapter --learning-rate 0",
        ConfigError,
        ("--learning-rate 0", "must be a finite number > 0"),
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
        ("--epochs 0", "must be a finite number > 0"),
        lambda folder: _training_command(folder, "train-adapter", "--task", "rte", "--epochs", "0"),
        cli=True,
    ),
    B(
        "training-seed-negative-cli",
        "command line",
        "adapterfusion train-adapter --seed -1",
        ConfigError,
        ("--seed -1", "must be an integer in 0..4294967295"),
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
        ConfigError,
        ("--adapter-seed -1", "must be an integer in 0..4294967295"),
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
    # output paths: another run's, a store entry's or the user's files would be replaced (data loss)
    B(
        "prune-output-another-run",
        "silent acceptances",
        "adapterfusion prune RUN --output <another finished run folder> (its trained fusion and head were replaced)",
        ConfigError,
        ("seed-2", "is not an earlier prune output", "seed-1", "another folder"),
        _prune_into(lambda folder: _finished_run(folder, "rte", "fusion-st-a", 2)),
        cli=True,
    ),
    B(
        "prune-output-store-entry",
        "silent acceptances",
        "adapterfusion prune RUN --output <an AdapterStore entry> (its stored head was replaced by the fusion's)",
        ConfigError,
        ("entry.json", "is not an earlier prune output", "AdapterStore entry", "another folder"),
        _prune_into(_store_entry),
        cli=True,
    ),
    B(
        "prune-output-another-prune",
        "silent acceptances",
        "adapterfusion prune RUN --output <the folder an earlier prune of another run wrote>",
        ConfigError,
        ("pruning.json", "is not an earlier prune output", "seed-1", "another folder"),
        _prune_into(_another_runs_prune),
        cli=True,
    ),
    B(
        "run-output-dir-user-files",
        "silent acceptances",
        "experiment output_dir = a folder of the user's files (experiment.json, report/tables.md were overwritten)",
        ExperimentSpecError,
        ("output_dir", "is not empty", "'report'", "experiment.db", "new or empty folder"),
        _output_dir_holding({"notes.json": "{}", "report/tables.md": "# my tables"}),
        cli=True,
    ),
    B(
        "run-output-dir-home",
        "silent acceptances",
        "experiment output_dir '~' (the home folder's report/tables.md was overwritten)",
        ExperimentSpecError,
        ("output_dir", "is not empty", "'report'", "new or empty folder"),
        _output_dir_holding({"report/tables.md": "# my tables"}, output_dir="~", home=True),
        cli=True,
    ),
    B(
        "run-output-dir-is-experiment-folder",
        "silent acceptances",
        "adapterfusion run exp/experiment.json with output_dir '.' (the experiment file itself was overwritten)",
        ExperimentSpecError,
        ("output_dir", "is not empty", "'experiment.json'", "new or empty folder"),
        _output_dir_holding({"experiment.json": ""}, output_dir="."),
        cli=True,
    ),
    B(
        "run-output-dir-ours-holding-experiment-file",
        "silent acceptances",
        "adapterfusion run out/experiment.json, a hand-written experiment file in an experiment's output dir, with "
        "output_dir '.' (the runner's record would replace it)",
        ExperimentSpecError,
        ("output_dir", "'experiment.json'", "which we did not write there"),
        _ours_holding_the_experiment_file,
        cli=True,
    ),
    B(
        "run-edited-record",
        "experiment files",
        "adapterfusion run out/experiment.json, the runner's record edited to name an unknown setup",
        ExperimentSpecError,
        ("variants[0].setup", "unknown setup 'hed'", "Did you mean 'head'?", "Known setups"),
        _edited_record,
        cli=True,
    ),
    B(
        "run-layernorm-only-rmsnorm-decoder",
        "experiment files",
        "layernorm-only in an experiment on a Llama-style decoder (every job failed at run time: no LayerNorm)",
        ExperimentSpecError,
        ("setups[1]", "layernorm-only", "LlamaModel has no torch.nn.LayerNorm", "LlamaRMSNorm", "st-a"),
        _layernorm_only_on_llama,
        cli=True,
    ),
    B(
        "evaluate-json-run-config",
        "silent acceptances",
        "adapterfusion evaluate RUN --json RUN/config.json (the run's record was replaced; the run was lost)",
        ConfigError,
        ("--json", "config.json", "the run folder", "path outside it"),
        _json_onto(lambda folder, run: run / "config.json"),
        cli=True,
    ),
    B(
        "evaluate-json-run-weights",
        "silent acceptances",
        "adapterfusion evaluate RUN --json RUN/adapter/adapter.safetensors",
        ConfigError,
        ("--json", "adapter.safetensors", "the run folder", "path outside it"),
        _json_onto(lambda folder, run: run / "adapter" / "adapter.safetensors"),
        cli=True,
    ),
    B(
        "prune-json-experiment-db",
        "silent acceptances",
        "adapterfusion prune RUN --json <the experiment.db of the experiment RUN belongs to>",
        ConfigError,
        ("--json", "experiment.db", "an experiment's output dir", "path outside it"),
        _json_onto(lambda folder, run: folder / "out" / "experiment.db", "prune"),
        cli=True,
    ),
    B(
        "evaluate-json-store-entry",
        "silent acceptances",
        "adapterfusion evaluate RUN --json <a file of an AdapterStore entry>",
        ConfigError,
        ("--json", "entry.json", "an AdapterStore entry", "path outside it"),
        _json_onto(lambda folder, run: next((folder / "out" / "store").rglob("entry.json"))),
        cli=True,
    ),
    B(
        "train-run-answer-without-tokens",
        "silent acceptances",
        "train() of a generation task with an answer of characters the tokenizer drops ('\\u200b' to WordPiece; it "
        "passed the blank-answer check and the row trained on the end token alone)",
        TaskError,
        ("split 'train', row 0", "the answer in field 'answer'", "has no tokens", "write the answer or drop the row"),
        _train_answers(
            [{"prompt": "what colour is the sea ?", "answer": "\u200b"}, {"prompt": "sky", "answer": "blue"}]
        ),
    ),
    B(
        "train-run-answer-holds-end-token",
        "silent acceptances",
        "train() of a generation task whose answers end with the end token's text ('blue [SEP]' to a tokenizer that "
        "ends answers with [SEP]; trained on a doubled end, and exact_match could never match a row)",
        TaskError,
        ("split 'train', row 0", "ends with the end token '[SEP]'", "appended to every answer", "remove '[SEP]'"),
        _train_answers([{"prompt": "what colour is the sky ?", "answer": "blue [SEP]"}]),
    ),
    B(
        "train-run-generation-pooling",
        "silent acceptances",
        "train(<generation task>, 'st-a', setup_options={'pooling': 'mean'}) (accepted, and recorded in the run's "
        "options, though a generation task has no head to pool for)",
        TrainingError,
        ("pooling='mean'", "'answers' is a generation task", "adds no head", "leave pooling out"),
        _train_answers([{"prompt": "sky", "answer": "blue"}], setup_options={"pooling": "mean"}),
    ),
    B(
        "train-run-chat-template-raises",
        "silent acceptances",
        "train() of a generation task with chat_template=True on a decoder whose template raises on a lone user turn "
        "(a raw jinja2 TemplateError from the tokenizer)",
        TaskError,
        ("chat template", "fails on a prompt as one user turn", "must start with a system", "chat_template=False"),
        _train_answers(
            [{"prompt": "sky", "answer": "blue"}],
            template="{{ raise_exception('Conversation must start with a system message') }}",
            chat_template=True,
        ),
    ),
    B(
        "train-run-chat-template-drops-prompt",
        "silent acceptances",
        "train() of a generation task with chat_template=True on a decoder whose template writes the roles but no "
        "message content (trained answers to prompts the model never read)",
        TaskError,
        ("chat template", "leaves the prompt out", "'sky' becomes", "chat_template=False"),
        _train_answers(
            [{"prompt": "sky", "answer": "blue"}],
            template="{% for m in messages %}<|{{ m['role'] }}|>{% endfor %}",
            chat_template=True,
        ),
    ),
    B(
        "store-put-run-missing-adapter-config",
        "silent acceptances",
        "AdapterStore.put(RUN) of a run whose adapter/ lacks adapter_config.json and holds the user's notes.md (an "
        "entry was stored without the config, which no load could read, with the notes copied into it)",
        TrainingError,
        ("adapter_config.json", "is missing", "the run saved no adapter there", "train it again"),
        _put_run_missing("adapter_config.json"),
    ),
    B(
        "train-run-every-answer-dropped",
        "silent acceptances",
        "train() of a generation task with drop_unlabelled=True whose train rows all lack an answer (a raw "
        "ValueError from datasets: \"Column 'truncated' doesn't exist\")",
        TaskError,
        ("train.jsonl", "none of the 2 rows of the train split has an answer", "'answer'", "drop_unlabelled=True"),
        _train_answers([{"prompt": "sky", "answer": ""}, {"prompt": "sea", "answer": ""}], drop_unlabelled=True),
    ),
    B(
        "train-run-resume-another-model",
        "silent acceptances",
        "train(..., resume=True) of an interrupted decoder run, with another model folder (said 'encoder_key differs' "
        "and that other weights were saved at the encoder's path)",
        TrainingError,
        ("cannot resume", "the encoder was", "llama'", "llama-copy'", "remove", "checkpoints"),
        _resume_on_another_model,
    ),
    B(
        "train-run-decoder-with-bert-tokenizer",
        "silent acceptances",
        "train('rte', 'head') on a decoder saved with a tokenizer that makes token_type_ids (not an error; was a "
        "ConfigError at the first step, 'LlamaModel.forward takes no token_type_ids', over an unfinished run folder)",
        None,
        ("trained a head on the decoder: accuracy=",),
        _head_on_llama_with_bert_tokenizer,
    ),
)
