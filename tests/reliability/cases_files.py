"""Bad-input cases at one boundary, file and folder targets: where things are saved or read (setup folders, output
paths, names that become paths). Every target is judged by adapterfusion/io/paths.py; the runner's byte-for-byte
check of the case's folder is the check that nothing the user had there is deleted or overwritten."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import adapterfusion as af
from adapterfusion.evaluation import evaluate_run
from adapterfusion.experiments.errors import ExperimentError, ExperimentSpecError
from adapterfusion.interop import export_adapterhub
from adapterfusion.tasks import TaskError, load_task_file
from adapterfusion.training.store import AdapterStore
from catalogue import (
    Action,
    BadInput,
    a_file,
    cli,
    experiment,
    experiment_dict,
    load_into,
    own_file,
    read_only,
    saved_piece,
)
from task_data import DATA_DIR
from tiny_models import tiny_encoder

B = BadInput
LONG = "n" * 300  # more than the 255 bytes Linux allows in one file or folder name


def _model(adapter: str = "a") -> af.AdaptedModel:
    model = af.wrap(tiny_encoder("bert"))
    model.add_adapter(adapter, "pfeiffer")
    return model


# ---- writing into folders that hold what we did not write ----------------------------------------------------------
def _save_pretrained_onto_foreign_folder(folder: Path) -> Action:
    (folder / "mine").mkdir()
    a_file(folder / "mine", "notes.txt")
    return lambda: _model().save_pretrained(folder / "mine")


def _save_pretrained_over_a_foreign_piece(folder: Path) -> Action:
    """Our own setup, but adapters/a/ holds an adapter.safetensors the user put there, not ours."""
    model = _model()
    model.save_pretrained(folder / "setup")
    (folder / "setup" / "adapters" / "a" / "adapter_config.json").unlink()
    return lambda: model.save_pretrained(folder / "setup")


def _save_adapter_over(name: str, make: Callable[[Path], Any]) -> Callable[[Path], Action]:
    def prepare(folder: Path) -> Action:
        (folder / "a").mkdir()
        make(folder / "a" / name)
        model = _model()
        return lambda: model.save_adapter("a", folder / "a")

    return prepare


def _save_over_another_name(kind: str, overwrite: object = False) -> Callable[[Path], Action]:
    """The folder holds a `kind` saved under another name ('trained'); saving 'scratch' there would replace it."""

    def prepare(folder: Path) -> Action:
        model = _model("trained")
        model.add_adapter("scratch", "pfeiffer")
        if kind == "fusion":
            model.add_fusion("trained", ["trained", "scratch"])
            model.add_fusion("scratch", ["scratch", "trained"])
        if kind == "head":
            model.add_head("trained", af.ClassificationHead(num_labels=2))
            model.add_head("scratch", af.ClassificationHead(num_labels=3))
        save = getattr(model, f"save_{kind}")
        save("trained", folder / "piece")
        return lambda: save("scratch", folder / "piece", overwrite=overwrite)

    return prepare


def _save_pretrained_through_symlinked_piece(folder: Path) -> Action:
    """The user replaced the setup's adapters/b with a symlink to their own copy of b, kept outside the setup."""
    model = _model()
    model.add_adapter("b", "pfeiffer")
    model.save_adapter("b", folder / "library" / "b")
    model.save_pretrained(folder / "setup")
    for path in (folder / "setup" / "adapters" / "b").iterdir():
        path.unlink()
    (folder / "setup" / "adapters" / "b").rmdir()
    (folder / "setup" / "adapters" / "b").symlink_to(folder / "library" / "b")
    return lambda: model.save_pretrained(folder / "setup")


def _export_adapterhub_over(folder: Path) -> Action:
    model = _model()
    (folder / "hub").mkdir()
    a_file(folder / "hub", "adapter_config.json")
    return lambda: export_adapterhub(model, "adapter", "a", folder / "hub")


