"""Command-line entry point. A thin layer over the Python API: each subcommand parses its arguments, calls one
function of adapterfusion / adapterfusion.experiments / adapterfusion.training, and prints what it returned.
Our own errors print as one line and exit with status 2."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import adapterfusion as af
from adapterfusion._startup import restore_interrupt, terminate_as_interrupt
from adapterfusion.analysis.fusion_attention import FUSION_ATTENTION_FILE, load_fusion_activation
from adapterfusion.cli_outputs import check_default_heatmap_ours, json_writer
from adapterfusion.evaluation import evaluate_run
from adapterfusion.experiments import Executor, ResultsStore, run_experiment
from adapterfusion.experiments.analyses import SPAN_ABLATION
from adapterfusion.experiments.figures import check_figure_path, plot_run_fusion_attention
from adapterfusion.experiments.plan import jobs_per_variant, plan_jobs
from adapterfusion.experiments.ray_executor import RayExecutor
from adapterfusion.experiments.report_files import REPORT_DIR, write_report
from adapterfusion.experiments.spec import load_spec
from adapterfusion.experiments.stale import changed_since_run
from adapterfusion.experiments.sweep import MAX_JOBS_WITHOUT_CONFIRMATION, check_job_count
from adapterfusion.injection.architectures import ArchitectureSpec, architecture_rows, settings_text
from adapterfusion.pruning import PRUNING_FILE, prune_fusion
from adapterfusion.serving.config import API_KEY_ENV, CHARS_PER_TOKEN, DEFAULT_MAX_NEW_TOKENS, ServeConfig
from adapterfusion.serving.server import serve
from adapterfusion.tasks import get_task, list_tasks
from adapterfusion.tasks.loading import check_max_examples
from adapterfusion.training import get_setup, train
from adapterfusion.training.hardware import is_main_process
from adapterfusion.training.progress import read_progress
from adapterfusion.training.run import training_config_for


def _info(_: argparse.Namespace) -> int:
    print(f"adapterfusion {af.__version__}")
    try:
        print(f"default encoder: {af.default_encoder_path()}")
    except af.DefaultModelMissingError as error:
        print(f"default encoder: not installed ({error})")
    try:
        print(f"default decoder: {af.defaults.default_decoder_gguf()} (as a folder: af.default_decoder_path())")
    except af.DefaultModelMissingError as error:
        print(f"default decoder: not installed ({error})")
    print("supported architectures (config.model_type), their adapter sites and AdapterHub file support:")
    rows = [(name, *_architecture_row(spec)) for name, spec in architecture_rows()]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        print("  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + "  " + row[3])
    return 0


def _architecture_row(spec: ArchitectureSpec) -> tuple[str, str, str]:
    """(kind of model, site kinds, AdapterHub files and, for a model type whose config chooses its blocks, which
    blocks under which settings) for `info`."""
    kind = "encoder-decoder" if spec.decoder is not None else "decoder" if spec.causal else "encoder"
    sites = "+".join(sorted({stack.site(p).kind.value for stack in spec.stacks() for p in stack.positions}))
    cross = " (and after cross-attention)" if spec.has_cross_attention else ""
    files = "AdapterHub files" if spec.in_adapterhub else "own format only"
    settings = settings_text(spec)
    return kind, sites + cross, files + (f"; {spec.blocks} blocks where {settings}" if settings else "")


def _list_tasks(_: argparse.Namespace) -> int:
    rows = [
        (name, spec.kind + (" (regression)" if spec.regression else ""), str(spec.num_labels), ", ".join(spec.metrics))
        for name in list_tasks()
        for spec in [get_task(name)]
    ]
    _print_table(("task", "kind", "labels", "metrics"), rows)
    return 0


def _run_executor(args: argparse.Namespace) -> str | Executor:
    """The executor name, or a RayExecutor built from the --ray-* options (which alone imply --executor ray)."""
    ray_options = {
        "address": args.ray_address,
        "cpus_per_job": args.ray_cpus_per_job,
        "gpus_per_job": args.ray_gpus_per_job,
    }
    given = [f"--ray-{key.replace('_', '-')}" for key, value in ray_options.items() if value is not None]
    executor = args.executor or ("ray" if given else "inprocess")
    if executor != "ray":
        if given:
            raise af.ConfigError(
                f"{', '.join(given)} only apply to --executor ray, not --executor {executor}; "
                "drop them or use --executor ray"
            )
        return executor

    ray = RayExecutor(args.workers, **{key: value for key, value in ray_options.items() if value is not None})
    ray.check_address()  # before run_experiment writes the output dir: ray.init would retry it for minutes
    return ray


def _plan(args: argparse.Namespace) -> int:
    spec = load_spec(args.experiment)
    jobs = plan_jobs(spec)
    rows = [(variant, str(count)) for variant, count in jobs_per_variant(jobs).items()]
    _print_table(("setup variant", "jobs"), rows)
    analysed = sum(job.kind == SPAN_ABLATION for job in jobs)  # analyses' jobs (experiments/analyses.py)
    grid = len(spec.tasks) * len(spec.variants) * len(spec.seeds)
    # Per-setup `tasks:` lists (and analyses) make the count differ from the full grid: say so instead of a product.
    shape = "" if grid == len(jobs) - analysed else " (setups limited to some of the tasks)"
    print(
        f"{len(jobs)} jobs: {len(spec.tasks)} tasks, {len(spec.variants)} setup variants, {len(spec.seeds)} seeds"
        + shape
        + (f"; {analysed} of them span-ablation evaluations" if analysed else "")
    )
    if len(jobs) > MAX_JOBS_WITHOUT_CONFIRMATION:
        print(f"more than {MAX_JOBS_WITHOUT_CONFIRMATION} jobs: `adapterfusion run` needs --yes to start them")
    return 0


def _run(args: argparse.Namespace) -> int:
    if Path(args.experiment).is_file():  # a folder or a missing file: run_experiment says what is wrong
        check_job_count(len(plan_jobs(load_spec(args.experiment))), args.yes)
    summary = run_experiment(
        args.experiment,
        executor=_run_executor(args),
        workers=args.workers,
        force=args.force,
        progress=not args.no_progress,
    )
    print(summary)
    return 0 if summary.ok else 1


def _status(args: argparse.Namespace) -> int:
    with ResultsStore(args.output_dir, readonly=True) as store:
        meta, records = store.meta(), store.jobs()
        counts = store.counts()
        interrupted = store.runner_gone()  # then jobs recorded `running` are not running
    if interrupted:
        counts["interrupted"] = counts.pop("running")
    print(f"experiment {meta.get('name')!r} (spec {meta.get('spec_hash')}) in {args.output_dir}")
    rows = []
    stale = 0
    digests: dict[Path, str | None] = {}  # store adapters' digests, shared between the jobs' checks
    for record in records:
        scores = []
        for task, metrics in record.task_metrics().items():  # one per task of a multi-task job
            best, key = metrics.get("best") or {}, metrics.get("metric_for_best")
            score = best.get(f"eval_{key}", best.get(key)) if key else None
            if isinstance(score, (int, float)):
                scores.append(f"{key}={score:.4f}" if task == record.task else f"{task} {key}={score:.4f}")
        note = (record.error or "").strip().splitlines()[-1:] if record.state in ("failed", "blocked") else []
        progress = read_progress(record.run_dir) if record.state == "running" and record.run_dir else None
        note = [progress.describe()] if progress is not None else note
        state = "interrupted" if record.state == "running" and interrupted else record.state
        changed = changed_since_run(Path(record.run_dir), digests) if state == "done" and record.run_dir else None
        if changed is not None:
            note = [f"stale: {changed}; `adapterfusion run` re-runs it"]
            stale += 1
        if state == "interrupted":
            note = [(f"stopped at {note[0]}; " if note else "") + "runner gone; `adapterfusion run` re-runs it"]
        rows.append(
            (
                record.id,
                state,
                str(record.attempts),
                f"{record.seconds:.1f}s" if record.seconds is not None else "",
                ", ".join(scores),
                note[0][:80] if note else "",
            )
        )
    _print_table(("job", "state", "attempts", "time", "dev metric", "note"), rows)
    stale_text = f" ({stale} of them stale: their inputs changed since they ran)" if stale else ""
    print(", ".join(f"{n} {state}" + (stale_text if state == "done" else "") for state, n in counts.items() if n))
    return 0


def _report(args: argparse.Namespace) -> int:
    report = write_report(args.output_dir, figures=not args.no_figures)
    for table_id in ("table1", "table2", "houlsby_table1"):
        table = report.table(table_id)
        if table is not None:
            print(table.markdown())
    written = ["tables.md", "tables.json", *(f"{t.id}.csv" for t in report.tables), *(p.name for p in report.figures)]
    print(f"report written to {Path(args.output_dir) / REPORT_DIR}: {', '.join(written)}")
    for note in report.figure_notes:
        print(f"note: {note}")
    for warning in report.warnings:  # runs to look at again, and done runs the tables leave out: not only in tables.md
        print(f"warning: {warning}")
    return 0


def _analyze_fusion(args: argparse.Namespace) -> int:
    if args.no_plot and args.output is not None:
        raise af.ConfigError("--output names the heatmap's file and --no-plot draws none; give one of them")
    source = Path(args.run_dir)
    default = (source if source.is_dir() else source.parent) / Path(FUSION_ATTENTION_FILE).with_suffix(".png")
    if args.output is None and not args.no_plot and os.path.lexists(default):
        check_default_heatmap_ours(default)
    heatmap = (
        None
        if args.no_plot
        else check_figure_path(args.output or default, "--output" if args.output else "the heatmap")
    )
    activation = load_fusion_activation(args.run_dir)
    info = activation.info
    target = f" (target {info['task']}, seed {info.get('seed')})" if "task" in info else ""
    what = "learned output scale (ScaLearn: not a softmax weight)" if activation.is_scalearn else "softmax weight"
    print(f"{activation.fusion}: mean {what} per layer and adapter over {activation.tokens} dev tokens{target}")
    print(activation.table())
    if heatmap is not None:
        print(f"heatmap: {plot_run_fusion_attention(activation, heatmap)}")
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    write_json = json_writer(args.json, args.run_dir, "evaluate")
    result = evaluate_run(
        args.run_dir,
        split=args.split,
        data_dir=args.data_dir,
        max_examples=args.max_examples,
        batch_size=args.batch_size,
        store=args.store,
    )
    print(
        f"{result['task']} / {result['setup']} / seed {result['seed']}: {result['split']} split, "
        f"{result['examples']} examples"
    )
    recorded = result.get("recorded")
    header = ("metric", result["split"]) + (("metrics.json (best dev)",) if recorded is not None else ())
    _print_table(
        header,
        [
            (name, f"{value:.4f}") + ((_number(recorded.get(name)),) if recorded is not None else ())
            for name, value in result["metrics"].items()
        ],
    )
    write_json(result)
    return 0


def _prune(args: argparse.Namespace) -> int:
    if args.json and args.output and Path(args.json).resolve().is_relative_to(Path(args.output).resolve()):
        raise af.ConfigError(
            f"--json {args.json!r} is inside --output {args.output!r}, the prune output this command writes (its "
            f"{PRUNING_FILE} is its record); give a path outside it, e.g. result.json in the current folder"
        )
    write_json = json_writer(args.json, args.run_dir, "prune")
    result = prune_fusion(
        args.run_dir,
        keep=args.keep,
        mass=args.mass,
        data_dir=args.data_dir,
        max_examples=args.max_examples,
        batch_size=args.batch_size,
        store=args.store,
        repeats=args.repeats,
        timing_batches=args.timing_batches,
        output=args.output,
    )
    print(
        f"{result.before.fusion}: mean fusion activation per adapter over {result.examples} dev examples "
        f"({result.criterion})"
    )
    _print_table(
        ("adapter", "activation", "kept"),
        [(name, f"{share:.3f}", "yes" if name in result.kept else "-") for name, share in result.activation.items()],
    )
    print()
    extra = [k for k in result.before.metrics if k not in (result.metric, "loss")]
    _print_table(
        ("", "adapters", result.metric, *extra, "loss", "ms/batch"),
        [
            (
                label,
                str(len(side.adapters)),
                *(_number(side.metrics.get(k)) for k in (result.metric, *extra, "loss")),
                f"{side.ms_per_batch:.1f}",
            )
            for label, side in (("before", result.before), ("after", result.after))
        ],
    )
    print(
        f"kept {len(result.kept)} of {len(result.before.adapters)} adapters, "
        f"{result.kept_share:.1%} of the activation; "
        f"speed-up {result.before.ms_per_batch / result.after.ms_per_batch:.2f}x (eval forward, median of "
        f"{result.repeats} interleaved repeats over {result.timed_batches} batches)"
    )
    if result.output:
        print(f"pruned fusion {result.after.fusion!r} + head written to {result.output}")
    write_json(result.to_dict())
    return 0


def _number(value) -> str:
    return f"{value:.4f}" if isinstance(value, (int, float)) else ""


# `--patience none`: no early stopping (patience=None), which a flag left out (None: the setup's default) cannot say.
NO_EARLY_STOPPING = "none"


def _patience(value: str) -> int | str:
    """--patience N (an int), or 'none' to train every epoch."""
    if value.strip().lower() in (NO_EARLY_STOPPING, "off"):
        return NO_EARLY_STOPPING
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a whole number of evaluations, or 'none' for no early stopping"
        ) from None


def _check_training_options(args: argparse.Namespace, setup: str, setup_options: dict[str, Any]) -> None:
    """Refuse a setting of train-adapter or fuse that train() would refuse, before anything loads or is written:
    train()'s own checks of its settings (training_config_for, the setup's options, check_max_examples) on what the
    command passes it, each refusal naming the option rather than the API's field."""
    with _naming_options(args):
        training_config_for(setup, _training_overrides(args), args.seed)
        get_setup(setup).resolve_options(setup_options)
        check_max_examples(args.max_examples)


