"""Bad-input cases at one boundary, experiment files and the run commands around them: combinations an experiment's
encoder, tasks and analyses refuse, caught when the file is read instead of by every job at run time, and the
arguments of `evaluate`, `prune` and the training commands, checked before any data loads."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import transformers

import adapterfusion as af
from adapterfusion.errors import ConfigError
from adapterfusion.experiments.errors import ExperimentSpecError
from adapterfusion.tasks import instruction_task
from catalogue import Action, BadInput, cli, experiment, experiment_dict
from tiny_decoders import tiny_decoder

B = BadInput
GROUP = "experiment files"


def _run_with_workers(workers: str) -> Callable[[Path], Action]:
    """`adapterfusion run experiment.json --workers <workers>` of a valid two-task experiment file."""

    def prepare(folder: Path) -> Action:
        path = folder / "experiment.json"
        path.write_text(json.dumps(experiment_dict(folder)))
        return lambda: cli("run", str(path), "--no-progress", "--workers", workers)

    return prepare


def _tiny_model(folder: Path, kind: str) -> Path:
    """A tiny random Llama ('llama'), MPNet ('mpnet') or BERT ('bert') saved with the shipped tokenizer in the case's
    folder."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(af.default_encoder_path())
    if kind == "llama":
        model = tiny_decoder("llama", vocab_size=tokenizer.vocab_size)
    elif kind == "mpnet":
        mpnet = transformers.MPNetConfig(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            vocab_size=tokenizer.vocab_size,
        )  # fmt: skip
        model = transformers.MPNetModel(mpnet)
    else:
        config = transformers.BertConfig(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            vocab_size=tokenizer.vocab_size, max_position_embeddings=128,
        )  # fmt: skip
        model = transformers.BertModel(config)
    model.save_pretrained(folder / kind)
    tokenizer.save_pretrained(folder / kind)
    return folder / kind


def _generation_task(folder: Path, **options) -> Path:
    path = folder / "answers.json"
    path.write_text(json.dumps(instruction_task("answers", data_files={}, **options).to_dict()))
    return path


def _chat_task_without_template(folder: Path) -> Action:
    """An experiment of the generation task 'answers' with chat_template: true on a tiny Llama saved with the shipped
    (BERT) tokenizer, which has no chat template."""
    task = str(_generation_task(folder, chat_template=True))
    model = str(_tiny_model(folder, "llama"))
    return experiment(encoder=model, task_files=[task], tasks=["rte", "answers"], setups=["st-a"])(folder)


def _on(model: str, generation: bool = False, **changes) -> Callable[[Path], Action]:
    """An experiment on a tiny `model` saved in the case's folder (with the generation task 'answers' if asked)."""

    def prepare(folder: Path) -> Action:
        extra = {"task_files": [str(_generation_task(folder))]} if generation else {}
        return experiment(encoder=str(_tiny_model(folder, model)), **extra, **changes)(folder)

    return prepare


def _moved_record(folder: Path) -> Action:
    """The record a runner writes for an experiment in `<dir>/out`, found in another folder (the output dir was
    moved or copied): its paths lead back to `<dir>/out`, not to where it lies."""
    from adapterfusion.experiments.runner import SPEC_FILE, experiment_record
    from adapterfusion.experiments.spec import load_spec

    spec = load_spec(experiment_dict(folder, setups=["st-a"]))
    moved = folder / "archive" / "out"
    moved.mkdir(parents=True)
    (moved / SPEC_FILE).write_text(json.dumps(experiment_record(spec, Path(spec.output_dir))))
    return lambda: cli("run", str(moved / SPEC_FILE), "--no-progress")


def _llama_that_cannot_pad(folder: Path) -> Action:
    """An experiment on a tiny Llama whose tokenizer has neither a pad token nor an eos token."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(af.default_encoder_path())
    tokenizer.pad_token = None
    tiny_decoder("llama", vocab_size=tokenizer.vocab_size).save_pretrained(folder / "llama")
    tokenizer.save_pretrained(folder / "llama")
    return experiment(encoder=str(folder / "llama"), setups=["st-a"])(folder)


def _llama_without_lm_head(folder: Path) -> Action:
    """An experiment of the generation task 'answers' on a tiny Llama saved as the bare LlamaModel, with untied
    embeddings: its folder holds no language-model head."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(af.default_encoder_path())
    config = tiny_decoder("llama", vocab_size=tokenizer.vocab_size, tie_word_embeddings=False).config
    transformers.LlamaModel(config).save_pretrained(folder / "llama")
    tokenizer.save_pretrained(folder / "llama")
    tasks = {"task_files": [str(_generation_task(folder))], "tasks": ["answers"], "setups": ["st-a"]}
    return experiment(encoder=str(folder / "llama"), **tasks)(folder)