def _export_adapterhub_over_peft(folder: Path) -> Action:
    """A HuggingFace model folder (config.json, model.safetensors) that also holds a PEFT LoRA's two files."""
    model = _model()
    tiny_encoder("bert").save_pretrained(folder / "hub")
    (folder / "hub" / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 8}))
    (folder / "hub" / "adapter_model.safetensors").write_bytes(b"the LoRA the user keeps")
    return lambda: export_adapterhub(model, "adapter", "a", folder / "hub", overwrite=True)


def _into_model_folder(kind: str, export: bool = False) -> Callable[[Path], Action]:
    """save_<kind> (or export_adapterhub) of a tiny BERT's adapter 'a', fusion 'f' or head 'h' into the folder of a
    HuggingFace model (save_pretrained: config.json, model.safetensors), beside its README.md."""

    def prepare(folder: Path) -> Action:
        model = _model()
        model.add_adapter("b", "pfeiffer")
        model.add_fusion("f", ["a", "b"])
        model.add_head("h", af.ClassificationHead(num_labels=2))
        tiny_encoder("bert").save_pretrained(folder / "bert")
        a_file(folder / "bert", "README.md")
        name = {"adapter": "a", "fusion": "f", "head": "h"}[kind]
        if export:
            return lambda: export_adapterhub(model, kind, name, folder / "bert", overwrite=True)
        return lambda: getattr(model, f"save_{kind}")(name, folder / "bert")

    return prepare


def _store_overwrite_with_notes(folder: Path) -> Action:
    model = _model()
    store = AdapterStore(folder / "store")
    entry = store.put_model(model, "a", None, "enc", "rte", "st-a", 1)
    a_file(entry, "notes.txt")
    return lambda: store.put_model(model, "a", None, "enc", "rte", "st-a", 1, overwrite=True)


def _prune_output_holding(folder: Path) -> Action:
    (folder / "pruned").mkdir()
    a_file(folder / "pruned", "pruning.json")
    return lambda: cli("prune", str(folder / "run"), "--keep", "1", "--output", str(folder / "pruned"))


# ---- targets that are not plain folders or files -------------------------------------------------------------------
def _symlink_loop(folder: Path) -> Path:
    loop = folder / "loop"
    loop.symlink_to(loop)
    return loop


def _save_pretrained_into_loop(folder: Path) -> Action:
    loop = _symlink_loop(folder)
    return lambda: _model().save_pretrained(loop)


def _save_pretrained_read_only(folder: Path) -> Action:
    (folder / "locked").mkdir()
    model = _model()

    def action() -> Any:
        with read_only(folder / "locked"):
            return model.save_pretrained(folder / "locked" / "setup")

    return action


def _save_adapter_onto_dangling_link(folder: Path) -> Action:
    (folder / "a").symlink_to(folder / "gone")
    return lambda: _model().save_adapter("a", folder / "a")


def _save_adapter_onto_fifo(folder: Path) -> Action:
    os.mkfifo(folder / "a")
    return lambda: _model().save_adapter("a", folder / "a")


def _save_adapter_through_dangling_link(folder: Path) -> Action:
    (folder / "out").symlink_to(folder / "gone")
    return lambda: _model().save_adapter("a", folder / "out" / "a")


def _analyze_fusion_output_loop(folder: Path) -> Action:
    loop = _symlink_loop(folder)
    return lambda: cli("analyze-fusion", str(folder / "run"), "--output", str(loop))


def _json_onto_fifo(folder: Path) -> Action:
    os.mkfifo(folder / "result.json")
    return lambda: cli("evaluate", str(folder / "run"), "--json", str(folder / "result.json"))


def _report_dir_linked_to_user_files(folder: Path) -> Action:
    (folder / "mydocs").mkdir()
    (folder / "mydocs" / "tables.md").write_text("MY THESIS TABLE\n")
    (folder / "report").symlink_to(folder / "mydocs")
    return lambda: cli("report", str(folder), "--no-figures")


def _heatmap_over_user_file(folder: Path) -> Action:
    (folder / "fusion_attention.json").write_text("{}")
    (folder / "fusion_attention.png").write_text("my own figure\n")
    return lambda: cli("analyze-fusion", str(folder / "fusion_attention.json"))


