"""Bad-input cases at one boundary, the command line and the results it reports: `status` and `report` over an
output dir whose results database is another program's or holds a damaged record, or over a path the OS cannot
open or a terminal would split; a report over runs it cannot fully use (a damaged fusion attention record, a done
run without a dev score); the Ray options and the data-folder variable of `run`; and experiment files as YAML reads
them (numbers as text, a block scalar's final line break, aliases that expand to billions of values, nesting too
deep to parse)."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from unittest import mock

from adapterfusion.errors import ConfigError
from adapterfusion.experiments import ResultsStore, load_spec, plan_jobs
from adapterfusion.experiments.errors import ExperimentError, ExperimentSpecError, ResultsStoreError
from adapterfusion.experiments.report import build_report
from adapterfusion.training.errors import RunFileError
from catalogue import Action, BadInput, cli, experiment_dict

B = BadInput


def _bound_store(folder: Path, **changes: object) -> Path:
    """The output dir folder/out of the catalogue's tiny experiment (experiment_dict with `changes`), its jobs
    recorded and queued: a results store as `adapterfusion run` leaves it, without any training."""
    spec = load_spec(experiment_dict(folder, **changes))
    with ResultsStore(spec.output_dir) as store:
        store.bind(spec, plan_jobs(spec))
    return Path(spec.output_dir)


def _edit(out: Path, *statements: str) -> None:
    """Run `statements` on OUT/experiment.db and leave it in rollback-journal mode: a reader of a WAL database adds
    its -wal and -shm files beside it, which the catalogue would count as files changed in the folder."""
    with contextlib.closing(sqlite3.connect(out / "experiment.db")) as connection:
        with connection:
            for statement in statements:
                connection.execute(statement)
        connection.execute("PRAGMA journal_mode=DELETE")


def _edited_store(command: str, *statements: str) -> Callable[[Path], Action]:
    """`adapterfusion <command> OUT` after `statements` edited OUT/experiment.db (a bound store)."""

    def prepare(folder: Path) -> Action:
        out = _bound_store(folder)
        _edit(out, *statements)
        return lambda: cli(command, str(out), *(["--no-figures"] if command == "report" else []))

    return prepare


def _foreign_named_as_ours(folder: Path) -> Action:
    """Another program's database in the output dir, whose tables are called `meta` and `jobs` too."""
    (folder / "out").mkdir()
    with contextlib.closing(sqlite3.connect(folder / "out" / "experiment.db")) as connection, connection:
        connection.execute("CREATE TABLE meta (k TEXT)")
        connection.execute("CREATE TABLE jobs (id TEXT, name TEXT)")
    return lambda: cli("status", str(folder / "out"))


def _results_path(command: str, name: str) -> Callable[[Path], Action]:
    """`adapterfusion <command> <folder>/<name>`, a path nothing is at."""
    return lambda folder: lambda: cli(command, str(folder / name))


def _damaged_fusion_attention(folder: Path) -> Action:
    """A report over a done fusion job whose fusion_attention.json was cut short: the note that names it."""
    out = _bound_store(folder, tasks=["rte", "cb"], setups=["st-a", "fusion-st-a"], seeds=[1])
    with ResultsStore(out) as store:
        for job in store.jobs():
            run_dir = out / "runs" / job.id
            run_dir.mkdir(parents=True)
            if job.setup == "fusion-st-a" and job.task == "rte":
                (run_dir / "fusion_attention.json").write_text('{"format_version": 1, "fusion": "fus')
            store.mark_running(job.id, str(run_dir))
            store.mark_done(job.id, {"metric_for_best": "accuracy", "best": {"accuracy": 0.6}})
    _edit(out)

    def action() -> str:
        notes = [note for note in build_report(out).figure_notes if "fusion_attention.json" in note]
        return notes[0] if notes else "no note"

    return action


def _done_without_score(folder: Path) -> Action:
    """A report over two seeds of `head` on rte and cb, seed 2 on rte done with no dev score recorded: its warning."""
    out = _bound_store(folder, seeds=[1, 2])
    with ResultsStore(out) as store:
        for job in store.jobs():
            store.mark_running(job.id, str(out / "runs" / job.id))
            best = {} if job.id == "head/rte/seed-2" else {"accuracy": 0.6}
            store.mark_done(job.id, {"metric_for_best": "accuracy", "best": best})
    _edit(out)

    def action() -> str:
        warnings = [warning for warning in build_report(out).warnings if "head/rte" in warning]
        return warnings[0] if warnings else "no warning"

    return action


