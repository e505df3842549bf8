"""The bad-input catalogue: one case per kind of bad input a user can hand the library, each of which must get our
own error type with a specific message (which file, key or value; what was expected), raised by our code rather than
from deep inside torch/transformers, and must leave everything already saved untouched (files byte for byte; a
model's adapters, fusions and heads). CLI cases must exit with status 2 and a one-line message, no traceback.

scripts/bad_input_table.py runs the same CASES with run_case and writes docs/bad-inputs.md from the outcomes.
Each case's `prepare(folder)` builds the bad input in an empty folder and returns the action that feeds it in. The
machinery is in catalogue.py; later cases are in the cases_*.py modules, one per boundary, gathered into CASES here."""

from __future__ import annotations

import contextlib
import gzip
import json
import logging
import shutil
import sqlite3
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModel, AutoTokenizer

import adapterfusion as af
import adapterfusion.training
import cases_analysis_pruning
import cases_blocks
import cases_cli_reports
import cases_concurrency
import cases_decoder_training
import cases_devices
import cases_encoders
import cases_experiments
import cases_files
import cases_forward
import cases_fusion_configs
import cases_generate
import cases_heads
import cases_heads_spans
import cases_hub
import cases_instruction_data
import cases_interop_decoders
import cases_leftovers
import cases_loading
import cases_metrics
import cases_overwrites
import cases_pieces
import cases_pipelines_analysis
import cases_recording
import cases_run_files
import cases_run_results
import cases_runs
import cases_save_targets
import cases_saved_files
import cases_scalearn_multitask
import cases_serving
import cases_serving_http
import cases_store_interop
import cases_sweep_pieces
import cases_sweeps_analyses
import cases_task_data
import cases_task_definitions
import cases_training_loop
import cases_training_use
import cases_unchecked
from adapterfusion.experiments import ResultsStore
from adapterfusion.experiments.errors import ExperimentError, ExperimentSpecError, ResultsStoreError
from adapterfusion.experiments.plan import plan_jobs
from adapterfusion.experiments.spec import load_spec
from adapterfusion.tasks import TaskError, TaskSpec, encode_task, load_task_data, load_task_file
from adapterfusion.training import AdapterStore
from catalogue import (
    Action,
    BadInput,
    ModelTouched,
    a_file,
    cli,
    edit_json,
    experiment,
    experiment_dict,
    load_into,
    read_only,
    run_case,
    saved_piece,
)
from test_cli import run_with_closed_stdout
from tiny_models import tiny_encoder, tiny_inputs

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "adapterhub"
PAIR = TaskSpec(name="toy", kind="pair", text_fields=("a", "b"), label_names=("no", "yes"))
CHOICE = TaskSpec(name="toy_mc", kind="multiple_choice", text_fields=("q",), choice_fields=("options",), num_choices=3)


# ---- helpers the cases share -----------------------------------------------------------------------------------


def _with_adapter_config(**changes: Any) -> Callable[[Path], Action]:
    def prepare(folder: Path) -> Action:
        saved = saved_piece(folder)
        edit_json(saved / "adapter_config.json", lambda d: d["config"].update(changes))
        return load_into(af.wrap(tiny_encoder("bert")), "adapter", saved)

    return prepare


def _damaged(file: str, damage: Callable[[bytes], bytes]) -> Callable[[Path], Action]:
    def prepare(folder: Path) -> Action:
        saved = saved_piece(folder)
        (saved / file).write_bytes(damage((saved / file).read_bytes()))
        return load_into(af.wrap(tiny_encoder("bert")), "adapter", saved)

    return prepare


def _into(kind: str, model_type: str = "bert", **encoder: Any) -> Callable[[Path], Action]:
    """A piece saved from the tiny BERT, loaded into another encoder."""

    def prepare(folder: Path) -> Action:
        return load_into(af.wrap(tiny_encoder(model_type, **encoder)), kind, saved_piece(folder, kind))

    return prepare


class _RunsCode:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))  # unpickling would create the marker file


def _legacy_bin(folder: Path) -> Action:
    evil = folder / "evil"
    shutil.copytree(FIXTURES / "bert" / "adapters" / "pf", evil)
    (evil / "adapter.safetensors").unlink()
    marker = folder / "code-ran"
    with open(evil / "pytorch_adapter.bin", "wb") as handle:
        torch.save({"bert.encoder.layer.0.output.adapters.pf.adapter_up.weight": _RunsCode(marker)}, handle)
    load = load_into(af.wrap(AutoModel.from_pretrained(FIXTURES / "bert" / "base_model")), "adapter", evil)

    def action() -> Any:
        try:
            return load()
        finally:
            if marker.exists():
                raise ModelTouched("unpickling ran code: the marker file was created")

    return action


def _fusion_over_placements(folder: Path) -> Action:
    model = af.wrap(tiny_encoder("bert"))
    model.add_adapter("p", "pfeiffer")
    model.add_adapter("h", "houlsby")
    return lambda: model.add_fusion("f", ["p", "h"])


def _fusion_without_its_adapters(folder: Path) -> Action:
    return load_into(af.wrap(tiny_encoder("bert")), "fusion", saved_piece(folder, "fusion"))


def _head_for_other_labels(folder: Path) -> Action:
    return load_into(
        af.wrap(tiny_encoder("bert")),
        "head",
        saved_piece(folder, "head"),
        labels=("entailment", "neutral", "contradiction"),
    )