def _report_dir_is_file(folder: Path) -> Action:
    a_file(folder, "report")
    return lambda: cli("report", str(folder))


# ---- names too long for the file system ----------------------------------------------------------------------------
def _save_pretrained_long_adapter_name(folder: Path) -> Action:
    model = _model(LONG)
    return lambda: model.save_pretrained(folder / "setup")


def _store_long_task_name(folder: Path) -> Action:
    model = _model()
    return lambda: AdapterStore(folder / "store").put_model(model, "a", None, "enc", LONG, "st-a", 1)


# ---- files to read that are not regular files ----------------------------------------------------------------------
def _piece_file_replaced(name: str, make: Callable[[Path], Any]) -> Callable[[Path], Action]:
    def prepare(folder: Path) -> Action:
        piece = saved_piece(folder)
        (piece / name).unlink()
        make(piece / name)
        return load_into(_model("other"), "adapter", piece)

    return prepare


def _load_from(make: Callable[[Path], Any]) -> Callable[[Path], Action]:
    def prepare(folder: Path) -> Action:
        make(folder / "source")
        return load_into(_model("other"), "adapter", folder / "source")

    return prepare


def _setup_index_is_folder(folder: Path) -> Action:
    _model().save_pretrained(folder / "setup")
    (folder / "setup" / "adapterfusion_setup.json").unlink()
    (folder / "setup" / "adapterfusion_setup.json").mkdir()
    return lambda: af.AdaptedModel.from_pretrained(tiny_encoder("bert"), folder / "setup")


def _run_given_folder_with_experiment(folder: Path) -> Action:
    (folder / "exp").mkdir()
    (folder / "exp" / "experiment.yaml").write_text(json.dumps(experiment_dict(folder)))
    return lambda: cli("run", str(folder / "exp"), "--no-progress")


def _run_given_output_dir(folder: Path) -> Action:
    (folder / "out").mkdir()
    (folder / "out" / "experiment.json").write_text(json.dumps(experiment_dict(folder)))
    (folder / "out" / "experiment.db").write_bytes(b"")
    return lambda: cli("run", str(folder / "out"), "--no-progress")


def _save_adapter_into(directory: Any) -> Callable[[Path], Action]:
    """save_adapter('a', `directory`) run from inside the case's folder, so a write into '.' would show there."""

    def prepare(folder: Path) -> Action:
        model = af.wrap(tiny_encoder("bert"))
        model.add_adapter("a")

        def action() -> Any:
            here = os.getcwd()
            os.chdir(folder)
            try:
                return model.save_adapter("a", directory)
            finally:
                os.chdir(here)

        return action

    return prepare


def _train_adapter_store_file(folder: Path) -> Action:
    store = a_file(folder, "store")
    return lambda: cli(
        "train-adapter",
        *("--task", "rte", "--max-examples", "8", "--max-steps", "1", "--data-dir", str(DATA_DIR)),
        *("--output-dir", str(folder / "runs"), "--store", str(store)),
    )


def _yaml_with_tab(folder: Path) -> Action:
    path = folder / "experiment.yaml"
    path.write_text("name: tiny\ntasks:\n\t- rte\nsetups: [head]\n")
    return lambda: cli("run", str(path), "--no-progress")


def _task_file_latin1(folder: Path) -> Action:
    path = folder / "task.json"
    path.write_bytes(b'{"name": "caf\xe9", "kind": "single", "text_fields": ["t"], "label_names": ["a", "b"]}')
    return lambda: load_task_file(path, register=False)


