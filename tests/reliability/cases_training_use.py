"""Bad-input cases at one boundary: the Python training API as a careless user drives it (train settings, the metric
that selects a checkpoint, custom task specs, the adapter store's keys, fusion sources of the user's own tasks)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import transformers
import transformers.integrations

import adapterfusion as af
import adapterfusion.training
from adapterfusion.errors import ConfigError
from adapterfusion.tasks import TaskError, TaskSpec
from adapterfusion.training import AdapterStore, TrainingConfig, TrainingError
from catalogue import Action, BadInput
from task_data import write_jsonl
from tiny_decoders import tiny_decoder
from tiny_models import tiny_encoder

B = BadInput

_FAST = {"max_steps": 1, "batch_size": 4, "max_length": 32, "patience": None, "logging_steps": 1}
_OWN = {"name": "own", "kind": "single", "text_fields": ("text",), "label_names": ("neg", "pos")}


def _saved(folder: Path, kind: str, tokenizer: Any = None) -> Path:
    """A tiny random BERT (tiny_models.py) or Llama (tiny_decoders.py), `kind`, saved in the case's folder with
    `tokenizer` (default: the shipped one)."""
    tokenizer = tokenizer or transformers.AutoTokenizer.from_pretrained(af.default_encoder_path())
    model = (
        tiny_encoder("bert", vocab_size=tokenizer.vocab_size)
        if kind == "bert"
        else tiny_decoder(kind, vocab_size=tokenizer.vocab_size)
    )
    model.save_pretrained(folder / kind)
    tokenizer.save_pretrained(folder / kind)
    return folder / kind


def _setup_on(model: str, setup: str, **options: Any) -> Callable[[Path], Action]:
    """train('rte', `setup`, setup_options=`options`) on a tiny BERT or Llama (`model`) saved in the case's folder,
    with a data folder that lacks rte: anything refused after the data would load is refused as missing data."""

    def prepare(folder: Path) -> Action:
        encoder = _saved(folder, model)
        return lambda: af.training.train(
            "rte", setup, encoder=encoder, output_dir=folder / "runs", data_dir=folder, setup_options=options
        )

    return prepare


def _answers_on_llama(sep_token: bool = True, **options: Any) -> Callable[[Path], Action]:
    """train(<generation task with `options`>, 'st-a') on a tiny Llama saved with the shipped tokenizer (no chat
    template; without its sep token, its only end token, unless `sep_token`), its train file missing: refused
    before the data is read, or the case says the file is missing."""

    def prepare(folder: Path) -> Action:
        from adapterfusion.tasks import instruction_task

        tokenizer = transformers.AutoTokenizer.from_pretrained(af.default_encoder_path())
        if not sep_token:
            tokenizer.sep_token = None
        llama = _saved(folder, "llama", tokenizer)
        files = {role: str(folder / f"{role}.jsonl") for role in ("train", "validation")}
        task = instruction_task("answers", data_files=files, **options)
        return lambda: af.training.train(task, "st-a", encoder=llama, output_dir=folder / "runs")

    return prepare


def _own_task(folder: Path, dev_labels: list[Any], **spec: Any) -> TaskSpec:
    """A single-text task of eight varied train rows and dev rows of `dev_labels`, its files in the case's folder."""
    regression = spec.get("regression", False)
    labels = [float(i) for i in range(8)] if regression else [i % 2 for i in range(8)]
    rows = [{"text": f"good thing {i}", "label": label} for i, label in enumerate(labels)]
    dev = [{"text": f"other thing {i}", "label": label} for i, label in enumerate(dev_labels)]
    files = {"train": write_jsonl(folder / "train.jsonl", rows), "validation": write_jsonl(folder / "dev.jsonl", dev)}
    options = {**_OWN, "label_names": () if regression else _OWN["label_names"], **spec}
    return TaskSpec(**options, data_files={role: str(path) for role, path in files.items()})


def _train_own(dev_labels: list[Any], **spec: Any) -> Callable[[Path], Action]:
    """train(<_own_task with `dev_labels` and `spec`>, 'head') on a tiny BERT; the run goes to a temporary folder,
    as the case's folder must stay as it was, and the action fails before anything is written there."""

    def prepare(folder: Path) -> Action:
        import tempfile

        task, bert = _own_task(folder, dev_labels, **spec), _saved(folder, "bert")

        def action() -> Any:
            with tempfile.TemporaryDirectory() as runs:
                return af.training.train(task, "head", encoder=bert, output_dir=runs, training_config=_FAST)

        return action

    return prepare