@contextmanager
def _naming_options(args: argparse.Namespace) -> Iterator[None]:
    """An error raised inside that starts with `field=value` for one of the command's options (the library's checks
    name a bad value so: `max_length=4 must be ...`) becomes a ConfigError that starts `--max-length 4 must be ...`."""
    try:
        yield
    except af.AdapterFusionError as error:
        message = str(error)
        field = next((dest for dest in vars(args) if message.startswith(f"{dest}=")), None)
        if field is None:
            raise
        raise af.ConfigError(f"--{field.replace('_', '-')} {message.removeprefix(f'{field}=')}") from None


def _training_overrides(args: argparse.Namespace) -> dict:
    names = ("learning_rate", "epochs", "batch_size", "max_steps", "max_length", "patience")
    given = {name: getattr(args, name) for name in names if getattr(args, name) is not None}
    if given.get("patience") == NO_EARLY_STOPPING:
        given["patience"] = None
    return given


def _print_result(result) -> None:
    if not is_main_process():  # the other ranks of a torchrun launch trained the same run; rank 0 reports it
        return
    print(f"{result.task} / {result.setup} / seed {result.seed}: {result.metrics}")
    print(f"run folder: {result.run_dir}" + (f"; stored as {result.store_path}" if result.store_path else ""))


def _check_resume(args: argparse.Namespace) -> None:
    if args.resume and args.overwrite:
        raise af.ConfigError(
            "--resume and --overwrite contradict each other: --resume continues the earlier run from its newest "
            "checkpoint, --overwrite replaces it and starts again; give one of them"
        )


