"""The bad-input catalogue: one case per kind of bad input a user can hand the library, each of which must get our
own error type with a specific message (which file, key or value; what was expected), raised by our code rather than
from deep inside torch/transformers, and must leave everything already saved untouched (files byte for byte; a
model's adapters, fusions and heads). CLI cases must exit with status 2 and a one-line message, no traceback.

scripts/bad_input_table.py runs the same CASES with run_case and writes docs/bad-inputs.md from the outcomes.
Each case's `prepare(folder)` builds the bad input in an empty folder and returns the action that feeds it in."""
from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import logging
import shutil
import sqlite3
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModel, AutoTokenizer

import adapterfusion as af
from adapterfusion.cli import main as cli_main
from adapterfusion.errors import AdapterFusionError
from adapterfusion.experiments import ResultsStore
from adapterfusion.experiments.errors import ExperimentError, ExperimentSpecError, ResultsStoreError
from adapterfusion.experiments.plan import plan_jobs
from adapterfusion.experiments.spec import load_spec
from adapterfusion.tasks import TaskError, TaskSpec, encode_task, load_task_data, load_task_file
from adapterfusion.training import AdapterStore
from conftest import tiny_encoder

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "adapterhub"
PAIR = TaskSpec(name="toy", kind="pair", text_fields=("a", "b"), label_names=("no", "yes"))
CHOICE = TaskSpec(name="toy_mc", kind="multiple_choice", text_fields=("q",), choice_fields=("options",), num_choices=3)
Action = Callable[[], Any]


@dataclass(frozen=True)
class BadInput:
    """One catalogue entry. `error` None means the input is not an error but must be handled and reported: the
    action then returns the report line. `cli`: fed in through `adapterfusion run`, not the Python API."""

    id: str
    group: str
    tried: str
    error: type[AdapterFusionError] | None
    keywords: tuple[str, ...]
    prepare: Callable[[Path], Action]
    cli: bool = False


@dataclass(frozen=True)
class Outcome:
    """What one case did: the error type's name and message (folder paths shown as <dir>), and the problems found."""

    case: BadInput
    error_type: str
    message: str
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


class _CliExit(Exception):
    def __init__(self, code: int, stderr: str) -> None:
        super().__init__(stderr)
        self.code, self.stderr = code, stderr


class _ModelTouched(Exception):
    """A failed load changed the model it was loaded into."""


# ---- helpers the cases share -----------------------------------------------------------------------------------
def _contents(model: af.AdaptedModel) -> tuple:
    sites = tuple(sorted((s.layer_index, s.position, tuple(s.adapters), tuple(s.fusions)) for s in model.sites))
    return tuple(model.adapter_names), tuple(model.fusion_names), tuple(model.head_names), sites


def _load(model: af.AdaptedModel, kind: str, directory: Path, **kwargs: Any) -> Action:
    """The action `model.load_<kind>(directory)`, which must leave the model as it was when it fails."""
    def action() -> Any:
        before = _contents(model)
        try:
            return getattr(model, f"load_{kind}")(directory, **kwargs)
        finally:
            if _contents(model) != before:
                raise _ModelTouched(f"the failed load changed the model: {before} -> {_contents(model)}")
    return action


def _saved(folder: Path, kind: str = "adapter", **encoder: Any) -> Path:
    """A piece of `kind` saved from a tiny BERT (hidden 32, 2 layers unless `encoder` says otherwise)."""
    model = af.wrap(tiny_encoder("bert", **encoder))
    model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4))
    if kind == "adapter":
        return model.save_adapter("a", folder / "a")
    if kind == "fusion":
        model.add_adapter("b", af.AdapterConfig.pfeiffer(reduction_factor=4))
        model.add_fusion("f", ["a", "b"])
        return model.save_fusion("f", folder / "f")
    model.add_head("h", af.ClassificationHead(num_labels=2, labels=("entailment", "not_entailment")))
    return model.save_head("h", folder / "h")


def _edit_json(path: Path, edit: Callable[[dict], None]) -> None:
    document = json.loads(path.read_text())
    edit(document)
    path.write_text(json.dumps(document))


