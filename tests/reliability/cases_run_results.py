"""Bad-input cases at one boundary, results of runs: staleness of recorded results, evaluation of saved runs, scoring
labels and the metric a run is selected on."""

from __future__ import annotations

import atexit
import functools
import json
import shutil
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import adapterfusion as af
import adapterfusion.training
from adapterfusion.errors import ConfigError, RunFileError
from adapterfusion.evaluation import evaluate_run
from adapterfusion.experiments import ExperimentSpec, ResultsStore, plan_jobs
from adapterfusion.experiments.report import build_report
from adapterfusion.experiments.selection import selection_tables
from adapterfusion.experiments.stale import changed_since_run
from adapterfusion.file_digests import file_sha256
from adapterfusion.tasks import TaskError, TaskSpec, compute_metrics, load_task_data
from cases_cli_reports import _bound_store, _edit
from cases_training_use import _saved
from catalogue import Action, BadInput
from task_data import write_jsonl

B = BadInput
GROUP = "run results"

_FAST = {"max_steps": 2, "batch_size": 8, "max_length": 32, "patience": None, "logging_steps": 1}


def _swap_tokens(tokenizer_json: Path, first: str = "the", second: str = "a") -> None:
    """Two words' ids swapped in a saved fast tokenizer's vocabulary: the same text, other tokens."""
    document = json.loads(tokenizer_json.read_text(encoding="utf-8"))
    vocab = document["model"]["vocab"]
    vocab[first], vocab[second] = vocab[second], vocab[first]
    tokenizer_json.write_text(json.dumps(document), encoding="utf-8")


def _stale_tokenizer(folder: Path) -> Action:
    """A done run's config.json recording its encoder's tokenizer files (as train() writes "tokenizer_files"), the
    encoder's vocabulary edited since; the action is the runner's check (changed_since_run), which returns why the
    job runs again."""
    encoder = folder / "encoder"
    encoder.mkdir()
    (encoder / "model.safetensors").write_bytes(b"weights")
    vocab = encoder / "vocab.txt"
    vocab.write_text("[PAD]\nthe\na\n", encoding="utf-8")
    recorded = {"folder": str(encoder), "sha256": {"vocab.txt": file_sha256(vocab)}}
    run = folder / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"task": "rte", "tokenizer_files": recorded}), encoding="utf-8")
    vocab.write_text("[PAD]\na\nthe\n", encoding="utf-8")
    return lambda: changed_since_run(run)


def _st_a_run(folder: Path) -> Path:
    """A tiny st-a run on 16 + 16 rows of the demo RTE data, its encoder (a tiny BERT with the shipped tokenizer) in
    `folder`/bert."""
    from adapterfusion.demo import demo_data_dir

    return af.training.train(
        "rte",
        "st-a",
        seed=1,
        encoder=_saved(folder, "bert"),
        data_dir=demo_data_dir(),
        output_dir=folder / "runs",
        training_config=_FAST,
        max_examples={"train": 16, "validation": 16},
    ).run_dir


@functools.cache
def _shared_run() -> Path:
    """One _st_a_run for the cases that damage a copy of its folder (its encoder stays where it was trained, in a
    temporary folder removed when the process ends)."""
    folder = Path(tempfile.mkdtemp(prefix="af-results-"))
    atexit.register(shutil.rmtree, folder, True)
    return _st_a_run(folder)


def _evaluate_after_tokenizer_edit(folder: Path) -> Action:
    """A tiny st-a run, its encoder's tokenizer edited since (two words' ids swapped): the action is
    evaluate_run(run) on the run's own validation split."""
    run = _st_a_run(folder)
    _swap_tokens(folder / "bert" / "tokenizer.json")
    return lambda: evaluate_run(run)


def _evaluate_damaged(edit: Callable[[dict[str, Any]], None]) -> Callable[[Path], Action]:
    """evaluate_run(<a copy of a tiny st-a run>) whose config.json was edited by `edit` (by hand, or damaged)."""

    def prepare(folder: Path) -> Action:
        run = Path(shutil.copytree(_shared_run(), folder / "run"))
        config = json.loads((run / "config.json").read_text(encoding="utf-8"))
        edit(config)
        (run / "config.json").write_text(json.dumps(config), encoding="utf-8")
        return lambda: evaluate_run(run)

    return prepare