def _train_adapter(args: argparse.Namespace) -> int:
    if args.no_train_layer_norm and args.setup != "st-a-houlsby":
        raise af.ConfigError(
            f"--no-train-layer-norm applies to --setup st-a-houlsby (its per-task LayerNorm copies); --setup "
            f"{args.setup} has none: drop the flag, or add --setup st-a-houlsby"
        )
    setup_options = {
        "reduction_factor": args.reduction_factor,
        **({"train_layer_norm": False} if args.no_train_layer_norm else {}),
    }
    return _train_and_print(args, args.setup, setup_options)


def _serve(args: argparse.Namespace) -> int:
    if args.max_batch_tokens < 0:  # 0 is the flag's "no limit", which ServeConfig spells None
        raise af.ConfigError(
            f"--max-batch-tokens {args.max_batch_tokens} must be a whole number of tokens >= 1, or 0 for no limit"
        )
    config = ServeConfig(
        max_batch_size=args.max_batch_size,
        max_batch_tokens=args.max_batch_tokens or None,
        max_wait_ms=args.max_wait_ms,
        max_queue=args.max_queue,
        max_inputs=args.max_inputs,
        max_text_chars=args.max_text_chars,
        max_body_bytes=args.max_body_bytes,
        max_length=args.max_length,
        max_new_tokens=args.max_new_tokens,
        api_key=ServeConfig.key_from_env(args.api_key),
        allowed_hosts=tuple(args.allowed_host) if args.allowed_host else None,
    )
    serve(args.setup, args.base, args.host, args.port, config, args.device, args.dtype, args.drain_seconds)
    return 0