def _with_adapter_config(**changes: Any) -> Callable[[Path], Action]:
    def prepare(folder: Path) -> Action:
        saved = _saved(folder)
        _edit_json(saved / "adapter_config.json", lambda d: d["config"].update(changes))
        return _load(af.wrap(tiny_encoder("bert")), "adapter", saved)
    return prepare


def _damaged(file: str, damage: Callable[[bytes], bytes]) -> Callable[[Path], Action]:
    def prepare(folder: Path) -> Action:
        saved = _saved(folder)
        (saved / file).write_bytes(damage((saved / file).read_bytes()))
        return _load(af.wrap(tiny_encoder("bert")), "adapter", saved)
    return prepare


def _into(kind: str, model_type: str = "bert", **encoder: Any) -> Callable[[Path], Action]:
    """A piece saved from the tiny BERT, loaded into another encoder."""
    def prepare(folder: Path) -> Action:
        return _load(af.wrap(tiny_encoder(model_type, **encoder)), kind, _saved(folder, kind))
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
    load = _load(af.wrap(AutoModel.from_pretrained(FIXTURES / "bert" / "base_model")), "adapter", evil)

    def action() -> Any:
        try:
            return load()
        finally:
            if marker.exists():
                raise _ModelTouched("unpickling ran code: the marker file was created")
    return action


def _fusion_over_placements(folder: Path) -> Action:
    model = af.wrap(tiny_encoder("bert"))
    model.add_adapter("p", "pfeiffer")
    model.add_adapter("h", "houlsby")
    return lambda: model.add_fusion("f", ["p", "h"])


def _fusion_without_its_adapters(folder: Path) -> Action:
    return _load(af.wrap(tiny_encoder("bert")), "fusion", _saved(folder, "fusion"))


def _head_for_other_labels(folder: Path) -> Action:
    return _load(af.wrap(tiny_encoder("bert")), "head", _saved(folder, "head"),
                 labels=("entailment", "neutral", "contradiction"))


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
    data = _write_rows(folder / "data" / "toy" / "train.jsonl.gz",
                       _toy_rows(3) + [{"a": "word " * 200, "b": "short", "label": 1}])
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
def _cli(*argv: str) -> str:
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        code = cli_main(list(argv))
    if code != 0:
        raise _CliExit(code, stderr.getvalue())
    return stderr.getvalue()


def _experiment_dict(folder: Path, **changes: Any) -> dict:
    return {"name": "tiny", "encoder": "some-org/some-encoder", "tasks": ["rte", "cb"], "setups": ["head"],
            "output_dir": str(folder / "out"), **changes}


def _experiment(**changes: Any) -> Callable[[Path], Action]:
    def prepare(folder: Path) -> Action:
        path = folder / "experiment.json"
        path.write_text(json.dumps(_experiment_dict(folder, **changes)))
        return lambda: _cli("run", str(path), "--no-progress")
    return prepare


def _results_db(content: Callable[[Path], None]) -> Callable[[Path], Action]:
    """An output dir whose experiment.db `content` wrote: the runner must refuse it and leave it as it is."""
    def prepare(folder: Path) -> Action:
        (folder / "out").mkdir()
        content(folder / "out" / "experiment.db")
        return _experiment()(folder)
    return prepare


def _foreign_db(path: Path) -> None:
    with contextlib.closing(sqlite3.connect(path)) as connection, connection:
        connection.execute("CREATE TABLE users (name TEXT)")


def _owned_output_dir(folder: Path) -> Action:
    other = load_spec(_experiment_dict(folder, name="other", tasks=["rte"]))
    with ResultsStore(other.output_dir) as store:
        store.bind(other, plan_jobs(other))
    return _experiment()(folder)


# ---- names that would become paths ---------------------------------------------------------------------------
def _saved_name(name: str) -> Callable[[Path], Action]:
    def prepare(folder: Path) -> Action:
        saved = _saved(folder)
        _edit_json(saved / "adapter_config.json", lambda d: d.update(name=name))
        return _load(af.wrap(tiny_encoder("bert")), "adapter", saved)
    return prepare