CASES: tuple[BadInput, ...] = (
    # data loss: writing into a folder that holds what we did not write
    B(
        "save-pretrained-foreign-folder",
        "output paths",
        "save_pretrained(<a folder holding the user's notes.txt, not a saved setup>)",
        af.ConfigError,
        ("/mine'", "not a saved setup", "notes.txt", "new or empty folder"),
        _save_pretrained_onto_foreign_folder,
    ),
    B(
        "save-pretrained-foreign-piece",
        "output paths",
        "save_pretrained onto our own setup whose adapters/a/ holds an adapter.safetensors without our config",
        af.ConfigError,
        ("adapter.safetensors", "did not write", "another folder"),
        _save_pretrained_over_a_foreign_piece,
    ),
    B(
        "save-adapter-over-foreign-weights",
        "output paths",
        "save_adapter('a', <a folder holding an adapter.safetensors we did not write>)",
        af.ConfigError,
        ("save_adapter", "adapter.safetensors", "did not write", "another folder"),
        _save_adapter_over("adapter.safetensors", lambda path: a_file(path.parent, path.name)),
    ),
    B(
        "save-adapter-config-name-is-folder",
        "output paths",
        "save_adapter('a', <a folder holding a folder named adapter_config.json>)",
        af.ConfigError,
        ("adapter_config.json", "is a folder", "where our file goes"),
        _save_adapter_over("adapter_config.json", Path.mkdir),
    ),
    B(
        "save-adapter-over-another-name",
        "output paths",
        "save_adapter('scratch', <a folder holding the adapter 'trained'>)",
        af.ConfigError,
        ("save_adapter", "'trained'", "'scratch'", "overwrite=True", "another folder"),
        _save_over_another_name("adapter"),
    ),
    B(
        "save-fusion-over-another-name",
        "output paths",
        "save_fusion('scratch', <a folder holding the fusion 'trained'>)",
        af.ConfigError,
        ("save_fusion", "'trained'", "'scratch'", "overwrite=True"),
        _save_over_another_name("fusion"),
    ),
    B(
        "save-head-over-another-name",
        "output paths",
        "save_head('scratch', <a folder holding the head 'trained'>)",
        af.ConfigError,
        ("save_head", "'trained'", "'scratch'", "overwrite=True"),
        _save_over_another_name("head"),
    ),
    B(
        "save-adapter-overwrite-not-bool",
        "output paths",
        "save_adapter('scratch', <a folder holding the adapter 'trained'>, overwrite='no')",
        af.ConfigError,
        ("overwrite='no'", "expected true or false"),
        _save_over_another_name("adapter", overwrite="no"),
    ),
    B(
        "save-pretrained-through-symlinked-piece",
        "output paths",
        "save_pretrained onto our setup whose adapters/b is a symlink to the user's adapter kept outside the setup",
        af.ConfigError,
        ("adapters/b", "symlink", "only inside the setup"),
        _save_pretrained_through_symlinked_piece,
    ),
    B(
        "export-adapterhub-over-files",
        "output paths",
        "export_adapterhub(model, 'adapter', 'a', <a folder holding an adapter_config.json>)",
        af.ConfigError,
        ("adapter_config.json", "neither an AdapterHub adapter", "we did not write", "another folder"),
        _export_adapterhub_over,
    ),
    B(
        "export-adapterhub-overwrite-peft-config",
        "output paths",
        "export_adapterhub(model, 'adapter', 'a', <a model folder holding a PEFT adapter's adapter_config.json>, "
        "overwrite=True) (replaced the PEFT config, a file we did not write)",
        af.ConfigError,
        ("adapter_config.json", "PEFT", "even with overwrite=True", "another folder"),
        _export_adapterhub_over_peft,
    ),
    B(
        "save-adapter-into-model-folder",
        "output paths",
        "model.save_adapter('a', <a HuggingFace model's folder: config.json, model.safetensors>) (wrote "
        "adapter_config.json beside the model, which transformers with peft installed then reads as a PEFT adapter)",
        af.ConfigError,
        ("save_adapter", "holds a HuggingFace model", "config.json, model.safetensors", "PEFT", "new or empty folder"),
        _into_model_folder("adapter"),
    ),
    B(
        "save-head-into-model-folder",
        "output paths",
        "model.save_head('h', <a HuggingFace model's folder>) (mixed the head's files with the model's)",
        af.ConfigError,
        ("save_head", "holds a HuggingFace model", "folder of its own", "new or empty folder"),
        _into_model_folder("head"),
    ),
    B(
        "export-adapterhub-into-model-folder",
        "output paths",
        "export_adapterhub(model, 'fusion', 'f', <a HuggingFace model's folder>, overwrite=True) (mixed the fusion's "
        "files with the model's)",
        af.ConfigError,
        ("export_adapterhub", "holds a HuggingFace model", "config.json, model.safetensors", "new or empty folder"),
        _into_model_folder("fusion", export=True),
    ),
    B(
        "store-overwrite-user-file",
        "output paths",
        "AdapterStore.put_model(..., overwrite=True) onto an entry folder where the user put notes.txt",
        af.ConfigError,
        ("notes.txt", "did not write", "move"),
        _store_overwrite_with_notes,
    ),
    B(
        "prune-output-foreign-file",
        "output paths",
        "adapterfusion prune RUN --keep 1 --output <a folder holding a pruning.json we did not write>",
        af.ConfigError,
        ("pruning.json", "did not write", "another folder"),
        _prune_output_holding,
        cli=True,
    ),
    # targets that are not plain folders or files
    B(
        "save-pretrained-symlink-loop",
        "output paths",
        "save_pretrained(<a symlink to itself, d -> d>)",
        af.ConfigError,
        ("/loop'", "symlink loop"),
        _save_pretrained_into_loop,
    ),
    B(
        "save-pretrained-read-only",
        "output paths",
        "save_pretrained(<a new folder in a read-only folder (mode 555)>)",
        af.ConfigError,
        ("/locked/setup'", "read-only for this user"),
        _save_pretrained_read_only,
    ),
    B(
        "save-adapter-dangling-symlink",
        "output paths",
        "save_adapter('a', <a symlink to a path that does not exist>)",
        af.ConfigError,
        ("/a'", "a symlink to", "/gone'", "does not exist"),
        _save_adapter_onto_dangling_link,
    ),
    B(
        "save-adapter-through-dangling-symlink",
        "output paths",
        "save_adapter('a', <dangling symlink>/a)",
        af.ConfigError,
        ("/out'", "a symlink to", "does not exist"),
        _save_adapter_through_dangling_link,
    ),
    B(
        "save-adapter-onto-fifo",
        "output paths",
        "save_adapter('a', <a FIFO>)",
        af.ConfigError,
        ("/a'", "is a FIFO", "not a folder"),
        _save_adapter_onto_fifo,
    ),
    B(
        "analyze-fusion-output-loop",
        "output paths",
        "adapterfusion analyze-fusion RUN --output <a symlink loop> (checked before the run is read)",
        af.ConfigError,
        ("--output", "symlink loop"),
        _analyze_fusion_output_loop,
        cli=True,
    ),
    B(
        "evaluate-json-fifo",
        "output paths",
        "adapterfusion evaluate RUN --json <a FIFO> (checked before the evaluation)",
        af.ConfigError,
        ("--json", "is a FIFO", "not a regular file"),
        _json_onto_fifo,
        cli=True,
    ),
    B(
        "report-dir-linked-to-user-files",
        "output paths",
        "adapterfusion report OUTDIR where OUTDIR/report is a link to the user's folder holding tables.md (was "
        "written into, the user's tables.md replaced)",
        ExperimentError,
        ("/report'", "is not empty", "a folder we made", "a link to"),
        _report_dir_linked_to_user_files,
        cli=True,
    ),
    B(
        "analyze-fusion-default-heatmap-exists",
        "output paths",
        "adapterfusion analyze-fusion X/fusion_attention.json beside the user's own fusion_attention.png, X not a run "
        "folder (was replaced without a word)",
        af.ConfigError,
        ("fusion_attention.png' exists", "not a run folder", "--output"),
        _heatmap_over_user_file,
        cli=True,
    ),
    B(
        "report-dir-is-file",
        "output paths",
        "adapterfusion report OUTDIR where OUTDIR/report is a file",
        ExperimentError,
        ("/report'", "is a file, not a folder"),
        _report_dir_is_file,
        cli=True,
    ),
    # names too long for the file system
    B(
        "save-pretrained-long-adapter-name",
        "output paths",
        "save_pretrained of a model with an adapter named 'n' * 300 (its folder adapters/<name>)",
        af.ConfigError,
        ("adapter name", "300 bytes", "255", "shorter name"),
        _save_pretrained_long_adapter_name,
    ),
    B(
        "save-adapter-long-folder-name",
        "output paths",
        "save_adapter('a', <folder>/'n' * 300)",
        af.ConfigError,
        ("save_adapter", "300 bytes", "255", "shorter name"),
        lambda folder: lambda: _model().save_adapter("a", folder / LONG),
    ),
    B(
        "store-long-task-name",
        "output paths",
        "AdapterStore.put_model(..., task='n' * 300) (the task becomes a folder name)",
        af.ConfigError,
        ("store entry task", "300 bytes", "255"),
        _store_long_task_name,
    ),
    B(
        "experiment-output-dir-long-name",
        "output paths",
        "experiment output_dir whose last folder name is 'o' * 300",
        af.ConfigError,
        ("output_dir", "300 bytes", "255"),
        lambda folder: experiment(output_dir=str(folder / ("o" * 300)), encoder=None)(folder),
        cli=True,
    ),
    # files to read that are not regular files
    B(
        "adapter-weights-is-folder",
        "output paths",
        "load_adapter of a saved adapter whose adapter.safetensors is a folder",
        af.SerializationError,
        ("adapter.safetensors", "is a folder, not a file"),
        _piece_file_replaced("adapter.safetensors", Path.mkdir),
    ),
    B(
        "adapter-weights-dev-zero",
        "output paths",
        "load_adapter of a saved adapter whose adapter.safetensors is a symlink to /dev/zero",
        af.SerializationError,
        ("adapter.safetensors", "character device", "/dev/zero"),
        _piece_file_replaced("adapter.safetensors", lambda path: path.symlink_to("/dev/zero")),
    ),
    B(
        "adapter-config-dev-null",
        "output paths",
        "load_adapter of a saved adapter whose adapter_config.json is a symlink to /dev/null",
        af.SerializationError,
        ("adapter_config.json", "character device", "/dev/null"),
        _piece_file_replaced("adapter_config.json", lambda path: path.symlink_to("/dev/null")),
    ),
    B(
        "load-adapter-from-symlink-loop",
        "output paths",
        "load_adapter(<a symlink to itself>) (was: 'not a directory (no such folder)')",
        af.SerializationError,
        ("/source'", "symlink loop", "not a folder"),
        _load_from(lambda path: path.symlink_to(path)),
    ),
    B(
        "load-adapter-from-fifo",
        "output paths",
        "load_adapter(<a FIFO>) (was: 'is a file')",
        af.SerializationError,
        ("/source'", "is a FIFO", "not a folder"),
        _load_from(os.mkfifo),
    ),
    B(
        "setup-index-is-folder",
        "output paths",
        "from_pretrained of a setup whose adapterfusion_setup.json is a folder",
        af.SerializationError,
        ("adapterfusion_setup.json", "is a folder, not a file"),
        _setup_index_is_folder,
    ),
    B(
        "run-given-experiment-folder",
        "output paths",
        "adapterfusion run <a folder holding experiment.yaml> (instead of the file)",
        af.ConfigError,
        ("/exp'", "is a folder", "experiment.yaml"),
        _run_given_folder_with_experiment,
        cli=True,
    ),
    B(
        "run-given-output-dir",
        "output paths",
        "adapterfusion run <an experiment's output dir> (instead of its experiment file)",
        af.ConfigError,
        ("/out'", "is a folder", "output dir", "experiment.json"),
        _run_given_output_dir,
        cli=True,
    ),
    # #21's second trial: what the first validators let through
    B(
        "save-adapter-folder-none",
        "output paths",
        "save_adapter('a', None) (was a TypeError from pathlib)",
        af.ConfigError,
        ("save_adapter", "None", "is not a path"),
        _save_adapter_into(None),
    ),
    B(
        "save-adapter-folder-empty-string",
        "output paths",
        "save_adapter('a', '') (was written into the current folder, Path('') being '.')",
        af.ConfigError,
        ("save_adapter", "''", "is not a path"),
        _save_adapter_into(""),
    ),
    B(
        "train-adapter-store-is-file",
        "output paths",
        "adapterfusion train-adapter --store <an existing file> (was a NotADirectoryError traceback after training)",
        af.ConfigError,
        ("AdapterStore folder", "/store'", "is a file"),
        _train_adapter_store_file,
        cli=True,
    ),
    B(
        "store-folder-none",
        "output paths",
        "AdapterStore(None) (was a TypeError from pathlib)",
        af.ConfigError,
        ("AdapterStore folder", "None", "is not a path"),
        lambda folder: lambda: AdapterStore(None),  # type: ignore[arg-type]
    ),
    B(
        "analyze-fusion-output-suffix",
        "output paths",
        "adapterfusion analyze-fusion RUN --output heat.txt (was a ValueError from matplotlib, after the table)",
        af.ConfigError,
        ("--output", "heat.txt", ".txt", ".png"),
        lambda folder: lambda: cli("analyze-fusion", str(folder / "run"), "--output", str(folder / "heat.txt")),
        cli=True,
    ),
    B(
        "evaluate-run-none",
        "output paths",
        "evaluate_run(None) (was a TypeError from pathlib)",
        af.ConfigError,
        ("run folder", "None", "is not a path"),
        lambda folder: lambda: evaluate_run(None),  # type: ignore[arg-type],
    ),
    B(
        "experiment-yaml-tab",
        "experiment files",
        "experiment file indented with a tab (the YAML error was printed over five lines)",
        ExperimentSpecError,
        ("experiment.yaml, line 3, column 1", "not valid YAML", "'\\t'"),
        _yaml_with_tab,
        cli=True,
    ),
    B(
        "task-file-not-utf8",
        "datasets",
        "task description file saved as Latin-1 (was a UnicodeDecodeError)",
        TaskError,
        ("task.json", "not UTF-8", "0xe9", "line 1, column 14"),
        _task_file_latin1,
    ),
    B(
        "csv-duplicate-column",
        "datasets",
        "CSV header 'text,text,label' (pandas silently renamed the second column 'text.1')",
        TaskError,
        ("train.csv', line 1", "['text']", "more than once"),
        own_file("train.csv", "text,text,label\na,b,pos\nc,d,neg\n"),
    ),
    B(
        "csv-header-only",
        "datasets",
        "CSV file with a header row and no rows (was 'could not be parsed as CSV')",
        TaskError,
        ("train.csv", "has no rows", "at least one example"),
        own_file("train.csv", "text,label\n"),
    ),
    B(
        "jsonl-duplicate-key",
        "datasets",
        "JSON Lines row with the key 'text' twice (was 'An error occurred while generating the dataset')",
        TaskError,
        ("train.jsonl', line 2", "['text']", "more than once"),
        own_file("train.jsonl", '{"text": "a", "label": 1}\n{"text": "b", "text": "c", "label": 0}\n'),
    ),
    B(
        "label-names-numeric",
        "datasets",
        "label_names ['1', ..., '5'] (star ratings) without label_values: a raw '1' was read as id 1, '4' and '5' both "
        "as id 4",
        TaskError,
        ("label_names", "ambiguous", "label_values=['1', '2', '3', '4', '5']"),
        own_file("train.csv", "text,label\na,1\nb,5\n", label_names=["1", "2", "3", "4", "5"]),
    ),
    B(
        "text-blank",
        "datasets",
        "row whose text is whitespace only (was trained on as an empty input)",
        TaskError,
        ("train.jsonl, row 1", "hold no text", "fill them in or drop the row"),
        own_file("train.jsonl", '{"text": "a", "label": 1}\n{"text": "  ", "label": 0}\n'),
    ),
    B(
        "text-is-number",
        "datasets",
        "JSON Lines row whose text is the number 5",
        TaskError,
        ("train.jsonl, row 0", "is 5 (of type int)", "write it as a string"),
        own_file("train.jsonl", '{"text": 5, "label": 1}\n{"text": "b", "label": 0}\n'),
    ),
)