# ---- datasets ----------------------------------------------------------------------------------------------------
def _write_rows(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.writelines(json.dumps(row) + "\n" for row in rows)
    return path


def _toy_rows(n: int = 4, **changes: Any) -> list[dict]:
    return [{"a": f"premise {i}", "b": f"hypothesis {i}", "label": i % 2, **changes} for i in range(n)]


def _data(spec: TaskSpec, files: dict[str, list[dict] | str]) -> Callable[[Path], Action]:
    """Split files (rows, or raw text for a broken file) in `<folder>/data/<task>/`, loaded with load_task_data."""

    def prepare(folder: Path) -> Action:
        task_dir = folder / "data" / spec.name
        task_dir.mkdir(parents=True)
        for name, rows in files.items():
            if isinstance(rows, str):
                (task_dir / name).write_text(rows)
            else:
                _write_rows(task_dir / name, rows)
        return lambda: load_task_data(spec, folder / "data", seed=1)

    return prepare


def _missing_data_file(folder: Path) -> Action:
    spec = TaskSpec.from_dict({**PAIR.to_dict(), "data_files": {"train": str(folder / "train.jsonl")}})
    return lambda: load_task_data(spec)


def _too_long_texts(folder: Path) -> Action:
    """Not an error: texts over max_length are truncated, counted per split and reported (a warning, which the
    experiment runner writes to the job's log, and `truncation` in the run's config.json)."""
    data = _write_rows(
        folder / "data" / "toy" / "train.jsonl.gz", _toy_rows(3) + [{"a": "word " * 200, "b": "short", "label": 1}]
    )
    tokenizer = AutoTokenizer.from_pretrained(af.default_encoder_path())

    def action() -> str:
        splits, _ = load_task_data(PAIR, data.parents[1], seed=1)
        records: list[logging.LogRecord] = []
        handler = logging.Handler()
        handler.emit = records.append
        logger = logging.getLogger("adapterfusion")
        logger.addHandler(handler)
        try:
            encoded, report = encode_task(PAIR, splits, tokenizer, max_length=32)
        finally:
            logger.removeHandler(handler)
        warned = [r.getMessage() for r in records if r.levelno >= logging.WARNING]
        assert report.truncated == {"train": 1, "validation": 0}, report
        assert max(len(ids) for ids in encoded["train"]["input_ids"]) == 32
        assert warned and report.describe() in warned[0], warned
        return warned[0]

    return action


# ---- experiment files (through the CLI) --------------------------------------------------------------------------


def _experiment_file(name: str, text: bytes | str) -> Callable[[Path], Action]:
    """An experiment file written verbatim (YAML or JSON by its suffix; bytes for a file that is not UTF-8);
    `{out}` in the text stands for the case's output dir."""

    def prepare(folder: Path) -> Action:
        path = folder / name
        data = text if isinstance(text, bytes) else text.replace("{out}", str(folder / "out")).encode("utf-8")
        path.write_bytes(data)
        return lambda: cli("run", str(path), "--no-progress")

    return prepare


_YAML_HEAD = "name: tiny\nencoder: some-org/some-encoder\ntasks: [rte, cb]\noutput_dir: {out}\n"


def _fractional_reduction_factor(folder: Path) -> Action:
    path = folder / "experiment.yaml"
    path.write_text(
        _YAML_HEAD.replace("{out}", str(folder / "out")) + "setups: [{name: st-a, reduction_factor: 0.5}]\n"
    )

    def action() -> str:
        variant = load_spec(path).variants[0]
        return f"variant id {variant.id} with reduction_factor {variant.options['reduction_factor']:g}"

    return action


def _results_db(content: Callable[[Path], None]) -> Callable[[Path], Action]:
    """An output dir whose experiment.db `content` wrote: the runner must refuse it and leave it as it is."""

    def prepare(folder: Path) -> Action:
        (folder / "out").mkdir()
        content(folder / "out" / "experiment.db")
        return experiment()(folder)

    return prepare


def _foreign_db(path: Path) -> None:
    with contextlib.closing(sqlite3.connect(path)) as connection, connection:
        connection.execute("CREATE TABLE users (name TEXT)")


def _owned_output_dir(folder: Path) -> Action:
    other = load_spec(experiment_dict(folder, name="other", tasks=["rte"]))
    with ResultsStore(other.output_dir) as store:
        store.bind(other, plan_jobs(other))
    return experiment()(folder)


# ---- model calls ---------------------------------------------------------------------------------------------
def _forward_with_labels(labels: list) -> Callable[[Path], Action]:
    """A forward of a 2-label classification head with `labels` (checked before cross_entropy sees them)."""

    def prepare(folder: Path) -> Action:
        model = af.wrap(tiny_encoder("bert"))
        model.add_head("rte", af.ClassificationHead(num_labels=2))
        model.activate(head="rte")
        return lambda: model(**tiny_inputs(batch=len(labels)), labels=torch.tensor(labels))

    return prepare


def _stdout_closed(folder: Path) -> Action:
    """Not an error: the command stops writing and exits with 128 + SIGPIPE, printing nothing (tests/test_cli.py
    does the same for `status`)."""

    def action() -> str:
        result = run_with_closed_stdout("list-tasks")
        return f"exit status {result.returncode}, stderr {result.stderr!r}"

    return action


# ---- encoders ------------------------------------------------------------------------------------------------
def _empty_encoder_folder(folder: Path) -> Path:
    empty = folder / "my-encoder"
    empty.mkdir()
    return empty


def _encoder_under_existing_parent(folder: Path) -> Action:
    (folder / "models").mkdir()
    return experiment(encoder="models/minilm-l6")(folder)  # relative to the experiment file's folder


def _train_with_empty_encoder(folder: Path) -> Action:
    empty = _empty_encoder_folder(folder)
    return lambda: af.training.train("rte", "head", encoder=empty, output_dir=folder / "runs")


# ---- output paths ------------------------------------------------------------------------------------------


def _output_dir_read_only(folder: Path) -> Action:
    locked = folder / "locked"
    locked.mkdir()
    run = experiment(output_dir=str(locked / "out"))(folder)

    def action() -> Any:
        with read_only(locked):
            return run()

    return action


def _prune_onto_file(folder: Path) -> Action:
    target = a_file(folder)
    return lambda: cli("prune", str(folder / "run"), "--keep", "1", "--output", str(target))


def _train_into_file(folder: Path) -> Action:
    target = a_file(folder)
    return lambda: af.training.train("rte", "head", output_dir=target)


def _save_onto_file(folder: Path) -> Action:
    model = af.wrap(tiny_encoder("bert"))
    model.add_adapter("a", "pfeiffer")
    target = a_file(folder, "a")
    return lambda: model.save_adapter("a", target)


def _disk_full_at_commit(folder: Path) -> Action:
    """A job marked running, then its result recorded on a full disk (SQLite's max_page_count pinned to the file's
    current size makes every new page fail as a full disk does). What was committed must come back unchanged."""
    spec = load_spec(experiment_dict(folder, tasks=["rte"], setups=["head"]))
    job = plan_jobs(spec)[0].id
    with ResultsStore(spec.output_dir) as store:
        store.bind(spec, plan_jobs(spec))
        store.mark_running(job, str(folder / "run"))
        committed = store.jobs()

    def action() -> Any:
        try:
            with ResultsStore(spec.output_dir) as store:
                pages = store._db.execute("PRAGMA page_count").fetchone()[0]
                store._db.execute(f"PRAGMA max_page_count = {pages}")
                return store.mark_done(job, {"best": {"accuracy": 0.5}, "log": "x" * 1_000_000})
        finally:
            with ResultsStore(spec.output_dir) as store:
                if store.jobs() != committed:
                    raise ModelTouched(f"the store lost committed state: {committed} -> {store.jobs()}")

    return action


# ---- silent acceptances -------------------------------------------------------------------------------------
def _fp16_on_cpu(folder: Path) -> Action:
    def action() -> Any:
        with mock.patch("torch.cuda.is_available", lambda: False):  # a CPU-only machine, wherever the tests run
            return af.training.train("rte", "st-a", training_config={"fp16": True}, output_dir=folder / "runs")

    return action


def _earlier_run(*parts: str) -> Callable[[Path], Action]:
    """A run folder `runs/<parts>` an earlier `train-adapter`/`fuse` left, then the same command again."""

    def prepare(folder: Path) -> Action:
        run = folder.joinpath("runs", *parts[:3])
        run.mkdir(parents=True)
        (run / "metrics.json").write_text('{"best": {"accuracy": 0.71}}\n')
        command = ["fuse", "--sources", "cb"] if parts[1] == "fusion-st-a" else ["train-adapter"]
        return lambda: cli(
            *command,
            "--task",
            parts[0],
            "--seed",
            parts[2].removeprefix("seed-"),
            "--output-dir",
            str(folder / "runs"),
            "--store",
            str(folder / "store"),
        )

    return prepare


def _earlier_fusion_of_other_sources(folder: Path) -> Action:
    """A finished fusion run of rte over mnli, then `adapterfusion fuse` of rte over cb with the same seed (which
    names the same run folder: task, setup and seed)."""
    run = folder / "runs" / "rte" / "fusion-st-a" / "seed-7"
    run.mkdir(parents=True)
    options = {"sources": ["mnli"], "adapter_setup": "st-a", "adapter_seed": None, "fusion_config": None}
    (run / "config.json").write_text(json.dumps({"setup_options": {**options, "pooling": None, "zoo": None}}))
    (run / "metrics.json").write_text('{"best": {"accuracy": 0.71}}\n')
    runs, store = str(folder / "runs"), str(folder / "store")
    command = ("fuse", "--sources", "cb", "--task", "rte", "--seed", "7")
    return lambda: cli(*command, "--output-dir", runs, "--store", store)


def _earlier_store_entry(folder: Path) -> Action:
    entry = AdapterStore(folder / "store").path(str(af.default_encoder_path()), "rte", "st-a", 42)
    entry.mkdir(parents=True)
    (entry / "entry.json").write_text('{"task": "rte"}\n')
    return lambda: cli(
        "train-adapter", "--task", "rte", "--output-dir", str(folder / "runs"), "--store", str(folder / "store")
    )


def _nan_weights(folder: Path) -> Action:
    saved = saved_piece(folder)
    tensors = load_file(saved / "adapter.safetensors")
    tensors["layer.1.output.up.weight"][3, 0] = float("nan")
    save_file(tensors, saved / "adapter.safetensors")
    return load_into(af.wrap(tiny_encoder("bert")), "adapter", saved)


def _adapterhub_version(version: str) -> Callable[[Path], Action]:
    def prepare(folder: Path) -> Action:
        copy = folder / "pf"
        shutil.copytree(FIXTURES / "bert" / "adapters" / "pf", copy)
        edit_json(copy / "adapter_config.json", lambda d: d.update(version=version))
        model = af.wrap(AutoModel.from_pretrained(FIXTURES / "bert" / "base_model"))

        def action() -> str:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                model.load_adapter(copy)
            found = [str(w.message) for w in caught if issubclass(w.category, af.UnknownFormatVersionWarning)]
            assert len(found) == 1 and model.adapter_names == ["pf"], (found, model.adapter_names)
            return found[0]

        return action

    return prepare


# ---- names that would become paths ---------------------------------------------------------------------------
def _saved_name(name: str) -> Callable[[Path], Action]:
    def prepare(folder: Path) -> Action:
        saved = saved_piece(folder)
        edit_json(saved / "adapter_config.json", lambda d: d.update(name=name))
        return load_into(af.wrap(tiny_encoder("bert")), "adapter", saved)

    return prepare


def _store_put_run_with_task(task: str) -> Callable[[Path], Action]:
    def prepare(folder: Path) -> Action:
        run = folder / "run"
        saved = saved_piece(run)
        saved.rename(run / "adapter")
        saved_piece(run, "head").rename(run / "head")
        (run / "config.json").write_text(json.dumps({"encoder": "enc", "task": task, "setup": "st-a", "seed": 1}))
        return lambda: AdapterStore(folder / "store").put(run)

    return prepare


def _task_file_named(name: str) -> Callable[[Path], Action]:
    def prepare(folder: Path) -> Action:
        path = folder / "task.json"
        task = {"name": name, "kind": "single", "text_fields": ["text"], "label_names": ["a", "b"]}
        path.write_text(json.dumps(task))
        return lambda: load_task_file(path, register=False)

    return prepare


def _adapter_named(name: str) -> Callable[[Path], Action]:
    def prepare(folder: Path) -> Action:
        model = af.wrap(tiny_encoder("bert"))
        return lambda: model.add_adapter(name, "pfeiffer")

    return prepare


B = BadInput
_FIRST_CASES: tuple[BadInput, ...] = (
    # saved pieces
    B(
        "adapter-hidden-size",
        "saved pieces",
        "adapter saved from a hidden-32 BERT, loaded into a hidden-48 BERT",
        af.IncompatibleModelError,
        ("hidden_size=32", "hidden_size=48"),
        _into("adapter", hidden_size=48),
    ),
    B(
        "adapter-layer-count",
        "saved pieces",
        "adapter saved from a 2-layer BERT, loaded into a 3-layer BERT",
        af.IncompatibleModelError,
        ("num_layers=2", "num_layers=3"),
        _into("adapter", num_hidden_layers=3),
    ),
    B(
        "adapter-architecture",
        "saved pieces",
        "adapter saved from a BERT, loaded into a RoBERTa",
        af.IncompatibleModelError,
        ("model_type='bert'", "model_type='roberta'"),
        _into("adapter", "roberta"),
    ),
    B(
        "head-hidden-size",
        "saved pieces",
        "head saved from a hidden-32 BERT, loaded into a hidden-48 BERT",
        af.IncompatibleModelError,
        ("head", "hidden_size=32", "hidden_size=48"),
        _into("head", hidden_size=48),
    ),
    B(
        "head-labels",
        "saved pieces",
        "head trained for labels (entailment, not_entailment), loaded for a task "
        "with (entailment, neutral, contradiction)",
        af.IncompatibleModelError,
        ("'not_entailment'", "'contradiction'", "expected"),
        _head_for_other_labels,
    ),
    B(
        "fusion-hidden-size",
        "saved pieces",
        "fusion saved from a hidden-32 BERT, loaded into a hidden-48 BERT",
        af.IncompatibleModelError,
        ("fusion", "hidden_size=32", "hidden_size=48"),
        _into("fusion", hidden_size=48),
    ),
    B(
        "fusion-placements",
        "saved pieces",
        "fusion over a Pfeiffer adapter (output) and a Houlsby adapter (attention + output)",
        af.ConfigError,
        ("placements", "positions=('output',)"),
        _fusion_over_placements,
    ),
    B(
        "fusion-adapter-not-loaded",
        "saved pieces",
        "fusion of adapters a and b loaded before loading them",
        af.NameNotFoundError,
        ("['a', 'b']", "not loaded", "load_adapter()"),
        _fusion_without_its_adapters,
    ),
    B(
        "safetensors-corrupt",
        "saved pieces",
        "adapter.safetensors overwritten with random bytes",
        af.SerializationError,
        ("adapter.safetensors", "corrupt"),
        _damaged("adapter.safetensors", lambda b: bytes((i * 37 + 11) % 256 for i in range(len(b)))),
    ),
    B(
        "safetensors-truncated",
        "saved pieces",
        "adapter.safetensors cut to half its size",
        af.SerializationError,
        ("adapter.safetensors", "truncated"),
        _damaged("adapter.safetensors", lambda b: b[: len(b) // 2]),
    ),
    B(
        "json-corrupt",
        "saved pieces",
        "adapter_config.json replaced by text that is not JSON",
        af.SerializationError,
        ("adapter_config.json", "not valid JSON"),
        _damaged("adapter_config.json", lambda b: b"config: [oops"),
    ),
    B(
        "json-truncated",
        "saved pieces",
        "adapter_config.json cut after 40 bytes",
        af.SerializationError,
        ("adapter_config.json", "truncated"),
        _damaged("adapter_config.json", lambda b: b[:40]),
    ),
    B(
        "config-unknown-key",
        "saved pieces",
        "adapter_config.json with a misspelt key 'reducton_factor'",
        af.ConfigError,
        ("adapter_config.json", "'reducton_factor'", "known keys"),
        _with_adapter_config(reducton_factor=8),
    ),
    B(
        "reduction-factor-zero",
        "saved pieces",
        "adapter_config.json with reduction_factor 0",
        af.ConfigError,
        ("adapter_config.json", "reduction_factor=0", "positive"),
        _with_adapter_config(reduction_factor=0),
    ),
    B(
        "reduction-factor-negative",
        "saved pieces",
        "adapter_config.json with reduction_factor -4",
        af.ConfigError,
        ("adapter_config.json", "reduction_factor=-4", "positive"),
        _with_adapter_config(reduction_factor=-4),
    ),
    B(
        "unknown-non-linearity",
        "saved pieces",
        "adapter_config.json with non_linearity 'swishy'",
        af.ConfigError,
        ("adapter_config.json", "non_linearity='swishy'", "'relu'"),
        _with_adapter_config(non_linearity="swishy"),
    ),
    B(
        "legacy-bin-pickle",
        "saved pieces",
        "AdapterHub pytorch_adapter.bin whose pickle would run code when loaded",
        af.SerializationError,
        ("pytorch_adapter.bin", "unsafe", "weights_only=True"),
        _legacy_bin,
    ),
    # datasets
    B(
        "split-files-missing",
        "datasets",
        "task folder that holds no split file",
        TaskError,
        ("toy", "no split files", "train.jsonl.gz"),
        _data(PAIR, {"notes.txt": "hello"}),
    ),
    B(
        "data-file-missing",
        "datasets",
        "task whose data_files names a file that does not exist",
        TaskError,
        ("train.jsonl", "does not exist", "data_files"),
        _missing_data_file,
    ),
    B(
        "label-outside-set",
        "datasets",
        "row whose label 'maybe' is not one of the task's labels",
        TaskError,
        ("train.jsonl.gz", "row 2", "'maybe'", "not one of"),
        _data(PAIR, {"train.jsonl.gz": _toy_rows(2) + [{"a": "x", "b": "y", "label": "maybe"}]}),
    ),
    B(
        "empty-file",
        "datasets",
        "empty train.jsonl",
        TaskError,
        ("train.jsonl", "is empty"),
        _data(PAIR, {"train.jsonl": ""}),
    ),
    B(
        "wrong-field-names",
        "datasets",
        "rows with fields premise/hypothesis where the task reads a/b",
        TaskError,
        ("missing field(s) ['a', 'b']", "premise", "Fix the field names"),
        _data(PAIR, {"train.jsonl.gz": [{"premise": "p", "hypothesis": "h", "label": 0}]}),
    ),
    B(
        "texts-too-long",
        "datasets",
        "a 200-word text with max_length 32 (not an error: truncated, counted and reported)",
        None,
        ("truncated to 32 tokens", "train 1/", "raise max_length"),
        _too_long_texts,
    ),
    B(
        "choices-wrong-count",
        "datasets",
        "multiple-choice row with 2 choices where the task has 3",
        TaskError,
        ("row 0", "expected 3 choices", "found 2"),
        _data(CHOICE, {"train.jsonl.gz": [{"q": "q?", "options": ["x", "y"], "label": 0}]}),
    ),
    B(
        "json-line-broken",
        "datasets",
        "train.jsonl whose line 6 lacks its closing brace",
        TaskError,
        ("train.jsonl', line 6", "Expecting ',' delimiter", "JSON Lines"),
        _data(
            PAIR,
            {
                "train.jsonl": "".join(json.dumps(row) + "\n" for row in _toy_rows(5))
                + '{"a": "x", "b": "y", "label": 1\n'
                + json.dumps(_toy_rows(1)[0])
                + "\n"
            },
        ),
    ),
    B(
        "label-float-row-5",
        "datasets",
        "row 5's label is 1.5 (Arrow then reads every label as a float: 0 -> 0.0)",
        TaskError,
        ("train.jsonl.gz, row 5", "label 1.5", "not one of"),
        _data(PAIR, {"train.jsonl.gz": _toy_rows(5) + [{"a": "x", "b": "y", "label": 1.5}] + _toy_rows(2)}),
    ),
    # experiment files
    B(
        "unknown-task",
        "experiment files",
        "tasks: [rte, rtee]",
        ExperimentSpecError,
        ("tasks[1]", "unknown task 'rtee'", "Did you mean 'rte'"),
        experiment(tasks=["rte", "rtee"]),
        cli=True,
    ),
    B(
        "unknown-setup",
        "experiment files",
        "setups: [st-b]",
        ExperimentSpecError,
        ("setups[0].name", "unknown setup 'st-b'", "Known setups"),
        experiment(setups=["st-b"]),
        cli=True,
    ),
    B(
        "duplicate-task",
        "experiment files",
        "tasks: [rte, cb, rte]",
        ExperimentSpecError,
        ("tasks[2]", "duplicate 'rte'"),
        experiment(tasks=["rte", "cb", "rte"]),
        cli=True,
    ),
    B(
        "duplicate-variant",
        "experiment files",
        "the same setup twice: setups: [head, head]",
        ExperimentSpecError,
        ("setups[1]", "duplicate setup variant 'head'", "'id'"),
        experiment(setups=["head", "head"]),
        cli=True,
    ),
    B(
        "unknown-key",
        "experiment files",
        "top-level key 'seed' (the key is 'seeds')",
        ExperimentSpecError,
        ("seed", "unknown key", "'seeds'"),
        experiment(seed=3),
        cli=True,
    ),
    B(
        "training-out-of-range",
        "experiment files",
        "training: {learning_rate: -1}",
        ExperimentSpecError,
        ("training.learning_rate", "-1"),
        experiment(training={"learning_rate": -1}),
        cli=True,
    ),
    B(
        "output-dir-owned",
        "experiment files",
        "output_dir that holds another experiment's results",
        ExperimentError,
        ("holds results of experiment 'other'", "--force"),
        _owned_output_dir,
        cli=True,
    ),
    B(
        "duplicate-key-yaml",
        "experiment files",
        "the same key twice in one YAML mapping: {name: st-a, learning_rate: 1.0e-4, learning_rate: 3.0e-4}",
        ExperimentSpecError,
        ("line 6, column 41", "'learning_rate' is given twice", "first at line 6, column 18", "keep only one"),
        _experiment_file(
            "experiment.yaml", _YAML_HEAD + "setups:\n  - {name: st-a, learning_rate: 1.0e-4, learning_rate: 3.0e-4}\n"
        ),
        cli=True,
    ),
    B(
        "duplicate-key-yaml-top",
        "experiment files",
        "top-level key 'setups' written twice (the first list would be dropped)",
        ExperimentSpecError,
        ("line 6", "'setups' is given twice", "first at line 5"),
        _experiment_file("experiment.yaml", _YAML_HEAD + "setups: [head, st-a]\nsetups: [full]\n"),
        cli=True,
    ),
    B(
        "duplicate-key-json",
        "experiment files",
        "the same key twice in one JSON object",
        ExperimentSpecError,
        ("experiment.json, line 3", "'epochs' is given twice", "first at line 2"),
        _experiment_file(
            "experiment.json",
            '{"name": "tiny", "tasks": ["rte"], "output_dir": "{out}",\n'
            ' "setups": [{"name": "head", "epochs": 2,\n'
            '             "epochs": 3}]}\n',
        ),
        cli=True,
    ),
    B(
        "not-utf8",
        "experiment files",
        "experiment file saved as Latin-1 (a 0xe9 byte in a comment)",
        ExperimentSpecError,
        ("not UTF-8", "0xe9", "line 2, column 6", "save the file as UTF-8"),
        _experiment_file("experiment.yaml", b"name: tiny\n# caf\xe9 au lait\ntasks: [rte]\nsetups: [head]\n"),
        cli=True,
    ),
    B(
        "epochs-inf",
        "experiment files",
        "training: {epochs: .inf} (YAML's infinity)",
        ExperimentSpecError,
        ("training.epochs", "epochs=inf", "finite number"),
        _experiment_file("experiment.yaml", _YAML_HEAD + "setups: [head]\ntraining: {epochs: .inf}\n"),
        cli=True,
    ),
    B(
        "reduction-factor-fraction",
        "experiment files",
        "setups: [{name: st-a, reduction_factor: 0.5}] (not an error: "
        "it used to fail blaming a generated id 'st-a-rf0.5' the user never wrote)",
        None,
        ("st-a-rf0_5", "reduction_factor 0.5"),
        _fractional_reduction_factor,
    ),
    B(
        "seed-too-large",
        "experiment files",
        "seeds: [4294967296] (2**32)",
        ExperimentSpecError,
        ("seeds[0]", "4294967296", "0..4294967295", "32-bit"),
        experiment(seeds=[2**32]),
        cli=True,
    ),
    B(
        "cli-seed-too-large",
        "experiment files",
        "adapterfusion train-adapter --seed 4294967296",
        af.ConfigError,
        ("--seed 4294967296", "0..4294967295", "32-bit"),
        lambda folder: (
            lambda: cli(
                "train-adapter",
                "--task",
                "rte",
                "--seed",
                str(2**32),
                "--output-dir",
                str(folder / "runs"),
                "--store",
                str(folder / "store"),
            )
        ),
        cli=True,
    ),
    # model calls
    B(
        "labels-out-of-range",
        "model calls",
        "forward of a num_labels=2 head with labels [0, 2] (was an IndexError from "
        "cross_entropy, a device-side assert on CUDA)",
        af.ConfigError,
        ("labels [2]", "head 'rte'", "num_labels=2", "0..1"),
        _forward_with_labels([0, 2]),
    ),
    B(
        "labels-fractional",
        "model calls",
        "forward of a classification head with float labels [0.0, 1.5] (was silently truncated to 1)",
        af.ConfigError,
        ("labels [1.5]", "integers in 0..1"),
        _forward_with_labels([0.0, 1.5]),
    ),
    B(
        "stdout-closed",
        "command line",
        "`adapterfusion list-tasks | head -1` (or `status | head`): the reader is "
        "gone before the command writes (not an error: it was a BrokenPipeError traceback)",
        None,
        ("exit status 141", "stderr ''"),
        _stdout_closed,
    ),
    # encoders
    B(
        "encoder-folder-empty",
        "encoders",
        "experiment encoder: an existing but empty folder (was: 'install sentencepiece', per job)",
        ExperimentSpecError,
        ("encoder", "/my-encoder'", "holds no config.json", "save_pretrained"),
        lambda folder: experiment(encoder=str(_empty_encoder_folder(folder)))(folder),
        cli=True,
    ),
    B(
        "encoder-path-missing",
        "encoders",
        "experiment encoder: ./models/minilm-l6, which does not exist (was sent to "
        "the Hub: 47 s of retries per job offline)",
        ExperimentSpecError,
        ("encoder", "'./models/minilm-l6' looks like a local path", "does not exist"),
        experiment(encoder="./models/minilm-l6"),
        cli=True,
    ),
    B(
        "encoder-path-parent-exists",
        "encoders",
        "experiment encoder: models/minilm-l6 where the folder models/ exists but models/minilm-l6 does not",
        ExperimentSpecError,
        ("encoder", "'models/minilm-l6' looks like a local path", "/models/minilm-l6' does not exist"),
        _encoder_under_existing_parent,
        cli=True,
    ),
    B(
        "train-encoder-folder-empty",
        "encoders",
        "train('rte', 'head', encoder=<an empty folder>)",
        af.ConfigError,
        ("/my-encoder'", "holds no config.json", "not a HuggingFace model folder"),
        _train_with_empty_encoder,
    ),
    # output paths
    B(
        "output-dir-is-file",
        "output paths",
        "experiment output_dir that is an existing file",
        af.ConfigError,
        ("output_dir", "/taken'", "is a file, not a folder"),
        lambda folder: experiment(output_dir=str(a_file(folder)))(folder),
        cli=True,
    ),
    B(
        "output-dir-under-file",
        "output paths",
        "experiment output_dir inside an existing file (<file>/out)",
        af.ConfigError,
        ("output_dir", "cannot be created", "/taken' is a file"),
        lambda folder: experiment(output_dir=str(a_file(folder) / "out"))(folder),
        cli=True,
    ),
    B(
        "output-dir-read-only",
        "output paths",
        "experiment output_dir in a read-only folder (mode 555)",
        af.ConfigError,
        ("output_dir", "/locked/out'", "read-only for this user"),
        _output_dir_read_only,
        cli=True,
    ),
    B(
        "train-output-dir-file",
        "output paths",
        "train('rte', 'head', output_dir=<an existing file>)",
        af.ConfigError,
        ("output_dir", "/taken'", "is a file, not a folder"),
        _train_into_file,
    ),
    B(
        "save-adapter-onto-file",
        "output paths",
        "save_adapter('a', <an existing file>)",
        af.ConfigError,
        ("save_adapter", "/a'", "is a file, not a folder"),
        _save_onto_file,
    ),
    B(
        "prune-output-file",
        "output paths",
        "adapterfusion prune RUN --keep 1 --output <an existing file> (checked before the run is loaded and evaluated)",
        af.ConfigError,
        ("output", "/taken'", "is a file, not a folder"),
        _prune_onto_file,
        cli=True,
    ),
    B(
        "evaluate-json-folder",
        "output paths",
        "adapterfusion evaluate RUN --json <an existing folder> (checked before the evaluation)",
        af.ConfigError,
        ("--json", "is a folder", "give a file path"),
        lambda folder: lambda: cli("evaluate", str(folder / "run"), "--json", str(folder)),
        cli=True,
    ),
    B(
        "db-disk-full",
        "results store",
        "the disk fills up while a job's result is committed to experiment.db (was a raw sqlite3.OperationalError)",
        ExperimentError,
        ("experiment.db", "the disk is full", "rolled back", "intact", "run the same command again"),
        _disk_full_at_commit,
    ),
    # silent acceptances
    B(
        "fp16-on-cpu",
        "silent acceptances",
        "train(..., training_config={'fp16': True}) on a machine without CUDA (the "
        "HF Trainer took it and trained in full precision on the CPU)",
        af.training.TrainingError,
        ("fp16=True needs a CUDA GPU", "bf16=True"),
        _fp16_on_cpu,
    ),
    B(
        "fuse-sources-empty",
        "silent acceptances",
        "adapterfusion fuse --sources '' (fused the target's adapter alone)",
        af.ConfigError,
        ("--sources ''", "names no source task", "--sources mnli,sst2"),
        lambda folder: (
            lambda: cli(
                "fuse",
                "--task",
                "rte",
                "--sources",
                "",
                "--output-dir",
                str(folder / "runs"),
                "--store",
                str(folder / "store"),
            )
        ),
        cli=True,
    ),
    B(
        "train-adapter-rerun",
        "silent acceptances",
        "adapterfusion train-adapter over the run folder of an earlier "
        "run of the same task/setup/seed (was replaced without a word)",
        af.training.TrainingError,
        ("rte/st-a seed 42 was trained before", "/runs/rte/st-a/seed-42 holds files", "--overwrite"),
        _earlier_run("rte", "st-a", "seed-42"),
        cli=True,
    ),
    B(
        "train-adapter-rerun-store",
        "silent acceptances",
        "adapterfusion train-adapter when the store already holds that task/setup/seed's adapter",
        af.training.TrainingError,
        ("was trained before", "the store holds its adapter", "--overwrite"),
        _earlier_store_entry,
        cli=True,
    ),
    B(
        "fuse-rerun",
        "silent acceptances",
        "adapterfusion fuse over the run folder of an earlier fusion run",
        af.training.TrainingError,
        ("rte/fusion-st-a seed 7 was trained before", "--overwrite"),
        _earlier_run("rte", "fusion-st-a", "seed-7"),
        cli=True,
    ),
    B(
        "fuse-rerun-other-sources",
        "silent acceptances",
        "adapterfusion fuse --sources cb where a fusion over mnli of the same task and seed finished (was told to "
        "reuse it, as if it were this call's result)",
        af.training.TrainingError,
        ("trained before with other settings", "sources ['mnli'] (this call: ['cb'])", "--output-dir", "--overwrite"),
        _earlier_fusion_of_other_sources,
        cli=True,
    ),
    B(
        "nan-weights",
        "silent acceptances",
        "adapter.safetensors with one NaN in layer 1's up-projection (every output through it became NaN)",
        af.SerializationError,
        ("/a: tensor 'layer.1.output.up.weight'", "1 NaN or infinite value(s) of 256", "diverged"),
        _nan_weights,
    ),
    B(
        "adapterhub-unknown-version",
        "silent acceptances",
        "AdapterHub adapter_config.json with version 'adapters.2.0.0' (not an error: loaded, with a warning)",
        None,
        ("'adapters.2.0.0'", "checked with adapters.1.3.0", "compare the loaded model's outputs"),
        _adapterhub_version("adapters.2.0.0"),
    ),
    # names that become paths
    B(
        "variant-id-parent",
        "paths",
        "setup id '../../x' (it names runs/<id>/ and adapters/<id>/)",
        ExperimentSpecError,
        ("setups[0].id", "'../../x'"),
        experiment(setups=[{"name": "head", "id": "../../x"}]),
        cli=True,
    ),
    B(
        "variant-id-absolute",
        "paths",
        "setup id '/tmp/x'",
        ExperimentSpecError,
        ("setups[0].id", "'/tmp/x'"),
        experiment(setups=[{"name": "head", "id": "/tmp/x"}]),
        cli=True,
    ),
    B(
        "experiment-name-parent",
        "paths",
        "experiment name '../x' (the default output_dir is outputs/<name>)",
        ExperimentSpecError,
        ("name", "'../x'"),
        experiment(name="../x"),
        cli=True,
    ),
    B(
        "adapter-name-parent",
        "paths",
        "add_adapter('../x')",
        af.ConfigError,
        ("adapter", "'../x'"),
        _adapter_named("../x"),
    ),
    B(
        "saved-name-parent",
        "paths",
        "adapter_config.json whose name is '../../evil'",
        af.ConfigError,
        ("adapter_config.json", "'../../evil'"),
        _saved_name("../../evil"),
    ),
    B(
        "store-run-task-parent",
        "paths",
        "AdapterStore.put of a run whose config.json says task '../../escape'",
        af.ConfigError,
        ("config.json", "task", "'../../escape'", "folder name"),
        _store_put_run_with_task("../../escape"),
    ),
    B(
        "store-run-task-absolute",
        "paths",
        "AdapterStore.put of a run whose config.json says task '/tmp/escape'",
        af.ConfigError,
        ("config.json", "task", "'/tmp/escape'", "folder name"),
        _store_put_run_with_task("/tmp/escape"),
    ),
    B(
        "task-file-name-parent",
        "paths",
        "task description file whose name is '../x'",
        TaskError,
        ("task.json", "'../x'", "invalid"),
        _task_file_named("../x"),
    ),
    # the results store of an output dir
    B(
        "results-db-damaged",
        "results store",
        "output_dir whose experiment.db is damaged (overwritten with other bytes)",
        ResultsStoreError,
        ("experiment.db", "cannot be read", "leaves it as it is", "move it aside"),
        _results_db(lambda path: path.write_bytes(bytes(range(256)) * 16)),
        cli=True,
    ),
    B(
        "results-db-foreign",
        "results store",
        "output_dir holding an experiment.db of another program (a SQLite database with other tables)",
        ResultsStoreError,
        ("experiment.db", "something else", "['users']"),
        _results_db(_foreign_db),
        cli=True,
    ),
)


# ---- every case, here and in the cases_*.py modules ------------------------------------------------------------
CASES: tuple[BadInput, ...] = (
    *_FIRST_CASES,
    *cases_forward.CASES,
    *cases_encoders.CASES,
    *cases_files.CASES,
    *cases_pieces.CASES,
    *cases_runs.CASES,
    *cases_blocks.CASES,
    *cases_task_data.CASES,
    *cases_unchecked.CASES,
    *cases_recording.CASES,
    *cases_generate.CASES,
    *cases_experiments.CASES,
    *cases_serving.CASES,
    *cases_sweep_pieces.CASES,
    *cases_saved_files.CASES,
    *cases_overwrites.CASES,
    *cases_run_files.CASES,
    *cases_serving_http.CASES,
    *cases_training_use.CASES,
    *cases_store_interop.CASES,
    *cases_heads_spans.CASES,
    *cases_pipelines_analysis.CASES,
    *cases_cli_reports.CASES,
    *cases_save_targets.CASES,
    *cases_metrics.CASES,
    *cases_decoder_training.CASES,
    *cases_run_results.CASES,
    *cases_loading.CASES,
    *cases_concurrency.CASES,
    *cases_analysis_pruning.CASES,
    *cases_leftovers.CASES,
    *cases_training_loop.CASES,
    *cases_heads.CASES,
    *cases_fusion_configs.CASES,
    *cases_interop_decoders.CASES,
    *cases_devices.CASES,
    *cases_hub.CASES,
    *cases_task_definitions.CASES,
    *cases_scalearn_multitask.CASES,
    *cases_sweeps_analyses.CASES,
    *cases_instruction_data.CASES,
)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input_gets_a_specific_error_and_touches_nothing(case, tmp_path):
    outcome = run_case(case, tmp_path / case.id)
    assert outcome.ok, f"{case.id}: {outcome.problems}\nmessage: {outcome.message}"
