"""Run folders back in memory: rebuild_run + evaluate_run reproduce every setup's metrics.json on the validation
split, prune_fusion works on a fusion run (and refuses anything else), its saved piece loads back, and the
`evaluate` / `prune` commands print and write what the API returns. Tiny random BERT, slices of the demo data."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

import adapterfusion as af
from adapterfusion.cli import main
from adapterfusion.demo import demo_data_dir
from adapterfusion.errors import ConfigError
from adapterfusion.evaluation import evaluate_run, load_run_split, predict, run_batches
from adapterfusion.experiments import run_experiment
from adapterfusion.pruning import PRUNING_FILE, prune_fusion
from adapterfusion.serialization.pieces import WEIGHTS_DIGEST
from adapterfusion.tasks import get_task, list_tasks
from adapterfusion.tasks import registry as task_registry
from adapterfusion.training import AdapterStore, TrainingError, train
from adapterfusion.training.rebuild import rebuild_run
from tolerances import assert_close
from training_helpers import fresh_model

FAST = dict(max_steps=3, batch_size=16, max_length=64, learning_rate=1e-2, logging_steps=1, patience=None)
SLICE = {"train": 48, "validation": 40}  # 40 dev rows at batch 16: the last batch is a short one
SETUPS = ("head", "full", "top-k", "st-a", "st-a-houlsby")  # layernorm-only reloads encoder/ as full and top-k do


# Every test here uses the module fixture `runs`, which trains one run per setup (~17 s on 2 cores).
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_encoder_dir):
    """setup -> run folder: every single-task setup on RTE, and RTE's fusion over CB and SST-2 adapters."""
    root = tmp_path_factory.mktemp("runs")
    store = AdapterStore(root / "store")
    common = dict(
        seed=1,
        encoder=tiny_encoder_dir,
        data_dir=demo_data_dir(),
        output_dir=root / "out",
        training_config=FAST,
        max_examples=SLICE,
    )
    for task in ("cb", "sst2"):
        train(task, "st-a", store=store, **common)
    folders = {setup: train("rte", setup, store=store, **common).run_dir for setup in SETUPS}
    folders["fusion-st-a"] = train(
        "rte", "fusion-st-a", store=store, setup_options={"sources": ["cb", "sst2"]}, **common
    ).run_dir
    return folders


@pytest.mark.parametrize("setup", [*SETUPS, "fusion-st-a"])
def test_evaluate_run_reproduces_the_runs_dev_metrics(runs, setup):
    recorded = json.loads((runs[setup] / "metrics.json").read_text())["best"]
    result = evaluate_run(runs[setup])
    assert (result["task"], result["setup"], result["seed"], result["split"]) == ("rte", setup, 1, "validation")
    assert result["examples"] == SLICE["validation"] and result["batch_size"] == FAST["batch_size"]
    assert result["metrics"]["accuracy"] == recorded["accuracy"]
    assert_close(result["metrics"]["loss"], recorded["loss"], dtype=torch.float32)
    assert result["metrics"]["top_prediction_share"] == recorded["top_prediction_share"]
    assert result["recorded"] == {key: recorded[key] for key in ("accuracy", "loss", "top_prediction_share")}


def test_rebuilt_run_has_the_runs_activation(runs):
    fusion = rebuild_run(runs["fusion-st-a"], device="cpu")
    assert (fusion.fusion, fusion.head, fusion.adapter) == ("fusion_rte", "rte", None)
    assert fusion.model.fusion_setup("fusion_rte").adapters == ("cb", "sst2", "rte")
    assert fusion.model.active_fusion == "fusion_rte" and not fusion.model.training
    adapter = rebuild_run(runs["st-a"], device="cpu")
    assert (adapter.adapter, adapter.fusion, adapter.model.active_adapter) == ("rte", None, "rte")


def test_evaluate_other_splits_and_subsets(runs):
    result = evaluate_run(runs["st-a"], split="train", max_examples=20, batch_size=7)
    assert (result["split"], result["examples"], result["batch_size"]) == ("train", 20, 7) and "recorded" not in result
    with pytest.raises(af.ConfigError, match="no labelled 'test' split"):
        evaluate_run(runs["st-a"], split="test")
    with pytest.raises(af.ConfigError, match="split='dev' is not a split role"):
        evaluate_run(runs["st-a"], split="dev")