def _fuse(args: argparse.Namespace) -> int:
    sources = [s.strip() for s in args.sources.split(",") if s.strip()]
    if not sources:
        raise af.ConfigError(
            f"--sources {args.sources!r} names no source task; give comma-separated task names, "
            "e.g. --sources mnli,sst2 (the target's own adapter is always added)"
        )
    setup_options = {"sources": sources, "adapter_setup": args.adapter_setup, "adapter_seed": args.adapter_seed}
    return _train_and_print(args, "fusion-st-a", setup_options)


def _train_and_print(args: argparse.Namespace, setup: str, setup_options: dict[str, Any]) -> int:
    """What train-adapter and fuse share: their options checked before any loading, one train() call, its result."""
    _check_training_options(args, setup, setup_options)
    _check_resume(args)
    result = train(
        args.task,
        setup,
        seed=args.seed,
        encoder=args.encoder,
        data_dir=args.data_dir,
        output_dir=args.output_dir,
        store=args.store,
        training_config=_training_overrides(args),
        setup_options=setup_options,
        max_examples=args.max_examples,
        overwrite=args.overwrite,
        resume=args.resume,
    )
    _print_result(result)
    return 0


def _print_table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> None:
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows, strict=True)]
    for row in (header, tuple("-" * w for w in widths), *rows):
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def _add_training_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", required=True, help="a registered task (see list-tasks)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--encoder", default=None, help="encoder folder or Hub id (default: the shipped MiniLM)")
    parser.add_argument(
        "--data-dir",
        default=None,
        help="folder of task data in the Hub's field layout (default: the task's Hub dataset; the "
        "package's demo data: python -c 'import adapterfusion.demo as d; print(d.demo_data_dir())')",
    )
    parser.add_argument("--output-dir", default="runs", help="where the run folder goes (default: runs)")
    parser.add_argument("--store", default="adapters", help="the AdapterStore folder (default: adapters)")
    parser.add_argument("--max-examples", type=int, default=None, help="keep a seeded subset of each split")
    for name, kind in (
        ("learning-rate", float),
        ("epochs", float),
        ("batch-size", int),
        ("max-steps", int),
        ("max-length", int),
    ):
        parser.add_argument(f"--{name}", type=kind, default=None, help="override the setup's paper default")
    parser.add_argument(
        "--patience",
        type=_patience,
        default=None,
        help="evaluations without improvement before training stops (override the setup's default; 'none': train "
        "every epoch)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the run folder and store entry of an earlier run of the same task/setup/seed",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted run of the same settings from its newest complete checkpoint "
        "(optimizer, scheduler and RNG state included); without one, start from the beginning",
    )