def _run_with(*options: str) -> Callable[[Path], Action]:
    """`adapterfusion run experiment.json <options>` of the catalogue's valid tiny experiment."""

    def prepare(folder: Path) -> Action:
        path = folder / "experiment.json"
        path.write_text(json.dumps(experiment_dict(folder)))
        return lambda: cli("run", str(path), "--no-progress", *options)

    return prepare


def _run_with_data_dir_variable(value: str) -> Callable[[Path], Action]:
    """`adapterfusion run experiment.json` (no data_dir) with $ADAPTERFUSION_DATA_DIR=<folder>/<value>."""

    def prepare(folder: Path) -> Action:
        path = folder / "experiment.json"
        path.write_text(json.dumps(experiment_dict(folder)))

        def action() -> str:
            with mock.patch.dict("os.environ", {"ADAPTERFUSION_DATA_DIR": str(folder / value)}):
                return cli("run", str(path), "--no-progress")

        return action

    return prepare


def _yaml_experiment(*lines: str) -> Callable[[Path], Action]:
    """`adapterfusion run experiment.yaml` of a one-task head experiment with `lines` added to its YAML (a top-level
    key among them replaces the experiment's own)."""

    def prepare(folder: Path) -> Action:
        path = folder / "experiment.yaml"
        body = {
            "name": "name: tiny",
            "encoder": "encoder: some-org/some-encoder",
            "tasks": "tasks: [rte]",
            "setups": "setups: [head]",
            "output_dir": f"output_dir: {folder / 'out'}",
        }
        given = {line.split(":")[0] for line in lines if not line.startswith(" ")}
        path.write_text("\n".join([*(line for key, line in body.items() if key not in given), *lines]) + "\n")
        return lambda: cli("run", str(path), "--no-progress")

    return prepare


# `description:` a mapping of anchors, the last one 10**9 values once its aliases are read: a billion laughs
_ALIASES = ", ".join(
    ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
)