def test_another_tasks_split_is_read_as_the_run_reads_its_own(runs):
    """load_run_split(task=...): CB's dev set from the RTE run's data folder, tokenised as the run's model reads its
    input (64 tokens), whole (the run's 40-row subsample was made for RTE), labels in the file's order."""
    run = rebuild_run(runs["st-a"])
    assert len(load_run_split(run)) == SLICE["validation"]
    cb = get_task("cb")
    split = load_run_split(run, task=cb)
    with gzip.open(demo_data_dir() / "cb" / "validation.jsonl.gz", "rt") as rows:
        raw = [json.loads(row) for row in rows]
    assert len(split) == len(raw) == 56
    assert list(split["label"]) == [row["label"] for row in raw]
    first = run.tokenizer(*(raw[0][field] for field in cb.text_fields), truncation=True, max_length=64)
    assert list(split[0]["input_ids"]) == first["input_ids"]


def test_fusion_run_without_a_recorded_store_needs_one(runs, tmp_path):
    old = tmp_path / "old-run"
    shutil.copytree(runs["fusion-st-a"], old)
    config = json.loads((old / "config.json").read_text())
    store = config.pop("store")  # as runs written before the store was recorded
    (old / "config.json").write_text(json.dumps(config))
    with pytest.raises(TrainingError, match="records no adapter store: pass store=.*--store"):
        rebuild_run(old)
    assert evaluate_run(old, store=store)["metrics"] == evaluate_run(runs["fusion-st-a"])["metrics"]


def test_a_run_is_not_scored_on_other_encoder_weights(runs, tmp_path):
    """Other weights saved at the encoder's path after training: evaluate scored the st-a run on them without a
    word (0.5625 against the 0.5312 metrics.json records); a fusion run was already refused."""
    moved = tmp_path / "st-a-run"
    shutil.copytree(runs["st-a"], moved)
    config = json.loads((moved / "config.json").read_text())
    config["encoder_identity"]["weights_sha256"] = "0" * 64  # as if trained on other weights than the folder's now
    (moved / "config.json").write_text(json.dumps(config))
    with pytest.raises(af.IncompatibleModelError, match="was trained on the encoder .* has other weights"):
        evaluate_run(moved)
    del config["encoder_identity"]  # a run written before runs recorded it: scored as before
    (moved / "config.json").write_text(json.dumps(config))
    assert evaluate_run(moved)["metrics"] == evaluate_run(runs["st-a"])["metrics"]