def _store_put_run_with_task(task: str) -> Callable[[Path], Action]:
    def prepare(folder: Path) -> Action:
        run = folder / "run"
        saved = _saved(run)
        saved.rename(run / "adapter")
        _saved(run, "head").rename(run / "head")
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
CASES: tuple[BadInput, ...] = (
    # saved pieces
    B("adapter-hidden-size", "saved pieces", "adapter saved from a hidden-32 BERT, loaded into a hidden-48 BERT",
      af.IncompatibleModelError, ("hidden_size=32", "hidden_size=48"), _into("adapter", hidden_size=48)),
    B("adapter-layer-count", "saved pieces", "adapter saved from a 2-layer BERT, loaded into a 3-layer BERT",
      af.IncompatibleModelError, ("num_layers=2", "num_layers=3"), _into("adapter", num_hidden_layers=3)),
    B("adapter-architecture", "saved pieces", "adapter saved from a BERT, loaded into a RoBERTa",
      af.IncompatibleModelError, ("model_type='bert'", "model_type='roberta'"), _into("adapter", "roberta")),
    B("head-hidden-size", "saved pieces", "head saved from a hidden-32 BERT, loaded into a hidden-48 BERT",
      af.IncompatibleModelError, ("head", "hidden_size=32", "hidden_size=48"), _into("head", hidden_size=48)),
    B("head-labels", "saved pieces", "head trained for labels (entailment, not_entailment), loaded for a task "
      "with (entailment, neutral, contradiction)", af.IncompatibleModelError,
      ("'not_entailment'", "'contradiction'", "expected"), _head_for_other_labels),
    B("fusion-hidden-size", "saved pieces", "fusion saved from a hidden-32 BERT, loaded into a hidden-48 BERT",
      af.IncompatibleModelError, ("fusion", "hidden_size=32", "hidden_size=48"), _into("fusion", hidden_size=48)),
    B("fusion-placements", "saved pieces", "fusion over a Pfeiffer adapter (output) and a Houlsby adapter "
      "(attention + output)", af.ConfigError, ("placements", "positions=('output',)"), _fusion_over_placements),
    B("fusion-adapter-not-loaded", "saved pieces", "fusion of adapters a and b loaded before loading them",
      af.NameNotFoundError, ("['a', 'b']", "not loaded", "load_adapter()"), _fusion_without_its_adapters),
    B("safetensors-corrupt", "saved pieces", "adapter.safetensors overwritten with random bytes",
      af.SerializationError, ("adapter.safetensors", "corrupt"), _damaged("adapter.safetensors", lambda b: bytes(
          (i * 37 + 11) % 256 for i in range(len(b))))),
    B("safetensors-truncated", "saved pieces", "adapter.safetensors cut to half its size",
      af.SerializationError, ("adapter.safetensors", "truncated"), _damaged("adapter.safetensors",
                                                                            lambda b: b[:len(b) // 2])),
    B("json-corrupt", "saved pieces", "adapter_config.json replaced by text that is not JSON",
      af.SerializationError, ("adapter_config.json", "not valid JSON"), _damaged("adapter_config.json",
                                                                                 lambda b: b"config: [oops")),
    B("json-truncated", "saved pieces", "adapter_config.json cut after 40 bytes",
      af.SerializationError, ("adapter_config.json", "truncated"), _damaged("adapter_config.json", lambda b: b[:40])),
    B("config-unknown-key", "saved pieces", "adapter_config.json with a misspelt key 'reducton_factor'",
      af.ConfigError, ("adapter_config.json", "'reducton_factor'", "known keys"),
      _with_adapter_config(reducton_factor=8)),
    B("reduction-factor-zero", "saved pieces", "adapter_config.json with reduction_factor 0",
      af.ConfigError, ("adapter_config.json", "reduction_factor=0", "positive"),
      _with_adapter_config(reduction_factor=0)),
    B("reduction-factor-negative", "saved pieces", "adapter_config.json with reduction_factor -4",
      af.ConfigError, ("adapter_config.json", "reduction_factor=-4", "positive"),
      _with_adapter_config(reduction_factor=-4)),
    B("unknown-non-linearity", "saved pieces", "adapter_config.json with non_linearity 'swishy'",
      af.ConfigError, ("adapter_config.json", "non_linearity='swishy'", "'relu'"),
      _with_adapter_config(non_linearity="swishy")),
    B("legacy-bin-pickle", "saved pieces", "AdapterHub pytorch_adapter.bin whose pickle would run code when loaded",
      af.SerializationError, ("pytorch_adapter.bin", "unsafe", "weights_only=True"), _legacy_bin),
    # datasets
    B("split-files-missing", "datasets", "task folder that holds no split file", TaskError,
      ("toy", "no split files", "train.jsonl.gz"), _data(PAIR, {"notes.txt": "hello"})),
    B("data-file-missing", "datasets", "task whose data_files names a file that does not exist", TaskError,
      ("train.jsonl", "does not exist", "data_files"), _missing_data_file),
    B("label-outside-set", "datasets", "row whose label 'maybe' is not one of the task's labels", TaskError,
      ("train.jsonl.gz", "row 2", "'maybe'", "not one of"),
      _data(PAIR, {"train.jsonl.gz": _toy_rows(2) + [{"a": "x", "b": "y", "label": "maybe"}]})),
    B("empty-file", "datasets", "empty train.jsonl", TaskError, ("train.jsonl", "is empty"),
      _data(PAIR, {"train.jsonl": ""})),
    B("wrong-field-names", "datasets", "rows with fields premise/hypothesis where the task reads a/b", TaskError,
      ("missing field(s) ['a', 'b']", "premise", "Fix the field names"),
      _data(PAIR, {"train.jsonl.gz": [{"premise": "p", "hypothesis": "h", "label": 0}]})),
    B("texts-too-long", "datasets", "a 200-word text with max_length 32 (not an error: truncated, counted and "
      "reported)", None, ("truncated to 32 tokens", "train 1/", "raise max_length"), _too_long_texts),
    B("choices-wrong-count", "datasets", "multiple-choice row with 2 choices where the task has 3", TaskError,
      ("row 0", "expected 3 choices", "found 2"),
      _data(CHOICE, {"train.jsonl.gz": [{"q": "q?", "options": ["x", "y"], "label": 0}]})),
    # experiment files
    B("unknown-task", "experiment files", "tasks: [rte, rtee]", ExperimentSpecError,
      ("tasks[1]", "unknown task 'rtee'", "Did you mean 'rte'"), _experiment(tasks=["rte", "rtee"]), cli=True),
    B("unknown-setup", "experiment files", "setups: [st-b]", ExperimentSpecError,
      ("setups[0].name", "unknown setup 'st-b'", "Known setups"), _experiment(setups=["st-b"]), cli=True),
    B("duplicate-task", "experiment files", "tasks: [rte, cb, rte]", ExperimentSpecError,
      ("tasks[2]", "duplicate 'rte'"), _experiment(tasks=["rte", "cb", "rte"]), cli=True),
    B("duplicate-variant", "experiment files", "the same setup twice: setups: [head, head]", ExperimentSpecError,
      ("setups[1]", "duplicate setup variant 'head'", "'id'"), _experiment(setups=["head", "head"]), cli=True),
    B("unknown-key", "experiment files", "top-level key 'seed' (the key is 'seeds')", ExperimentSpecError,
      ("seed", "unknown key", "'seeds'"), _experiment(seed=3), cli=True),
    B("training-out-of-range", "experiment files", "training: {learning_rate: -1}", ExperimentSpecError,
      ("training.learning_rate", "-1"), _experiment(training={"learning_rate": -1}), cli=True),
    B("output-dir-owned", "experiment files", "output_dir that holds another experiment's results",
      ExperimentError, ("holds results of experiment 'other'", "--force"), _owned_output_dir, cli=True),
    # names that become paths
    B("variant-id-parent", "paths", "setup id '../../x' (it names runs/<id>/ and adapters/<id>/)",
      ExperimentSpecError, ("setups[0].id", "'../../x'"), _experiment(setups=[{"name": "head", "id": "../../x"}]),
      cli=True),
    B("variant-id-absolute", "paths", "setup id '/tmp/x'", ExperimentSpecError, ("setups[0].id", "'/tmp/x'"),
      _experiment(setups=[{"name": "head", "id": "/tmp/x"}]), cli=True),
    B("experiment-name-parent", "paths", "experiment name '../x' (the default output_dir is outputs/<name>)",
      ExperimentSpecError, ("name", "'../x'"), _experiment(name="../x"), cli=True),
    B("adapter-name-parent", "paths", "add_adapter('../x')", af.ConfigError, ("adapter", "'../x'"),
      _adapter_named("../x")),
    B("saved-name-parent", "paths", "adapter_config.json whose name is '../../evil'", af.ConfigError,
      ("adapter_config.json", "'../../evil'"), _saved_name("../../evil")),
    B("store-run-task-parent", "paths", "AdapterStore.put of a run whose config.json says task '../../escape'",
      af.ConfigError, ("config.json", "task", "'../../escape'", "folder name"),
      _store_put_run_with_task("../../escape")),
    B("store-run-task-absolute", "paths", "AdapterStore.put of a run whose config.json says task '/tmp/escape'",
      af.ConfigError, ("config.json", "task", "'/tmp/escape'", "folder name"), _store_put_run_with_task("/tmp/escape")),
    B("task-file-name-parent", "paths", "task description file whose name is '../x'", TaskError,
      ("task.json", "'../x'", "invalid"), _task_file_named("../x")),
    # the results store of an output dir
    B("results-db-damaged", "results store", "output_dir whose experiment.db is damaged (overwritten with other "
      "bytes)", ResultsStoreError, ("experiment.db", "cannot be read", "leaves it as it is", "move it aside"),
      _results_db(lambda path: path.write_bytes(bytes(range(256)) * 16)), cli=True),
    B("results-db-foreign", "results store", "output_dir holding an experiment.db of another program (a SQLite "
      "database with other tables)", ResultsStoreError, ("experiment.db", "something else", "['users']"),
      _results_db(_foreign_db), cli=True),
)


# ---- running a case ------------------------------------------------------------------------------------------
def _snapshot(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _raised_by_us(error: BaseException) -> bool:
    frames = traceback.extract_tb(error.__traceback__)
    return bool(frames) and "/adapterfusion/" in frames[-1].filename.replace("\\", "/")


def run_case(case: BadInput, folder: Path) -> Outcome:
    """Prepare the case in the empty `folder`, feed the bad input in, and check what came back."""
    folder.mkdir(parents=True, exist_ok=True)
    action = case.prepare(folder)
    before = _snapshot(folder)
    problems: list[str] = []
    error: BaseException | None = None
    try:
        returned = action()
    except Exception as caught:  # noqa: BLE001 - judging what was raised is the point
        error = caught
    if case.error is None:
        message, error_type = ("" if error is not None else str(returned)), "(handled, no error)"
        if error is not None:
            problems.append(f"raised {type(error).__name__}: {error}")
    elif case.cli:
        message, error_type = (str(error) if error is not None else "").strip(), case.error.__name__
        if not isinstance(error, _CliExit):
            problems.append(f"expected `adapterfusion run` to exit with an error, got {error!r}")
        else:
            lines = error.stderr.strip().splitlines()
            message = lines[-1].removeprefix("error: ") if lines else ""
            if error.code != 2 or len(lines) != 1 or not lines[0].startswith("error: ") or "Traceback" in error.stderr:
                problems.append(f"exit code {error.code} and stderr {error.stderr!r}: not one 'error: ...' line")
    else:
        message, error_type = str(error) if error is not None else "", type(error).__name__
        if not isinstance(error, case.error):
            problems.append(f"expected {case.error.__name__}, got {type(error).__name__}: {error}")
        elif not _raised_by_us(error):
            problems.append(f"{type(error).__name__} was raised outside adapterfusion")
    problems += [f"message lacks {word!r}" for word in case.keywords if word not in message]
    if _snapshot(folder) != before:
        problems.append("files already saved in the folder were changed, added or removed")
    return Outcome(case, error_type, message.replace(str(folder), "<dir>"), tuple(problems))


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input_gets_a_specific_error_and_touches_nothing(case, tmp_path):
    outcome = run_case(case, tmp_path / case.id)
    assert outcome.ok, f"{case.id}: {outcome.problems}\nmessage: {outcome.message}"