def _one_warmed_up_step(folder: Path) -> Action:
    """train(<own task>, 'head', training_config={'max_steps': 1, ...}) with the default warm-up, into a temporary
    folder; the action returns the warnings the run recorded in its metrics.json."""
    import json
    import tempfile

    task, bert = _own_task(folder, [0, 1, 1, 0]), _saved(folder, "bert")

    def action() -> str:
        with tempfile.TemporaryDirectory() as runs:
            result = af.training.train(task, "head", encoder=bert, output_dir=runs, training_config=_FAST)
            return " | ".join(json.loads(result.metrics_path.read_text())["warnings"])

    return action


def _spec(**changes: Any) -> Callable[[Path], Action]:
    return lambda folder: lambda: TaskSpec(**{**_OWN, **changes})


def _load_stored(seed: Any, **options: Any) -> Callable[[Path], Action]:
    """AdapterStore.load_into(model, 'rte', 'st-a', `seed`, **options) of a store that holds the entry of seed 1, an
    adapter stored without a head."""

    def prepare(folder: Path) -> Action:
        model = af.wrap(tiny_encoder("bert"))
        model.add_adapter("rte", "pfeiffer")
        store = AdapterStore(folder / "store")
        store.put_model(model, "rte", None, "some-org/some-encoder", "rte", "st-a", 1)
        fresh = af.wrap(tiny_encoder("bert"))
        return lambda: store.load_into(fresh, "rte", "st-a", seed, encoder="some-org/some-encoder", **options)

    return prepare


def _fuse_own_source(folder: Path) -> Action:
    """train(<own task>, 'fusion-st-a', sources=['own2']), own2 a TaskSpec the user trained st-a on but never
    registered."""
    task = _own_task(folder, [0, 1])
    return lambda: af.training.train(
        task, "fusion-st-a", output_dir=folder / "runs", store=folder / "store", setup_options={"sources": ["own2"]}
    )


def _train_rte(**kwargs: Any) -> Callable[[Path], Action]:
    return lambda folder: lambda: af.training.train("rte", "st-a", output_dir=folder / "runs", **kwargs)


def _report_to_missing(folder: Path) -> Action:
    """train('rte', 'st-a', training_config={'report_to': 'wandb'}) where wandb is not installed (made so here,
    whatever this machine has)."""
    train = _train_rte(training_config={"report_to": "wandb"})(folder)

    def action() -> Any:
        with mock.patch.object(transformers.integrations, "is_wandb_available", lambda: False):
            return train()

    return action