def _piece_sha256(folder) -> str:
    """An independent digest of a saved piece: sha256 over each file's relative name and sha256, sorted by name."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def test_a_fusion_run_records_its_adapters_and_is_refused_once_the_store_replaced_one(
    runs, tmp_path, tiny_encoder_dir, capsys
):
    config = json.loads((runs["fusion-st-a"] / "config.json").read_text())
    store = AdapterStore(config["store"])
    fused = config["fused_adapters"]
    assert sorted(fused) == ["cb", "rte", "sst2"]
    for task, record in fused.items():
        entry = store.path(str(tiny_encoder_dir), task, "st-a", 1)
        assert record == {"entry": str(entry.resolve()), "sha256": _piece_sha256(entry / "adapter")}

    copy = tmp_path / "copy"  # the fusion run and its store, so the module's runs stay as they are
    shutil.copytree(store.root, copy / "store")
    shutil.copytree(runs["fusion-st-a"], copy / "run")
    assert evaluate_run(copy / "run", store=copy / "store")["metrics"] == evaluate_run(runs["fusion-st-a"])["metrics"]
    train(
        "cb",
        "st-a",
        seed=1,
        encoder=tiny_encoder_dir,
        data_dir=demo_data_dir(),
        output_dir=copy / "out",
        store=copy / "store",
        training_config={**FAST, "learning_rate": 5e-3},
        max_examples=SLICE,
        overwrite=True,  # replacing a stored adapter is refused without it
    )
    with pytest.raises(
        TrainingError,
        match=r"adapter\(s\) 'cb' \(.*/cb/st-a/seed-1: sha256 [0-9a-f]{12} when trained, "
        r"[0-9a-f]{12} now\) changed since this fusion was trained",
    ):
        evaluate_run(copy / "run", store=copy / "store")
    capsys.readouterr()
    assert main(["evaluate", str(copy / "run"), "--store", str(copy / "store")]) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1].startswith("error: cannot rebuild") and "'cb'" in err and "Traceback" not in err


def test_unfinished_run_is_refused(runs, tmp_path):
    unfinished = tmp_path / "unfinished"
    shutil.copytree(runs["st-a"], unfinished)
    (unfinished / "metrics.json").unlink()
    with pytest.raises(TrainingError, match=r"unfinished run \(no metrics.json: it crashed or was interrupted\)"):
        evaluate_run(unfinished)
    with pytest.raises(TrainingError, match="no config.json: it is not a run folder"):
        evaluate_run(tmp_path)


def test_prune_fusion_run_and_load_the_saved_piece(runs, tmp_path, tiny_encoder_dir):
    result = prune_fusion(runs["fusion-st-a"], keep=2, repeats=1, output=tmp_path / "pruned", device="cpu")
    recorded = json.loads((runs["fusion-st-a"] / "metrics.json").read_text())["best"]
    assert result.before.metrics["accuracy"] == recorded["accuracy"]
    assert_close(result.before.metrics["loss"], recorded["loss"], dtype=torch.float32)
    assert len(result.kept) == 2 and len(result.dropped) == 1 and result.metric == "accuracy"
    ranked = sorted(result.activation, key=result.activation.get, reverse=True)
    assert set(result.kept) == set(ranked[:2])
    assert result.before.ms_per_batch > 0 and result.after.ms_per_batch > 0
    assert json.loads((tmp_path / "pruned" / PRUNING_FILE).read_text())["kept"] == list(result.kept)
    # The folder an earlier prune of this same run wrote is ours: pruning again replaces it; another run's is not.
    again = prune_fusion(runs["fusion-st-a"], keep=2, repeats=1, output=tmp_path / "pruned", device="cpu")
    assert json.loads((tmp_path / "pruned" / PRUNING_FILE).read_text())["kept"] == list(again.kept)
    with pytest.raises(af.ConfigError, match="is not an earlier prune output of"):
        prune_fusion(runs["st-a"], keep=1, output=tmp_path / "pruned")

    # The saved pruned fusion + head, loaded into a fresh model with the kept adapters, gives the same numbers.
    store = AdapterStore(json.loads((runs["fusion-st-a"] / "config.json").read_text())["store"])
    model = fresh_model(tiny_encoder_dir).eval()
    for task in result.kept:
        store.load_into(model, task, "st-a", 1, encoder=str(tiny_encoder_dir))
    model.activate(
        fusion=model.load_fusion(tmp_path / "pruned" / "fusion"), head=model.load_head(tmp_path / "pruned" / "head")
    )
    run = rebuild_run(runs["fusion-st-a"], device="cpu")
    loaded = predict(model, run_batches(run, load_run_split(run)))
    assert_close(loaded.loss, result.after.metrics["loss"], dtype=torch.float32)
    assert float(np.mean(loaded.logits.argmax(-1) == loaded.labels)) == result.after.metrics["accuracy"]


def test_a_prune_output_is_replaced_whole_or_not_at_all(runs, tmp_path, monkeypatch):
    """fusion/, head/ and pruning.json were written one after another: a prune that failed while saving its head
    left the new fusion beside the old pruning.json. The output is now built beside it and renamed into place."""
    output = tmp_path / "pruned"
    first = prune_fusion(runs["fusion-st-a"], keep=2, repeats=1, timing_batches=1, output=output, device="cpu")
    saved = {p.relative_to(output): p.read_bytes() for p in output.rglob("*") if p.is_file()}

    def failing(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(af.AdaptedModel, "save_head", failing)
    with pytest.raises(OSError, match="No space left"):
        prune_fusion(runs["fusion-st-a"], keep=1, repeats=1, timing_batches=1, output=output, device="cpu")
    assert {p.relative_to(output): p.read_bytes() for p in output.rglob("*") if p.is_file()} == saved
    assert json.loads((output / PRUNING_FILE).read_text())["kept"] == list(first.kept)
    assert sorted(os.listdir(tmp_path)) == ["pruned"]  # no temp folder left
    monkeypatch.undo()
    (output / "notes.txt").write_text("mine")  # the new output replaces the folder: a file of the user's is refused
    with pytest.raises(af.ConfigError, match="also holds 'notes.txt', which prune did not write"):
        prune_fusion(runs["fusion-st-a"], keep=1, output=output)


def test_a_prune_output_inside_a_store_entry_or_a_run_folder_is_refused(runs):
    """Inside a stored adapter's folder it changed that adapter's digest, so the fusion run trained on it turned
    stale and could no longer be evaluated; inside a run folder a re-run would delete it."""
    store = AdapterStore(json.loads((runs["fusion-st-a"] / "config.json").read_text())["store"])
    entry = next(path.parent for path in store.root.rglob("entry.json"))
    with pytest.raises(af.ConfigError, match="is inside an AdapterStore entry"):
        prune_fusion(runs["fusion-st-a"], keep=1, output=entry / "adapter" / "pruned")
    for run in (runs["fusion-st-a"], runs["st-a"]):
        with pytest.raises(af.ConfigError, match="is inside a run folder"):
            prune_fusion(runs["fusion-st-a"], keep=1, output=run / "pruned")
    assert not (entry / "adapter" / "pruned").exists() and not (runs["st-a"] / "pruned").exists()


def test_a_prune_output_may_lie_below_a_projects_own_config_but_not_be_the_current_folder(runs, tmp_path, monkeypatch):
    """Any folder above holding a config.json and a metrics.json counted as a run folder; '.' (accepted as an
    empty folder) failed after the whole evaluation with a raw ValueError from the rename."""
    project = tmp_path / "project"
    (project / "work").mkdir(parents=True)
    (project / "config.json").write_text('{"model_type": "bert"}')  # a project's own files, not a run's
    (project / "metrics.json").write_text("{}")
    result = prune_fusion(runs["fusion-st-a"], keep=1, repeats=1, timing_batches=1, output=project / "work" / "out")
    assert json.loads((project / "work" / "out" / PRUNING_FILE).read_text())["kept"] == list(result.kept)
    monkeypatch.chdir(project / "work")
    for output in (".", str(project)):
        with pytest.raises(af.ConfigError, match="is the current folder or holds it"):
            prune_fusion(runs["fusion-st-a"], keep=1, output=output)


def test_prune_keeps_the_target_adapter_of_a_uniform_fusion(runs, tmp_path):
    """With Q zeroed every score is 0, so all adapters tie exactly; rte, the target's own adapter, is listed last
    in the fusion (cb, sst2, rte) and must still be the one kept."""
    uniform = tmp_path / "uniform-run"
    shutil.copytree(runs["fusion-st-a"], uniform)
    weights_file = uniform / "fusion" / "fusion.safetensors"
    weights = load_file(str(weights_file))
    queries = [key for key in weights if ".query." in key]
    assert queries
    save_file({k: torch.zeros_like(v) if k in queries else v for k, v in weights.items()}, str(weights_file))
    config_file = weights_file.with_name("fusion_config.json")  # the config records its weights' digest
    config = json.loads(config_file.read_text())
    config[WEIGHTS_DIGEST] = hashlib.sha256(weights_file.read_bytes()).hexdigest()
    config_file.write_text(json.dumps(config))
    result = prune_fusion(uniform, keep=1, repeats=1, device="cpu")
    assert result.before.adapters == ("cb", "sst2", "rte") and len(set(result.activation.values())) == 1
    assert result.kept == ("rte",) and result.target_adapter == "rte"


def test_prune_refuses_bad_criteria_and_non_fusion_runs(runs):
    with pytest.raises(af.ConfigError, match="keep=4: the fusion has 3 adapters"):
        prune_fusion(runs["fusion-st-a"], keep=4)
    with pytest.raises(af.ConfigError, match=r"mass=1.2 must lie in \(0, 1\]"):
        prune_fusion(runs["fusion-st-a"], mass=1.2)
    with pytest.raises(af.ConfigError, match="prune needs a fusion run .* is a 'st-a' run of task 'rte'"):
        prune_fusion(runs["st-a"], keep=1)
    with pytest.raises(af.ConfigError, match="is the run folder itself"):
        prune_fusion(runs["fusion-st-a"], keep=1, output=runs["fusion-st-a"])


def test_cli_evaluate_and_prune(runs, tmp_path, capsys):
    out = tmp_path / "eval.json"
    assert main(["evaluate", str(runs["fusion-st-a"]), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "rte / fusion-st-a / seed 1: validation split, 40 examples" in printed
    assert "metrics.json (best dev)" in printed and "accuracy" in printed
    written = json.loads(out.read_text())
    assert written["metrics"]["accuracy"] == written["recorded"]["accuracy"] and written["examples"] == 40

    assert main(["prune", str(runs["fusion-st-a"]), "--mass", "1.0", "--repeats", "1"]) == 0
    printed = capsys.readouterr().out
    assert "mean fusion activation per adapter" in printed and "(mass=1.0)" in printed
    rows = {line.split()[0]: line.split() for line in printed.splitlines() if line.startswith(("before", "after"))}
    assert rows["before"][1] == "3" and rows["after"][1] == "3" and rows["before"][2] == rows["after"][2]

    assert main(["prune", str(runs["head"]), "--keep", "1"]) == 2
    assert "prune needs a fusion run" in capsys.readouterr().err
    assert main(["prune", str(runs["fusion-st-a"]), "--mass", "0"]) == 2
    assert "mass=0.0 must lie in (0, 1]" in capsys.readouterr().err


def _user_task(folder, name: str, labels: tuple[str, str]) -> str:
    """A task of the user's own: a description and tiny CSV files in which the label word is in the text."""
    (folder / name).mkdir()
    for role, rows, offset in (("train", 24, 0), ("validation", 16, 100)):
        lines = ["text,label", *(f"item {i} is {labels[i % 2]},{labels[i % 2]}" for i in range(offset, offset + rows))]
        (folder / name / f"{role}.csv").write_text("\n".join(lines) + "\n")
    description = {
        "name": name,
        "kind": "single",
        "text_fields": ["text"],
        "label_names": list(labels),
        "data_files": {"train": "train.csv", "validation": "validation.csv"},
    }
    (folder / name / "task.json").write_text(json.dumps(description))
    return f"{name}/task.json"