def _add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", help="a run folder written by train(): <output_dir>/<task>/<setup>/seed-<seed>")
    parser.add_argument("--data-dir", default=None, help="task data folder (default: the one the run used)")
    parser.add_argument(
        "--max-examples",
        type=int,
        default=None,
        help="a seeded subset of the split (default: the subset the run used, if any)",
    )
    parser.add_argument("--batch-size", type=int, default=None, help="default: the run's eval batch size")
    parser.add_argument(
        "--store",
        default=None,
        help="AdapterStore of a fusion run's adapters (default: the one its config.json records)",
    )
    parser.add_argument("--json", default=None, help="also write the result to this JSON file")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="adapterfusion",
        description="Adapters and AdapterFusion for HuggingFace encoders, decoders and encoder-decoders",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("info", help="version, default encoder and supported architectures").set_defaults(run=_info)
    commands.add_parser("list-tasks", help="the registered tasks").set_defaults(run=_list_tasks)

    run = commands.add_parser("run", help="run (or resume) an experiment file")
    run.add_argument("experiment", help="experiment file (.yaml or .json)")
    run.add_argument(
        "--executor",
        choices=("inprocess", "process", "ray"),
        default=None,
        help="where jobs run (default: inprocess, or ray when a --ray-* option is given)",
    )
    run.add_argument(
        "--workers",
        type=int,
        default=None,
        help="jobs at once for --executor process (default: CPUs) or ray (default: what the cluster holds)",
    )
    run.add_argument(
        "--ray-address",
        default=None,
        help="Ray cluster to use: auto or HOST:PORT (default: RAY_ADDRESS, else a local Ray instance)",
    )
    run.add_argument("--ray-cpus-per-job", type=float, default=None, help="CPUs each Ray task asks for (default: 1)")
    run.add_argument("--ray-gpus-per-job", type=float, default=None, help="GPUs each Ray task asks for (default: 0)")
    run.add_argument("--force", action="store_true", help="reuse an output dir that holds another spec's results")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument(
        "--yes", action="store_true", help=f"confirm an experiment of more than {MAX_JOBS_WITHOUT_CONFIRMATION} jobs"
    )
    run.set_defaults(run=_run)

    plan = commands.add_parser("plan", help="the jobs an experiment file expands into, per setup variant")
    plan.add_argument("experiment", help="experiment file (.yaml or .json)")
    plan.set_defaults(run=_plan)

    status = commands.add_parser("status", help="the jobs of an experiment's output dir and their states")
    status.add_argument("output_dir")
    status.set_defaults(run=_status)

    report = commands.add_parser(
        "report", help="write an experiment's tables and figures to OUTDIR/report and print Tables 1-2"
    )
    report.add_argument("output_dir")
    report.add_argument("--no-figures", action="store_true", help="tables only (no matplotlib needed)")
    report.set_defaults(run=_report)

    analyze = commands.add_parser(
        "analyze-fusion", help="per-layer adapter activation of one fusion run (table + heatmap)"
    )
    analyze.add_argument("run_dir", help="a fusion run folder, or its fusion_attention.json")
    analyze.add_argument(
        "--output", default=None, help="heatmap PNG path (default: fusion_attention.png beside the JSON)"
    )
    analyze.add_argument("--no-plot", action="store_true", help="print the table only")
    analyze.set_defaults(run=_analyze_fusion)

    evaluate = commands.add_parser("evaluate", help="score the trained model of a run folder on a split")
    _add_run_arguments(evaluate)
    evaluate.add_argument("--split", choices=("train", "validation", "test"), default="validation")
    evaluate.set_defaults(run=_evaluate)

    prune = commands.add_parser(
        "prune", help="drop a fusion run's least-activated adapters; compare dev metric and speed before/after"
    )
    _add_run_arguments(prune)
    criterion = prune.add_mutually_exclusive_group(required=True)
    criterion.add_argument("--keep", type=int, default=None, help="keep the K most-activated adapters")
    criterion.add_argument(
        "--mass",
        type=float,
        default=None,
        help="keep the fewest adapters whose share of the activation reaches M, in (0, 1]",
    )
    prune.add_argument("--repeats", type=int, default=3, help="timing rounds, median taken (default 3)")
    prune.add_argument("--timing-batches", type=int, default=4, help="dev batches per timing round (default 4)")
    prune.add_argument("--output", default=None, help="folder for the pruned fusion, its head and pruning.json")
    prune.set_defaults(run=_prune)

    adapter = commands.add_parser("train-adapter", help="train one single-task adapter (st-a) and store it")
    _add_training_arguments(adapter)
    adapter.add_argument(
        "--reduction-factor",
        type=float,
        default=16,
        help="hidden size / the adapter's bottleneck size, a number > 0 (default 16; a fraction such as 2.5 works)",
    )
    adapter.add_argument("--setup", choices=("st-a", "st-a-houlsby"), default="st-a")
    adapter.add_argument(
        "--no-train-layer-norm",
        action="store_true",
        help="st-a-houlsby without its per-task LayerNorm copies (needed on DistilBERT and BART, whose block applies "
        "the shared LayerNorm itself)",
    )
    adapter.set_defaults(run=_train_adapter)

    fuse = commands.add_parser("fuse", help="train AdapterFusion over stored adapters for one target task")
    _add_training_arguments(fuse)
    fuse.add_argument("--sources", required=True, help="comma-separated source tasks (the target is always added)")
    fuse.add_argument("--adapter-setup", choices=("st-a", "st-a-houlsby"), default="st-a")
    fuse.add_argument("--adapter-seed", type=int, default=None, help="seed of the stored adapters (default: --seed)")
    fuse.set_defaults(run=_fuse)

    server = commands.add_parser("serve", help="serve a saved setup's adapters, fusions and heads over HTTP")
    server.add_argument("setup", help="a folder written by save_pretrained (or a Hub id)")
    server.add_argument("--base", default=None, help="base encoder folder or Hub id (default: the shipped encoder)")
    server.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    server.add_argument("--port", type=int, default=8000)
    server.add_argument("--device", default="cpu", help="torch device, e.g. cuda:0 (default cpu)")
    server.add_argument("--dtype", choices=("float32", "float64", "bfloat16", "float16"), default="float32")
    server.add_argument("--max-batch-size", type=int, default=32, help="inputs in one forward (default 32)")
    server.add_argument(
        "--max-batch-tokens", type=int, default=4096, help="padded tokens in one forward (default 4096; 0: no limit)"
    )
    server.add_argument("--max-wait-ms", type=float, default=5.0, help="wait for a batch to fill (default 5)")
    server.add_argument("--max-queue", type=int, default=256, help="requests queued before 429 (default 256)")
    server.add_argument("--max-inputs", type=int, default=None, help="inputs per request (default: max batch size)")
    server.add_argument(
        "--max-text-chars",
        type=int,
        default=None,
        help=f"characters per text (default: {CHARS_PER_TOKEN} per token of --max-length)",
    )
    server.add_argument("--max-body-bytes", type=int, default=2_000_000, help="bytes per request (default 2 MB)")
    server.add_argument(
        "--max-length", type=int, default=None, help="tokens kept per input, at most the model's (default: the model's)"
    )
    server.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        help=f"tokens one /v1/generate request may ask for, fewer than --max-length (default {DEFAULT_MAX_NEW_TOKENS}, "
        "at most what the model's positions leave after a one-token prompt)",
    )
    server.add_argument(
        "--api-key", default=None, help=f"key that POST /v1/pieces requires (default: ${API_KEY_ENV}, else none)"
    )
    server.add_argument(
        "--allowed-host",
        action="append",
        default=None,
        metavar="NAME",
        help="a host name clients may give in their Host header (repeatable; default on a loopback address: "
        "127.0.0.1, localhost and ::1; elsewhere: any)",
    )
    server.add_argument("--drain-seconds", type=int, default=30, help="time in-flight requests get at shutdown")
    server.set_defaults(run=_serve)
    return parser


EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for `yes | head`'s writer


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush into the closed pipe prints nothing either."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # a stdout without a file descriptor (tests, notebooks)
        pass


# Arguments that name a file or folder: '' would be read as the current folder (or the default) in silence.
PATH_ARGUMENTS = ("run_dir", "experiment", "output", "output_dir", "data_dir", "store", "json", "base", "encoder")


def _refuse_empty_paths(args: argparse.Namespace, argv: list[str]) -> None:
    for dest in PATH_ARGUMENTS:
        if getattr(args, dest, None) == "":
            option = f"--{dest.replace('_', '-')}"
            named = option if any(arg == option or arg.startswith(f"{option}=") for arg in argv) else dest.upper()
            raise af.ConfigError(f"{named} '' is not a path; give a folder or file path")


def _one_line(message: str) -> str:
    """`message` on the one line the CLI promises: a line break inside a value it names (a path given with a newline,
    a library's own text) shows as \\n, so no reader (a user, a log, a script taking the last line) sees it split."""
    return message.replace("\r", "\\r").replace("\n", "\\n")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)  # under the quiet Ctrl-C handler still: nothing is written yet
    if args.run is not _serve:  # serve drains on SIGTERM (uvicorn's handlers), then ends by it
        terminate_as_interrupt()  # a scheduler's or a user's `kill` ends the command as Ctrl-C does
    restore_interrupt()  # from here Ctrl-C is a KeyboardInterrupt again, answered below
    try:
        _refuse_empty_paths(args, sys.argv[1:] if argv is None else argv)
        code = args.run(args)
        sys.stdout.flush()  # a reader that went away (`status | head`) shows up here, not at interpreter exit
        return code
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_BROKEN_PIPE
    except af.AdapterFusionError as error:
        print(f"error: {_one_line(str(error))}", file=sys.stderr)
        return 2
    except PermissionError as error:  # a file or folder this user may not read or write, wherever it was met
        where = f" {error.filename!r}" if error.filename else ""
        print(f"error: permission denied on{where} ({error.strerror}); check its permissions", file=sys.stderr)
        return 2
    except OSError as error:  # a path the checks passed that the OS still refused: a full disk, a read-only mount
        if error.filename is None:  # not about a path: a bug to see whole
            raise
        print(
            f"error: {error.strerror or error} at {str(error.filename)!r}; check that path and the room left on its "
            "disk, then run the command again",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        resumable = args.run in (_run, _train_adapter, _fuse)  # what trains; other commands have nothing to resume
        print(
            f"interrupted at {datetime.now():%H:%M:%S}"
            + ("; run the same command again to resume" if resumable else ""),
            file=sys.stderr,
        )
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