def _regression(folder: Path, **splits: list[Any]) -> TaskSpec:
    """A single-text regression task of the user's own whose split files (role -> gold scores) are in `folder`."""
    files = {
        role: str(write_jsonl(folder / f"{role}.jsonl", [{"text": f"thing {i}", "label": s} for i, s in enumerate(v)]))
        for role, v in splits.items()
    }
    return TaskSpec(name="scores", kind="single", text_fields=("text",), regression=True, data_files=files)


def _load_regression(**splits: list[Any]) -> Callable[[Path], Action]:
    """load_task_data(<_regression task of `splits`>); the action returns the load's notes."""

    def prepare(folder: Path) -> Action:
        task = _regression(folder, **splits)
        return lambda: " | ".join(load_task_data(task).info.notes)

    return prepare


def _score_regression(gold: list[float]) -> Callable[[Path], Action]:
    """compute_metrics(<regression task>, [1, 2, 3, 4], `gold`)."""

    def prepare(folder: Path) -> Action:
        task = _regression(folder, train=[1.0, 2.0])
        return lambda: compute_metrics(task, np.array([1.0, 2.0, 3.0, 4.0]), np.array(gold))

    return prepare


def _choices_with_twin(folder: Path) -> Action:
    """A 3-choice task of the user's own whose validation row 1 has its gold choice ('blue') twice; the action loads
    it and returns the TaskDataWarnings it gave."""
    rows = [
        {"question": "the sky is", "a": "blue", "b": "green", "c": "red", "label": 0},
        {"question": "the sea is", "a": "blue", "b": "Blue ", "c": "red", "label": 1},
    ]
    files = {role: str(write_jsonl(folder / f"{role}.jsonl", rows)) for role in ("train", "validation")}
    task = TaskSpec(
        name="colours",
        kind="multiple_choice",
        text_fields=("question",),
        choice_fields=("a", "b", "c"),
        label_names=("a", "b", "c"),
        data_files=files,
    )

    def action() -> str:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            load_task_data(task)
        return " | ".join(str(w.message) for w in caught if issubclass(w.category, af.tasks.TaskDataWarning))

    return action


def _train_with_metric(metric: str) -> Callable[[Path], Action]:
    """train('rte', 'st-a', training_config={'metric_for_best': `metric`}) into a temporary folder."""

    def action() -> Any:
        with tempfile.TemporaryDirectory() as runs:
            return af.training.train("rte", "st-a", output_dir=runs, training_config={"metric_for_best": metric})

    return lambda folder: action


def _report_with(
    metrics: dict[str, Any] | None = None, config: Any = None, markdown: bool = False
) -> Callable[[Path], Action]:
    """The catalogue's tiny experiment (head on rte and cb) done, the first job's metrics `metrics` and its run's
    config.json holding `config` (records edited by hand, or damaged); the action builds the report and returns
    its warnings, or with `markdown` its Markdown."""
    ok = {"metric_for_best": "accuracy", "best": {"accuracy": 0.6}}

    def prepare(folder: Path) -> Action:
        out = _bound_store(folder)
        with ResultsStore(out) as store:
            for k, job in enumerate(store.jobs()):
                run_dir = out / "runs" / job.id
                if config is not None and not k:
                    run_dir.mkdir(parents=True)
                    (run_dir / "config.json").write_text(json.dumps(config), encoding="utf-8")
                store.mark_running(job.id, str(run_dir))
                store.mark_done(job.id, ok if k or metrics is None else metrics)
        _edit(out)
        if markdown:
            return lambda: build_report(out).markdown()
        return lambda: " | ".join(build_report(out).warnings)

    return prepare