def test_a_fusion_of_task_files_tasks_trains_in_workers_then_evaluates_and_prunes(
    tmp_path, tiny_encoder_dir, monkeypatch, capsys
):
    """Fusion sources given as task_files (tasks of the experiment file, not built-in): the fusion jobs failed in a
    process pool's workers, and `evaluate` / `prune` of the fusion run in any other process than the one that read
    the experiment file ("fusion source: unknown task 'alpha'"). Workers get the experiment's tasks; a rebuild takes
    the adapters its run fused from its config.json, whatever tasks they were trained on."""
    experiment = {
        "name": "own-tasks",
        "encoder": str(tiny_encoder_dir),
        "task_files": [_user_task(tmp_path, "alpha", ("yes", "no")), _user_task(tmp_path, "beta", ("up", "down"))],
        "tasks": ["alpha", "beta"],
        "output_dir": "out",
        "training": FAST,
        "setups": ["st-a", "fusion-st-a"],
    }
    (tmp_path / "own.json").write_text(json.dumps(experiment))
    summary = run_experiment(tmp_path / "own.json", executor="process", workers=1, progress=False, report=False)
    assert summary.ok and len(summary.ran) == 4, summary
    for name in ("alpha", "beta"):  # a new process knows only the built-in tasks
        monkeypatch.delitem(task_registry._REGISTRY, name)
    assert "alpha" not in list_tasks()

    run = tmp_path / "out" / "runs" / "fusion-st-a" / "alpha" / "fusion-st-a" / "seed-42"
    recorded = json.loads((run / "metrics.json").read_text())["best"]
    assert evaluate_run(run)["metrics"]["accuracy"] == pytest.approx(recorded["accuracy"])
    capsys.readouterr()
    assert main(["evaluate", str(run)]) == 0
    assert "alpha / fusion-st-a / seed 42: validation split, 16 examples" in capsys.readouterr().out
    assert main(["prune", str(run), "--keep", "1", "--output", str(tmp_path / "pruned")]) == 0
    assert "kept 1 of 2 adapters" in capsys.readouterr().out
    assert json.loads((tmp_path / "pruned" / PRUNING_FILE).read_text())["before"]["adapters"] == ["alpha", "beta"]