CASES: tuple[BadInput, ...] = (
    B(
        "results-db-foreign-named-as-ours",
        "results store",
        "adapterfusion status OUT where OUT/experiment.db is another program's SQLite database with tables named "
        "meta and jobs (status, report and run ended in sqlite3.OperationalError: no such column: key)",
        ResultsStoreError,
        ("experiment.db", "something else", "'jobs' has no column", "choose another output_dir"),
        _foreign_named_as_ours,
        cli=True,
    ),
    B(
        "results-db-job-metrics-damaged",
        "results store",
        "adapterfusion report OUT where a done job's recorded metrics in experiment.db are cut short (a "
        "json.JSONDecodeError traceback; a JSON list there: AttributeError)",
        ResultsStoreError,
        ("experiment.db", "the metrics of job 'head/rte/seed-42'", "is not JSON", "Move it aside"),
        _edited_store("report", "UPDATE jobs SET metrics = '{\"best\": ', state = 'done'"),
        cli=True,
    ),
    B(
        "results-db-spec-damaged",
        "results store",
        "adapterfusion report OUT where the experiment recorded in experiment.db (meta 'spec') is not JSON (a "
        "json.JSONDecodeError traceback)",
        ResultsStoreError,
        ("experiment.db", "the recorded experiment", "is not JSON", "restore the file from a backup"),
        _edited_store("report", "UPDATE meta SET value = '{' WHERE key = 'spec'"),
        cli=True,
    ),
    B(
        "report-fusion-attention-damaged",
        "results store",
        "a report over a done fusion run whose fusion_attention.json is cut short (not an error: the run was left "
        "out of the fusion attention figure's mean over seeds without a word)",
        None,
        ("fusion-st-a/rte seed 1", "left out of the fusion attention figure", "not valid JSON"),
        _damaged_fusion_attention,
    ),
    B(
        "report-done-run-without-score",
        "results store",
        "a report over a done job whose metrics record no dev score (not an error: the job was left out of its "
        "cell, which showed the other seed's score, and the report said it was made from 4 of 4 jobs done)",
        None,
        ("head/rte seed 2", "no finite dev accuracy", "left out of the tables"),
        _done_without_score,
    ),
    B(
        "status-path-with-newline",
        "command line",
        "adapterfusion status $'no\\nsuch' (the path was printed as it is: a two-line error)",
        ExperimentError,
        ("'", "no\\nsuch", "does not exist", "output_dir"),
        _results_path("status", "no\nsuch"),
        cli=True,
    ),
    B(
        "analyze-fusion-path-with-newline",
        "command line",
        "adapterfusion analyze-fusion $'no\\nsuch' (the library names the path unquoted: a two-line error; any "
        "message quoting a line break did the same)",
        RunFileError,
        ("no\\nsuch", "does not exist", "fusion runs"),
        _results_path("analyze-fusion", "no\nsuch"),
        cli=True,
    ),
    B(
        "report-path-with-nul",
        "command line",
        "adapterfusion report $'out\\0' (called missing, with the NUL printed raw)",
        ExperimentError,
        ("NUL character", "not an experiment's output dir"),
        _results_path("report", "out\0"),
        cli=True,
    ),
    B(
        "run-ray-address-empty",
        "command line",
        "adapterfusion run experiment.json --ray-address '' (the output dir was written, then Ray refused the "
        "address, which the message called 'a new local instance')",
        ConfigError,
        ("Ray address ''", "--ray-address", "names no cluster", "auto", "HOST:PORT"),
        _run_with("--ray-address", ""),
        cli=True,
    ),
    B(
        "run-ray-address-unreachable",
        "command line",
        "adapterfusion run experiment.json --ray-address 127.0.0.1:1, where no cluster listens (the output dir was "
        "written, then ray.init retried the address for many minutes, printing GCS time-outs)",
        ExperimentError,
        ("nothing answers", "'127.0.0.1:1'", "ray start --head", "HOST:PORT"),
        _run_with("--ray-address", "127.0.0.1:1"),
        cli=True,
    ),
    B(
        "run-data-dir-variable-missing",
        "command line",
        "ADAPTERFUSION_DATA_DIR=<a folder that does not exist> adapterfusion run experiment.json (passed over in "
        "silence: every job loaded its task from the Hub, or, offline, failed saying to set the variable)",
        ExperimentSpecError,
        ("$ADAPTERFUSION_DATA_DIR", "does not exist", "Or unset it", "Nothing was run"),
        _run_with_data_dir_variable("data"),
        cli=True,
    ),
    B(
        "experiment-learning-rate-yaml-text",
        "experiment files",
        "training: {learning_rate: 1e-4} in a YAML experiment file, which YAML reads as the text '1e-4' (was told "
        "that '1e-4' must be a finite number, not why it was none)",
        ExperimentSpecError,
        ("training.learning_rate", "'1e-4' is text", "write 1.0e-4"),
        _yaml_experiment("training: {learning_rate: 1e-4}"),
        cli=True,
    ),
    B(
        "experiment-seed-quoted",
        "experiment files",
        "seeds: ['1', '2'] (numbers in quotes: was told seed '1' must be an integer, not that it was text)",
        ExperimentSpecError,
        ("seeds[0]", "'1' is text, not a number", "without quotes"),
        _yaml_experiment("seeds: ['1', '2']"),
        cli=True,
    ),
    B(
        "experiment-output-dir-block-scalar",
        "experiment files",
        "output_dir: > with the path on the next line, which YAML reads as 'out\\n' (the runner made a folder named "
        "'out\\n' beside the one meant)",
        ExperimentSpecError,
        ("output_dir", "holds a line break", "block scalar"),
        _yaml_experiment("output_dir: >", "  out"),
        cli=True,
    ),
    B(
        "experiment-yaml-alias-bomb",
        "experiment files",
        "description: a mapping of YAML aliases that stands for 10**9 values (a 600-byte file; `adapterfusion run` "
        "ran for hours, writing the refusal's repr of the value)",
        ExperimentSpecError,
        ("experiment.yaml", "more than 100,000 values", "YAML aliases", "write the values out"),
        _yaml_experiment(f"description: {{{_ALIASES}}}"),
        cli=True,
    ),
    B(
        "experiment-yaml-nested-too-deep",
        "experiment files",
        "an experiment file with 5000 nested brackets (a RecursionError traceback from PyYAML's parser)",
        ExperimentSpecError,
        ("experiment.yaml", "nests its lists or mappings too deeply"),
        _yaml_experiment("description: " + "[" * 5000 + "]" * 5000),
        cli=True,
    ),
    B(
        "experiment-integer-past-digit-limit",
        "experiment files",
        "an experiment file with `seeds: [<a 5000-digit number>]` (a raw ValueError from PyYAML's int(), telling the "
        "user to call sys.set_int_max_str_digits())",
        ExperimentSpecError,
        ("experiment.yaml holds an integer of more than 4300 digits", "write the value you meant"),
        _yaml_experiment("seeds: [" + "9" * 5000 + "]"),
        cli=True,
    ),
)