def _task_file_alias_bomb(folder: Path) -> Action:
    """A task description of 600 bytes whose YAML aliases stand for 10**9 values (a billion laughs)."""
    lines = ["name: own", "kind: single", "a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    path = folder / "own.yaml"
    path.write_text("\n".join(lines), encoding="utf-8")
    return lambda: adapterfusion.tasks.load_task_file(path, register=False)


CASES: tuple[BadInput, ...] = (
    # train settings: a seed in two places, a misspelt selecting metric
    B(
        "train-config-seed-disagrees",
        "training",
        "train('rte', 'st-a', training_config={'seed': 5}) with train's seed left at 42 (the run trained seed 42 "
        "without a word: the config's seed was replaced)",
        ConfigError,
        ("training_config={'seed': 5}", "seed=42", "pass seed="),
        _train_rte(training_config={"seed": 5}),
    ),
    B(
        "train-config-object-seed-disagrees",
        "training",
        "train('rte', 'st-a', seed=3, training_config=TrainingConfig(seed=5)) (trained seed 3 without a word)",
        ConfigError,
        ("TrainingConfig(seed=5)", "seed=3", "pass seed="),
        _train_rte(seed=3, training_config=TrainingConfig(seed=5)),
    ),
    B(
        "train-metric-for-best-misspelt",
        "training",
        "train('rte', 'st-a', training_config={'metric_for_best': 'acuracy'}) (refused only once the data was loaded "
        "and encoded, with no suggestion)",
        TrainingError,
        ("metric_for_best='acuracy'", "Did you mean 'accuracy'", "leave it out"),
        _train_rte(training_config={"metric_for_best": "acuracy"}),
    ),
    B(
        "train-report-to-not-installed",
        "training",
        "train('rte', 'st-a', training_config={'report_to': 'wandb'}) without wandb installed (the Trainer's "
        "RuntimeError 'WandbCallback requires wandb to be installed' once the data was loaded and encoded)",
        TrainingError,
        ("report_to='wandb'", "not installed", "pip install wandb", "report_to='none'"),
        _report_to_missing,
    ),
    B(
        "train-top-k-k-zero",
        "training",
        "train('rte', 'top-k', setup_options={'k': 0}) (refused only once the encoder and the data had loaded)",
        TrainingError,
        ("top-k: k=0", "integer >= 1"),
        lambda folder: (
            lambda: af.training.train(
                "rte", "top-k", output_dir=folder / "runs", data_dir=folder / "no-data", setup_options={"k": 0}
            )
        ),
    ),
    B(
        "train-top-k-k-above-layers",
        "training",
        "train('rte', 'top-k', encoder=<a 2-layer BERT>, setup_options={'k': 3}) (refused only once the encoder and "
        "the data had loaded)",
        TrainingError,
        ("top-k: k=3", "1..2", "layer count of encoder"),
        _setup_on("bert", "top-k", k=3),
    ),
    B(
        "train-layernorm-only-rmsnorm-api",
        "training",
        "train('rte', 'layernorm-only', encoder=<a Llama, RMSNorms only>) (refused only once the encoder and the data "
        "had loaded; the experiment runner checked it, train() did not)",
        TrainingError,
        ("layernorm-only", "no torch.nn.LayerNorm", "st-a, top-k or full"),
        _setup_on("llama", "layernorm-only"),
    ),
    B(
        "train-generation-no-chat-template",
        "training",
        "train(<generation task with chat_template=True>, 'st-a') on a decoder whose tokenizer has no chat template "
        "(refused only as the first row was encoded, once the whole data set had loaded)",
        TaskError,
        ("chat_template=True", "has no chat template", "chat_template=False"),
        _answers_on_llama(chat_template=True),
    ),
    B(
        "train-generation-no-end-token",
        "training",
        "train(<generation task>, 'st-a') on a decoder whose tokenizer has neither eos nor sep token (refused only as "
        "the first row was encoded, once the whole data set had loaded)",
        TaskError,
        ("no eos or sep token", "set tokenizer.eos_token"),
        _answers_on_llama(sep_token=False),
    ),
    B(
        "train-one-step-warm-up",
        "training",
        "train(..., training_config={'max_steps': 1}) with the default warm-up (the one step ran at learning rate 0: "
        "the run reported the untrained model's scores without a word)",
        None,
        ("1 optimizer step", "nothing was trained", "warmup_ratio=0"),
        _one_warmed_up_step,
    ),
    # a validation split on which the selecting metric is constant or undefined
    B(
        "train-regression-dev-one-row",
        "training",
        "train(<regression task whose validation split has 1 row>, 'head') (failed after the first epoch inside the "
        "metric: 'pearson needs two equal-length inputs of 2+ values', no fix)",
        TrainingError,
        ("validation split cannot select a checkpoint by 'spearman'", "1 example(s)", "max_examples['validation']"),
        _train_own([2.0], regression=True),
    ),
    B(
        "train-regression-dev-constant",
        "training",
        "train(<regression task whose validation scores are all 2.0>, 'head') (trained and reported spearman NaN as "
        "the best checkpoint's score, without a word)",
        TrainingError,
        ("cannot select a checkpoint by 'spearman'", "gold scores are 2", "NaN"),
        _train_own([2.0, 2.0, 2.0], regression=True),
    ),
    B(
        "train-f1-dev-without-positive",
        "training",
        "train(<task selecting on F1 whose validation split has no positive label>, 'head') (F1 0.0 at every "
        "evaluation: the first checkpoint won, without a word)",
        TrainingError,
        (
            "cannot select a checkpoint by 'f1'",
            "no example of the positive label 'pos'",
            "metric_for_best to 'accuracy'",
        ),
        _train_own([0, 0, 0], metrics=("f1", "accuracy")),
    ),
    B(
        "train-mcc-dev-one-class",
        "training",
        "train(<task selecting on Matthews correlation whose validation split holds one class>, 'head') (0.0 at "
        "every evaluation, without a word)",
        TrainingError,
        ("cannot select a checkpoint by 'matthews_correlation'", "the label 'pos'", "add 'accuracy'"),
        _train_own([1, 1], metrics=("matthews_correlation",)),
    ),
    # custom task specs: a field, label or metric named twice
    B(
        "task-pair-text-field-twice",
        "datasets",
        "TaskSpec(kind='pair', text_fields=('text', 'text')) (accepted: every example a text paired with itself)",
        TaskError,
        ("text_fields=['text', 'text']", "more than once", "two different columns"),
        _spec(kind="pair", text_fields=("text", "text")),
    ),
    B(
        "task-choice-field-twice",
        "datasets",
        "TaskSpec(kind='multiple_choice', choice_fields=('a', 'b', 'a')) (accepted: two of three choices equal)",
        TaskError,
        ("choice_fields=['a', 'b', 'a']", "more than once"),
        _spec(kind="multiple_choice", choice_fields=("a", "b", "a"), label_names=(), num_choices=3),
    ),
    B(
        "task-label-names-differ-in-space",
        "datasets",
        "TaskSpec(label_names=('pos', 'pos ')) (accepted: two labels that read as one in every report)",
        TaskError,
        ("label_names=['pos', 'pos ']", "differ only in spaces", "label_values"),
        _spec(label_names=("pos", "pos ")),
    ),
    B(
        "task-label-name-blank",
        "datasets",
        "TaskSpec(label_names=('', 'pos')) (accepted: a label with no name in reports and saved heads)",
        TaskError,
        ("label_names=['', 'pos']", "blank name"),
        _spec(label_names=("", "pos")),
    ),
    B(
        "task-metric-twice",
        "datasets",
        "TaskSpec(metrics=('accuracy', 'accuracy')) (accepted)",
        TaskError,
        ("metrics=['accuracy', 'accuracy']", "more than once"),
        _spec(metrics=("accuracy", "accuracy")),
    ),
    # the store's keys and fusion sources of the user's own tasks
    B(
        "store-load-seed-fraction",
        "training",
        "AdapterStore.load_into(model, 'rte', 'st-a', 1.5) of a store holding seed 1 (loaded seed 1's adapter)",
        ConfigError,
        ("seed=1.5", "integer"),
        _load_stored(1.5),
    ),
    B(
        "store-load-seed-none",
        "training",
        "AdapterStore.load_into(model, 'rte', 'st-a', None) (TypeError from int() inside the store)",
        ConfigError,
        ("seed=None", "integer"),
        _load_stored(None),
    ),
    B(
        "store-load-head-not-stored",
        "training",
        "AdapterStore.load_into(model, 'rte', 'st-a', 1, head=True) of an entry stored by put_model(head=None) (said "
        "'head folder ... is not a directory, nor a Hub id')",
        TrainingError,
        ("holds no head", "head=False"),
        _load_stored(1, head=True),
    ),
    B(
        "fuse-own-task-source-unregistered",
        "training",
        "train(<own TaskSpec>, 'fusion-st-a', setup_options={'sources': ['own2']}), own2 a TaskSpec of the user's "
        "never registered (told 'unknown task' and the built-in list, not how to name it)",
        TaskError,
        ("unknown task 'own2'", "register_task(spec)"),
        _fuse_own_source,
    ),
    B(
        "task-file-yaml-alias-bomb",
        "datasets",
        "load_task_file(own.yaml), 600 bytes whose YAML aliases expand to 10**9 values (hours walking them before "
        "any error; the experiment reader's check did not cover task files)",
        TaskError,
        ("own.yaml stands for more than 100,000 values", "YAML aliases"),
        _task_file_alias_bomb,
    ),
    B(
        "training-config-integer-past-digit-limit",
        "training",
        "TrainingConfig(epochs=10**5000) (a raw ValueError: the message's repr of the value passed Python's 4300-digit "
        "limit on int -> str)",
        ConfigError,
        ("epochs=<an integer of about 5001 digits>", "must be a finite number"),
        lambda folder: lambda: TrainingConfig(epochs=10**5000),
    ),
)