def test_a_run_is_not_scored_on_its_data_files_once_they_changed(runs, tmp_path):
    """evaluate scored a run on its validation file after the file was edited, without a word (other numbers than
    metrics.json, exit 0). Now refused, naming the file; --data-dir scores other data on purpose; a run recorded
    before runs kept the digests is scored as before."""
    moved = tmp_path / "st-a-run"
    shutil.copytree(runs["st-a"], moved)
    config = json.loads((moved / "config.json").read_text())
    recorded = config["data_files"]
    assert recorded and all(os.path.isabs(path) for path in recorded)
    config["data_files"] = dict.fromkeys(recorded, "0" * 64)  # as if the files had held other bytes
    (moved / "config.json").write_text(json.dumps(config))
    with pytest.raises(af.ConfigError, match=r"the run's data file .* changed since it ran .*--data-dir"):
        evaluate_run(moved)
    expected = evaluate_run(runs["st-a"])["metrics"]
    assert evaluate_run(moved, data_dir=demo_data_dir())["metrics"] == expected
    del config["data_files"]
    (moved / "config.json").write_text(json.dumps(config))
    assert evaluate_run(moved)["metrics"] == expected


def test_a_device_nothing_runs_on_is_refused_before_the_run_loads(tmp_path):
    """device='meta' failed with torch's RuntimeError once the model had loaded; now before anything is read."""
    with pytest.raises(ConfigError, match="device 'meta' holds shapes but no values"):
        evaluate_run(tmp_path, device="meta")  # an empty folder: the device is what is refused first