def _select_without_a_candidate(folder: Path) -> Action:
    """A sweep of full fine-tuning over two learning rates on RTE, selected on dev (`select`), one of its two jobs
    failed; the action returns the notes of the Houlsby-shaped table."""
    out = folder / "out"
    spec = ExperimentSpec.from_dict(
        {
            "name": "partial",
            "tasks": ["rte"],
            "seeds": [1],
            "output_dir": str(out),
            "setups": [{"name": "full", "sweep": {"learning_rate": [2.0e-5, 5.0e-5]}}],
            "select": {"Full fine-tuning": "full"},
        }
    )
    jobs = plan_jobs(spec)
    with ResultsStore(out) as store:
        store.bind(spec, jobs)
        for job in jobs:
            store.mark_running(job.id, str(job.run_dir(out)))
            if job.variant == "full-lr2e-5":
                store.mark_failed(job.id, "out of memory")
            else:
                store.mark_done(job.id, {"metric_for_best": "accuracy", "best": {"accuracy": 0.6}})
    _edit(out)
    return lambda: " | ".join(next(t for t in selection_tables(build_report(out)) if t.id == "houlsby_table1").notes)


CASES: tuple[BadInput, ...] = (
    # results kept as fresh though an input changed: the encoder's tokenizer
    B(
        "results-stale-tokenizer-edited",
        GROUP,
        "a done run whose encoder's vocabulary (vocab.txt) was edited since it ran (the runner kept its results as "
        "done: only the encoder's weight files were compared)",
        None,
        ("tokenizer files", "vocab.txt", "changed since it ran"),
        _stale_tokenizer,
    ),
    B(
        "results-evaluate-tokenizer-edited",
        GROUP,
        "evaluate_run(<st-a run>) after two words' ids were swapped in its encoder's tokenizer.json (scored the "
        "run on other tokens than it trained and recorded its dev metrics on, without a word)",
        ConfigError,
        ("encodes to other tokens", "tokenizer", "data_dir="),
        _evaluate_after_tokenizer_edit,
    ),
    B(
        "results-evaluate-config-without-data",
        GROUP,
        "evaluate_run(<run>) whose config.json lost its 'data' record (KeyError: 'data')",
        RunFileError,
        ("config.json holds no 'data' record", "damaged", "--data-dir and --max-examples"),
        _evaluate_damaged(lambda config: config.pop("data")),
    ),
    B(
        "results-evaluate-split-sizes-damaged",
        GROUP,
        "evaluate_run(<run>) whose config.json records its validation split's num_rows as 'x' (ValueError from int())",
        RunFileError,
        ("splits' sizes", "num_rows: <int>", "max_examples="),
        _evaluate_damaged(lambda config: config["data"]["splits"]["validation"].update(num_rows="x")),
    ),
    B(
        "results-evaluate-data-source-missing",
        GROUP,
        "evaluate_run(<run on local data>) whose config.json lost its data's 'source' (KeyError: 'source')",
        RunFileError,
        ("data's source as None", "'local'", "damaged"),
        _evaluate_damaged(lambda config: config["data"].pop("source")),
    ),
    B(
        "results-evaluate-config-without-training",
        GROUP,
        "evaluate_run(<run>) whose config.json lost its 'training' record (KeyError: 'training')",
        RunFileError,
        ("config.json holds no 'training' record", "damaged"),
        _evaluate_damaged(lambda config: config.pop("training")),
    ),
    # the metric that selects a checkpoint
    B(
        "results-metric-for-best-perplexity",
        GROUP,
        "training_config={'metric_for_best': 'perplexity'} (recorded beside a generation task's metrics, refused as "
        "'not a metric of the task' with no word of why or of answer_loss, which selects the same checkpoint)",
        ConfigError,
        ("metric_for_best='perplexity'", "exp(answer_loss)", "metric_for_best='answer_loss'", "lower is better"),
        _train_with_metric("perplexity"),
    ),
    B(
        "results-metric-for-best-eval-prefix",
        GROUP,
        "training_config={'metric_for_best': 'eval_accuracy'} (the HF Trainer's name of the metric)",
        ConfigError,
        ("metric_for_best='eval_accuracy'", "'eval_' prefix", "metric_for_best='accuracy'"),
        _train_with_metric("eval_accuracy"),
    ),
    B(
        "results-metric-for-best-top-prediction-share",
        GROUP,
        "training_config={'metric_for_best': 'top_prediction_share'} (a diagnostic recorded beside the metrics)",
        ConfigError,
        ("metric_for_best='top_prediction_share'", "not a score", "classification: accuracy"),
        _train_with_metric("top_prediction_share"),
    ),
    # regression labels that mark a row without a score
    B(
        "results-regression-train-label-ignore-index",
        GROUP,
        "a regression task's train file with a row scored -100 (the ignore index: trained on as a real score)",
        TaskError,
        ("row 1", "ignore index", "no gold label", "drop_unlabelled=True"),
        _load_regression(train=[2.0, -100, 3.0], validation=[1.0, 2.0, 3.0]),
    ),
    B(
        "results-regression-validation-all-minus-one",
        GROUP,
        "a regression task's validation file scored -1 throughout (GLUE's hidden scores: a dev score against them)",
        TaskError,
        ("row 0", "GLUE's mark of hidden test scores", "no gold label"),
        _load_regression(train=[1.0, 2.0, 3.0], validation=[-1, -1, -1]),
    ),
    B(
        "results-regression-test-split-unlabelled",
        GROUP,
        "a regression task's test file scored -1 throughout, as GLUE's STS-B test split (loaded and scored as real "
        "scores of -1)",
        None,
        ("test split", "no gold labels and was left out"),
        _load_regression(train=[1.0, 2.0, 3.0], validation=[1.0, 2.0, 3.0], test=[-1, -1, -1]),
    ),
    B(
        "results-regression-gold-ignore-index",
        GROUP,
        "compute_metrics(<regression task>, scores, gold=[1, -100, 3, 4]) (the ignore index correlated as a score)",
        TaskError,
        ("gold score -100 of example 1", "without a gold score", "score only examples with a gold score"),
        _score_regression([1.0, -100.0, 3.0, 4.0]),
    ),
    # multiple choice: the gold choice's text twice in a row
    B(
        "results-choice-gold-twin",
        GROUP,
        "a multiple-choice row whose gold choice has a twin ('blue' and 'Blue ' in one row; CommonsenseQA has 48 "
        "such rows): loaded without a word, though no model can be right on it but by breaking a tie",
        None,
        ("2 multiple-choice row(s)", "row 1", "gold choice", "kept"),
        _choices_with_twin,
    ),
    # the report, of done jobs whose metrics have odd shapes
    B(
        "results-report-best-not-a-mapping",
        GROUP,
        "a done job whose metrics hold best=[0.5], a list (the report failed with AttributeError: 'list' object has "
        "no attribute 'get')",
        None,
        ("no finite dev accuracy", "[0.5]", "left out of the tables"),
        _report_with({"metric_for_best": "accuracy", "best": [0.5]}),
    ),
    B(
        "results-report-parts-not-mappings",
        GROUP,
        "a done job whose metrics hold parameters=[1, 2] and extra_dev=['x'] (AttributeError from the report)",
        None,
        ("'parameters' is [1, 2], not a mapping", "'extra_dev' is ['x'], not a mapping", "left out"),
        _report_with(
            {"metric_for_best": "accuracy", "best": {"accuracy": 0.5}, "parameters": [1, 2], "extra_dev": ["x"]}
        ),
    ),
    B(
        "results-report-score-true",
        GROUP,
        "a done job whose best accuracy is true (JSON's true read as 1: reported as 100.00)",
        None,
        ("no finite dev accuracy", "True", "left out of the tables"),
        _report_with({"metric_for_best": "accuracy", "best": {"accuracy": True}}),
    ),
    B(
        "results-report-run-config-a-list",
        GROUP,
        "a done job whose run's config.json holds [1], valid JSON of another shape (AttributeError from the report)",
        None,
        ("# Report", "Table 1"),
        _report_with(config=[1], markdown=True),
    ),
    B(
        "results-report-carve-out-a-string",
        GROUP,
        "a done job whose run's config.json records its carve-out as 'yes' (AttributeError once the report's "
        "Markdown was written)",
        None,
        ("# Report", "Table 1"),
        _report_with(config={"data": {"carve_out": "yes"}}, markdown=True),
    ),
    # selection on dev
    B(
        "results-select-without-a-candidate",
        GROUP,
        "a `select` rule over a learning-rate sweep of two variants, one of whose jobs failed (the table read as a "
        "choice among both, made among one)",
        None,
        ("Full fine-tuning, rte", "seed 1: without full-lr2e-5"),
        _select_without_a_candidate,
    ),
)