def _run_in(folder: Path, data: str) -> Action:
    """`adapterfusion run` of a valid experiment on the shipped MiniLM whose data_dir is `data` (in `folder`)."""
    return experiment(encoder=None, setups=["head"], data_dir=str(folder / data))(folder)


def _empty_data_dir(folder: Path) -> Action:
    (folder / "data").mkdir()
    return _run_in(folder, "data")


def _one_task_described_twice(folder: Path) -> Action:
    """Two task_files that both describe a task 'reviews' (other labels, other data), the second replacing the
    first."""
    paths = []
    for name, labels in (("first", ["negative", "positive"]), ("second", ["neg", "pos", "neutral"])):
        (folder / f"{name}.csv").write_text(f"text,label\nfine,{labels[0]}\n")
        task = {"name": "reviews", "kind": "single", "text_fields": ["text"], "label_names": labels}
        (folder / f"{name}.json").write_text(json.dumps({**task, "data_files": {"train": f"{name}.csv"}}))
        paths.append(str(folder / f"{name}.json"))
    return experiment(encoder=None, tasks=["rte", "reviews"], task_files=paths)(folder)


CASES: tuple[BadInput, ...] = (
    B(
        "experiment-pooling-cls-on-decoder",
        GROUP,
        "setups: [{name: head, pooling: cls}] on a Llama encoder (every job failed at run time)",
        ExperimentSpecError,
        ("setups[0].pooling", "'cls'", "a decoder (llama)", "pooling: last"),
        _on("llama", setups=[{"name": "head", "pooling": "cls"}]),
        cli=True,
    ),
    B(
        "experiment-generation-on-encoder",
        GROUP,
        "a generation task (task_files) with a BERT encoder (every job failed at run time)",
        ExperimentSpecError,
        ("tasks[2]", "'answers' is a generation task", "an encoder (bert)", "set encoder to a decoder"),
        _on("bert", generation=True, tasks=["rte", "cb", "answers"], setups=["st-a"]),
        cli=True,
    ),
    B(
        "experiment-span-ablation-generation",
        GROUP,
        "analyses: [{kind: span-ablation, variant: st-a-rf16}] over tasks with a generation task (its job failed "
        "saying an st-a run was no st-a run)",
        ExperimentSpecError,
        ("analyses[0].tasks", "['answers'] are generation tasks", "no head", "without them"),
        _on(
            "llama",
            generation=True,
            tasks=["rte", "answers"],
            setups=["st-a"],
            analyses=[{"kind": "span-ablation", "variant": "st-a-rf16"}],
        ),
        cli=True,
    ),
    B(
        "experiment-pooling-on-generation-tasks-only",
        GROUP,
        "setups: [{name: st-a, tasks: [answers], pooling: mean}] with 'answers' a generation task, on a Llama "
        "(planned, then every job failed: train() refuses a pooling on a generation task)",
        ExperimentSpecError,
        ("setups[0].pooling", "runs on generation tasks only (['answers'])", "leave pooling out"),
        _on(
            "llama",
            generation=True,
            tasks=["rte", "answers"],
            setups=[{"name": "st-a", "tasks": ["answers"], "pooling": "mean"}],
        ),
        cli=True,
    ),
    B(
        "experiment-generation-on-decoder-without-lm-head",
        GROUP,
        "a generation task on a decoder folder saved as the bare LlamaModel with untied embeddings (ran: "
        "AutoModelForCausalLM drew the LM head at random, and the runs trained and reported under it)",
        ExperimentSpecError,
        ("tasks[0]", "saved as LlamaModel, without that head", "drawn at random", "save_pretrained(folder)"),
        _llama_without_lm_head,
        cli=True,
    ),
    B(
        "experiment-generation-chat-template-missing",
        GROUP,
        "a generation task with chat_template: true on a decoder whose tokenizer has no chat template (planned, "
        "then every job of the task failed as it encoded its data)",
        ExperimentSpecError,
        ("tasks[1]", "task 'answers'", "has no chat template", "set chat_template=False"),
        _chat_task_without_template,
        cli=True,
    ),
    B(
        "experiment-gradient-checkpointing-unsupported",
        GROUP,
        "training: {gradient_checkpointing: true} on an MPNet encoder, whose model class does not support it "
        "(planned, then every st-a job failed once the encoder had loaded)",
        ExperimentSpecError,
        ("training.gradient_checkpointing", "MPNetModel", "does not support gradient checkpointing", "false"),
        _on("mpnet", setups=["st-a"], training={"gradient_checkpointing": True}),
        cli=True,
    ),
    B(
        "evaluate-json-empty",
        "command line",
        "adapterfusion evaluate RUN --json '' (did nothing and exited 0)",
        ConfigError,
        ("--json ''", "is not a path"),
        lambda folder: lambda: cli("evaluate", str(folder / "run"), "--json", ""),
        cli=True,
    ),
    B(
        "evaluate-missing-run",
        "command line",
        "adapterfusion evaluate /nonexistent (said the folder 'has no config.json')",
        ConfigError,
        ("run folder", "does not exist", "<output_dir>/<task>/<setup>/seed-<seed>"),
        lambda folder: lambda: cli("evaluate", str(folder / "nowhere")),
        cli=True,
    ),
    B(
        "prune-repeats-zero",
        "command line",
        "adapterfusion prune RUN --keep 1 --repeats 0 (checked only after the data had loaded)",
        ConfigError,
        ("repeats=0", "positive integer"),
        lambda folder: lambda: cli("prune", str(folder / "nowhere"), "--keep", "1", "--repeats", "0"),
        cli=True,
    ),
    B(
        "train-resume-and-overwrite",
        "command line",
        "adapterfusion train-adapter --resume --overwrite (silently resumed)",
        ConfigError,
        ("--resume and --overwrite", "give one of them"),
        lambda folder: (
            lambda: cli(
                "train-adapter", "--task", "rte", "--output-dir", str(folder / "runs"), "--resume", "--overwrite"
            )
        ),
        cli=True,
    ),
    B(
        "train-reduction-factor-zero",
        "command line",
        "adapterfusion train-adapter --reduction-factor 0 (refused only once the encoder and the data had loaded)",
        ConfigError,
        ("--reduction-factor 0", "must be a positive number", "2, 16 or 64"),
        lambda folder: (
            lambda: cli("train-adapter", "--task", "rte", "--output-dir", str(folder), "--reduction-factor", "0")
        ),
        cli=True,
    ),
    B(
        "train-reduction-factor-nan",
        "command line",
        "adapterfusion train-adapter --reduction-factor nan (refused only once the encoder and the data had loaded)",
        ConfigError,
        ("--reduction-factor nan", "must be a positive number"),
        lambda folder: (
            lambda: cli("train-adapter", "--task", "rte", "--output-dir", str(folder), "--reduction-factor", "nan")
        ),
        cli=True,
    ),
    B(
        "train-reduction-factor-negative",
        "command line",
        "adapterfusion train-adapter --reduction-factor -4",
        ConfigError,
        ("--reduction-factor -4", "must be a positive number"),
        lambda folder: (
            lambda: cli("train-adapter", "--task", "rte", "--output-dir", str(folder), "--reduction-factor=-4")
        ),
        cli=True,
    ),
    B(
        "run-workers-negative",
        "command line",
        "adapterfusion run experiment.json --workers -2 (was told the inprocess executor runs one job at a time, "
        "and to use the process executor 'for more')",
        ExperimentSpecError,
        ("workers=-2", "an integer >= 1"),
        _run_with_workers("-2"),
        cli=True,
    ),
    B(
        "fuse-batch-size-zero",
        "command line",
        "adapterfusion fuse --batch-size 0 (refused as the API's batch_size=0, not by its option)",
        ConfigError,
        ("--batch-size 0", "must be an integer >= 1"),
        lambda folder: (
            lambda: cli("fuse", "--task", "rte", "--sources", "cb", "--output-dir", str(folder), "--batch-size", "0")
        ),
        cli=True,
    ),
    B(
        "experiment-init-std-negative",
        GROUP,
        "setups: [{name: st-a, init_std: -1.0}] (accepted by plan, every job failed at run time)",
        ExperimentSpecError,
        ("setups[0].init_std", "must be a positive number"),
        experiment(encoder=None, setups=[{"name": "st-a", "init_std": -1.0}]),
        cli=True,
    ),
    B(
        "experiment-reduction-factor-no-bottleneck",
        GROUP,
        "setups: [{name: st-a, reduction_factors: [100000]}] on the shipped MiniLM (hidden 384; every job failed "
        "once the model had loaded)",
        ExperimentSpecError,
        ("setups[0].reduction_factors", "leaves no bottleneck for hidden size 384", "at most 384"),
        experiment(encoder=None, setups=[{"name": "st-a", "reduction_factors": [100000]}]),
        cli=True,
    ),
    B(
        "experiment-metric-for-best-unknown",
        GROUP,
        "task_training: {cb: {metric_for_best: f1}} where CB scores accuracy only (each job failed at its start)",
        ExperimentSpecError,
        ("task_training.cb.metric_for_best", "'f1' is not a metric of task 'cb'", "['accuracy']"),
        experiment(setups=["st-a"], task_training={"cb": {"metric_for_best": "f1"}}),
        cli=True,
    ),
    B(
        "experiment-batch-size-beyond-any-index",
        GROUP,
        "training: {batch_size: 10**23} (passed every check; every job then failed in islice: 'Stop argument for "
        "islice() must be None or an integer')",
        ExperimentSpecError,
        ("batch_size=100000000000000000000000", "beyond the largest Python can index"),
        experiment(setups=["st-a"], training={"batch_size": 10**23}),
        cli=True,
    ),
    B(
        "experiment-record-moved",
        GROUP,
        "adapterfusion run <moved output dir>/experiment.json (started the experiment over in the folder its "
        "relative paths led to)",
        ExperimentSpecError,
        ("not to the folder it lies in", "moved or copied", "nothing was run"),
        _moved_record,
        cli=True,
    ),
    B(
        "experiment-decoder-tokenizer-cannot-pad",
        GROUP,
        "an experiment on a decoder whose tokenizer has no pad and no eos token (planned, then every job failed at "
        "its first batch: 'the tokenizer has no pad token; set tokenizer.pad_token before collating')",
        ExperimentSpecError,
        ("encoder", "neither a pad token nor an eos token", "tok.pad_token = tok.unk_token", "save_pretrained"),
        _llama_that_cannot_pad,
        cli=True,
    ),
    B(
        "evaluate-max-examples-zero",
        "command line",
        "adapterfusion evaluate RUN --max-examples 0 (checked only after the run's model had loaded)",
        ConfigError,
        ("max_examples=0", "positive integer"),
        lambda folder: lambda: cli("evaluate", str(folder / "nowhere"), "--max-examples", "0"),
        cli=True,
    ),
    B(
        "prune-max-examples-zero",
        "command line",
        "adapterfusion prune RUN --keep 1 --max-examples 0 (checked only after the run's model had loaded)",
        ConfigError,
        ("max_examples=0", "positive integer"),
        lambda folder: lambda: cli("prune", str(folder / "nowhere"), "--keep", "1", "--max-examples", "0"),
        cli=True,
    ),
    B(
        "experiment-top-k-k-zero",
        GROUP,
        "setups: [{name: top-k, k: 0}] (planned, then every top-k job failed once the encoder had loaded; k: true, "
        "'two' and 1.5 alike)",
        ExperimentSpecError,
        ("setups[0].k", "k=0 must be an integer >= 1"),
        experiment(encoder=None, setups=[{"name": "top-k", "k": 0}]),
        cli=True,
    ),
    B(
        "experiment-adapter-subset-zero",
        GROUP,
        "setups: [st-a, {name: fusion-st-a, adapter_subset: 0}] (every fusion job failed after the stage-1 adapters "
        "had trained; true, -1 and 'two' alike)",
        ExperimentSpecError,
        ("setups[1].adapter_subset", "adapter_subset=0 must be an integer >= 1"),
        experiment(encoder=None, setups=["st-a", {"name": "fusion-st-a", "adapter_subset": 0}]),
        cli=True,
    ),
    B(
        "experiment-data-dir-missing",
        GROUP,
        "experiment data_dir: a folder that does not exist (the runner wrote its output dir, then every job failed)",
        ExperimentSpecError,
        ("data_dir", "does not exist", "Nothing was run"),
        lambda folder: _run_in(folder, "nowhere"),
        cli=True,
    ),
    B(
        "experiment-data-dir-without-tasks",
        GROUP,
        "experiment data_dir: a folder without <task>/ folders, e.g. one level too high (every job failed)",
        ExperimentSpecError,
        ("data_dir", "holds no folder for task(s) ['rte', 'cb']", "<data_dir>/<task>/", "Nothing was run"),
        _empty_data_dir,
        cli=True,
    ),
    B(
        "experiment-sweep-max-length-over-positions",
        GROUP,
        "setups: [{name: head, sweep: {max_length: [128, 100000]}}] on the shipped MiniLM (the max_length check saw "
        "the entry's own keys only: the 100000 jobs failed after the others had trained)",
        ExperimentSpecError,
        ("setups[0].max_length", "max_length=100000 is more tokens than", "at most 512"),
        experiment(encoder=None, setups=[{"name": "head", "sweep": {"max_length": [128, 100000]}}]),
        cli=True,
    ),
    B(
        "experiment-variant-id-too-long",
        GROUP,
        "setups: [{name: head, id: <300 letters>}] (refused only after experiment.db and experiment.json were "
        "written, without the key)",
        ExperimentSpecError,
        ("setups[0].id", "is 300 bytes long", "at most 255"),
        experiment(encoder=None, setups=[{"name": "head", "id": "a" * 300}]),
        cli=True,
    ),
    B(
        "experiment-variant-ids-differ-in-case",
        GROUP,
        "setups: [{name: head, id: Base}, {name: st-a, id: base}] (accepted: one folder runs/base on macOS and "
        "Windows, where the runs overwrote each other)",
        ExperimentSpecError,
        ("setups[1].id", "'base' differs from 'Base'", "only in case", "case-insensitive"),
        experiment(encoder=None, setups=[{"name": "head", "id": "Base"}, {"name": "st-a", "id": "base"}]),
        cli=True,
    ),
    B(
        "experiment-task-training-unused",
        GROUP,
        "setups: [mt-a] with task_training: {cb: {epochs: 10}} (accepted and ignored: MT-A's one run has no "
        "single task)",
        ExperimentSpecError,
        ("task_training.cb", "no setup trains 'cb' on its own", "mt-a trains all its tasks in one run", "ignored"),
        experiment(encoder=None, setups=["mt-a"], task_training={"cb": {"epochs": 10}}),
        cli=True,
    ),
    B(
        "experiment-fusion-target-unused",
        GROUP,
        "setups: [st-a, {name: fusion-st-a, tasks: [rte]}] with fusion: {cb: [rte]} (accepted and ignored: no "
        "fusion runs on cb)",
        ExperimentSpecError,
        ("fusion.cb", "no fusion setup runs on 'cb'", "fusion-st-a runs on rte", "ignored"),
        experiment(encoder=None, setups=["st-a", {"name": "fusion-st-a", "tasks": ["rte"]}], fusion={"cb": ["rte"]}),
        cli=True,
    ),
    B(
        "experiment-span-ablation-variant-max-length",
        GROUP,
        "analyses: [{kind: span-ablation, variant: st-a-rf16, max_length: 256}] (accepted and ignored: a run's "
        "adapters are scored on its dev split as it was encoded)",
        ExperimentSpecError,
        ("analyses[0].max_length", "a zoo's adapters only", "ignored"),
        experiment(
            encoder=None,
            setups=["st-a"],
            analyses=[{"kind": "span-ablation", "variant": "st-a-rf16", "max_length": 256}],
        ),
        cli=True,
    ),
    B(
        "experiment-span-ablation-zoo-max-length-over-positions",
        GROUP,
        "analyses: [{kind: span-ablation, zoo: shipped, max_length: 100000}] on the shipped MiniLM (512 positions; "
        "training refuses it, the ablation job did not)",
        ExperimentSpecError,
        ("analyses[0].max_length", "max_length=100000 is more tokens than", "at most 512"),
        experiment(
            encoder=None, setups=["st-a"], analyses=[{"kind": "span-ablation", "zoo": "shipped", "max_length": 100000}]
        ),
        cli=True,
    ),
    B(
        "experiment-format-version-true",
        GROUP,
        "format_version: true (accepted as version 1, as true == 1 in Python; 1.0 alike)",
        ExperimentSpecError,
        ("format_version", "True is not supported", "reads 1"),
        experiment(encoder=None, format_version=True),
        cli=True,
    ),
    B(
        "experiment-training-false",
        GROUP,
        "training: false (accepted as no overrides; 0 and '' alike)",
        ExperimentSpecError,
        ("training", "must be a mapping of TrainingConfig fields", "False"),
        experiment(encoder=None, training=False),
        cli=True,
    ),
    B(
        "experiment-task-described-twice",
        GROUP,
        "task_files: [first.json, second.json], both describing a task 'reviews' (accepted: the second replaced the "
        "first without a word)",
        ExperimentSpecError,
        ("task_files[1]", "describes task 'reviews', which task_files[0] describes already", "one description"),
        _one_task_described_twice,
        cli=True,
    ),
)
