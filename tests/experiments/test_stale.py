"""A done job runs again when an input its run recorded changed on disk though its settings did not: a local data file
edited since, or other weights saved at its encoder's path (they used to stay "already done" with results of the old
inputs), with the done jobs that need it; the summary says why. An interrupted one starts over instead of resuming.
What a run did not record (an older version's run, a Hub encoder) and what is gone count as unchanged, and each file
is read once per process however many jobs recorded it."""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from pathlib import Path

import pytest
import torch
import transformers

from adapterfusion.encoder_identity import encoder_files
from adapterfusion.encoder_loading import Encoder
from adapterfusion.experiments import ResultsStore, load_spec, plan_jobs, run_experiment
from adapterfusion.experiments.spec import ExperimentSpec
from adapterfusion.file_digests import files_sha256
from adapterfusion.training.tokenizer_files import tokenizer_files
from task_data import read_rows, write_jsonl
from tiny_experiments import DoneExecutor, tiny_experiment

EXPERIMENT = {
    "name": "tiny",
    "tasks": ["rte", "cb"],
    "setups": ["st-a", "fusion-st-a"],
    "seeds": [1],
    "encoder": "some/hub-id",
    "training": {"max_steps": 1},
}
ADAPTER, FUSIONS = "st-a-rf16/rte/seed-1", ["fusion-st-a/rte/seed-1", "fusion-st-a/cb/seed-1"]


class ResumeRecordingExecutor(DoneExecutor):
    """DoneExecutor that remembers whether each job was told to resume from its checkpoints."""

    def __init__(self) -> None:
        self.resumed: dict[str, bool] = {}

    def submit(self, payload):
        self.resumed[payload.job_id] = payload.resume
        return super().submit(payload)


def _done(tmp_path: Path) -> ExperimentSpec:
    spec = load_spec({**EXPERIMENT, "output_dir": str(tmp_path / "out")})
    assert _run(spec).ok
    return spec


def _run(spec: ExperimentSpec, executor=None):
    return run_experiment(spec, executor=executor or DoneExecutor(), progress=False, report=False)


def _record(spec: ExperimentSpec, job_id: str, **inputs) -> None:
    """The job's config.json, holding what its run recorded of its inputs (the runner empties a run dir it re-runs)."""
    job = next(job for job in plan_jobs(spec) if job.id == job_id)
    run_dir = job.run_dir(spec.output_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps({"task": job.task, **inputs}))


def _encoder_folder(path: Path, weights: bytes) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text("{}")
    (path / "model.safetensors").write_bytes(weights)
    return path


def _encoder_record(folder: Path) -> dict | None:
    """What train() records of a local encoder folder's weight files."""
    return encoder_files(Encoder(str(folder), folder=folder))


def test_a_done_job_whose_data_file_was_edited_runs_again_with_the_jobs_that_need_it(tmp_path):
    spec = _done(tmp_path)
    train = write_jsonl(tmp_path / "data" / "train.jsonl", [{"text": "a", "label": 0}])
    _record(spec, ADAPTER, data_files=files_sha256([train]))
    unchanged = _run(spec)
    assert unchanged.ran == [] and unchanged.rerun == {} and len(unchanged.skipped) == 4

    write_jsonl(train, [{"text": "a", "label": 1}])
    summary = _run(spec)
    assert summary.ran == [ADAPTER, *FUSIONS] and summary.skipped == ["st-a-rf16/cb/seed-1"]
    assert summary.rerun == {
        ADAPTER: f"its data file {train} changed since it ran",
        **{fusion: f"it needs {ADAPTER}, which runs again" for fusion in FUSIONS},
    }
    assert f"  re-run  {ADAPTER}: its data file {train} changed since it ran" in str(summary).splitlines()
    assert _run(spec).ran == []  # its run dir was emptied for the re-run: nothing recorded to compare


def test_what_was_not_recorded_or_is_gone_counts_as_unchanged(tmp_path):
    """A run of a version before the digests, a Hub encoder (None), a data file or encoder folder that is gone (the
    output dir copied to another machine), or an encoder folder emptied of its weights."""
    spec = _done(tmp_path)
    train = write_jsonl(tmp_path / "data" / "train.jsonl", [{"text": "a", "label": 0}])
    emptied, gone = _encoder_folder(tmp_path / "emptied", b"weights"), _encoder_folder(tmp_path / "gone", b"weights")
    _record(spec, ADAPTER, data={"location": str(train)})  # an older version's run: no digests
    _record(spec, "st-a-rf16/cb/seed-1", data_files={str(tmp_path / "gone.jsonl"): "0" * 64}, encoder_files=None)
    _record(spec, FUSIONS[0], encoder_files=_encoder_record(emptied))
    _record(spec, FUSIONS[1], encoder_files=_encoder_record(gone))
    write_jsonl(train, [{"text": "b", "label": 1}])  # read by the first job, which recorded no digest of it
    (emptied / "model.safetensors").unlink()
    shutil.rmtree(gone)
    summary = _run(spec)
    assert summary.ran == [] and summary.rerun == {}


def test_a_done_job_whose_encoder_holds_other_weights_runs_again(tmp_path):
    """Other weights saved at the encoder's path; its tokenizer or config files changing is not other weights."""
    spec = _done(tmp_path)
    encoder = _encoder_folder(tmp_path / "encoder", b"first weights")
    for job_id in (ADAPTER, *FUSIONS):
        _record(spec, job_id, encoder_files=_encoder_record(encoder))
    (encoder / "tokenizer.json").write_text("{}")
    assert _run(spec).ran == []
    (encoder / "model.safetensors").write_bytes(b"other weights")
    summary = _run(spec)
    reason = f"other weights were saved at its encoder {encoder} since it ran"
    assert summary.rerun == {ADAPTER: reason, **dict.fromkeys(FUSIONS, reason)}
    assert summary.ran == [ADAPTER, *FUSIONS]


def test_a_done_job_whose_encoder_tokenizer_was_edited_runs_again(tmp_path):
    """An edited vocabulary, an added chat template or a removed special tokens file gives other tokens from the same
    data: the job runs again, as for other weights. A run saved before runs recorded its tokenizer files (none
    recorded: the committed examples/results) stays fresh, and so does one whose encoder folder lost them all."""
    spec = _done(tmp_path)
    encoder = _encoder_folder(tmp_path / "encoder", b"weights")
    for name in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        (encoder / name).write_text(f"{name} as it was\n")
    (encoder / "generation_config.json").write_text("{}")
    recorded = tokenizer_files(Encoder(str(encoder), folder=encoder))
    assert recorded is not None and sorted(recorded["sha256"]) == [
        "special_tokens_map.json",
        "tokenizer_config.json",
        "vocab.txt",
    ]
    _record(spec, ADAPTER, tokenizer_files=recorded)
    _record(spec, FUSIONS[0], encoder_files=_encoder_record(encoder))  # an older run: no tokenizer_files
    (encoder / "generation_config.json").write_text('{"max_length": 5}')  # no tokenizer file
    assert _run(spec).ran == []

    (encoder / "vocab.txt").write_text("vocab.txt edited\n")
    summary = _run(spec)
    reason = f"the tokenizer files of its encoder {encoder} changed since it ran (vocab.txt)"
    assert summary.rerun == {ADAPTER: reason, **{f: f"it needs {ADAPTER}, which runs again" for f in FUSIONS}}

    (encoder / "vocab.txt").write_text("vocab.txt as it was\n")
    _record(spec, ADAPTER, tokenizer_files=recorded)
    (encoder / "special_tokens_map.json").unlink()
    (encoder / "additional_chat_templates").mkdir()
    (encoder / "additional_chat_templates" / "tools.jinja").write_text("{{ messages }}")
    assert _run(spec).rerun[ADAPTER] == (
        f"the tokenizer files of its encoder {encoder} changed since it ran "
        "(additional_chat_templates/tools.jinja, special_tokens_map.json)"
    )
    _record(spec, ADAPTER, tokenizer_files=recorded)
    for path in [*encoder.glob("*.json"), encoder / "vocab.txt"]:
        path.unlink()
    shutil.rmtree(encoder / "additional_chat_templates")
    assert _run(spec).ran == []  # no tokenizer file left: gone, not judged


def _interrupted(spec: ExperimentSpec, job_id: str) -> None:
    """As a runner killed while the job trained leaves it."""
    with ResultsStore(spec.output_dir) as store, store._writing():
        store._db.execute("UPDATE jobs SET state = 'running', metrics = NULL WHERE id = ?", (job_id,))


def test_an_interrupted_job_whose_data_changed_starts_over_instead_of_resuming(tmp_path):
    spec = _done(tmp_path)
    train = write_jsonl(tmp_path / "data" / "train.jsonl", [{"text": "a", "label": 0}])
    _record(spec, ADAPTER, data_files=files_sha256([train]))
    _interrupted(spec, ADAPTER)
    executor = ResumeRecordingExecutor()
    assert _run(spec, executor).ran == [ADAPTER] and executor.resumed == {ADAPTER: True}

    _record(spec, ADAPTER, data_files=files_sha256([train]))
    _interrupted(spec, ADAPTER)
    write_jsonl(train, [{"text": "a", "label": 1}])
    executor = ResumeRecordingExecutor()
    summary = _run(spec, executor)
    assert executor.resumed == dict.fromkeys([ADAPTER, *FUSIONS], False) and summary.ran == [ADAPTER, *FUSIONS]
    assert summary.rerun == {
        ADAPTER: f"its data file {train} changed since it ran",
        **{fusion: f"it needs {ADAPTER}, which runs again" for fusion in FUSIONS},
    }


def test_each_recorded_file_is_read_once_for_all_jobs(tmp_path, reads):
    """Four jobs recorded one data file and one encoder: the runner reads each once, and not again on its next start
    in the same process while they are unchanged."""
    spec = _done(tmp_path)
    train = write_jsonl(tmp_path / "data" / "train.jsonl", [{"text": "a", "label": 0}])
    encoder = _encoder_folder(tmp_path / "encoder", b"weights")
    inputs = {"data_files": files_sha256([train]), "encoder_files": _encoder_record(encoder)}
    for job in plan_jobs(spec):
        _record(spec, job.id, **inputs)
    for path in (train, encoder / "model.safetensors"):  # touched since: the same bytes, read again
        os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    reads.clear()
    assert _run(spec).ran == [] and _run(spec).ran == []
    assert Counter(reads) == {str(train): 1, str(encoder / "model.safetensors"): 1}


@pytest.mark.slow
def test_real_runs_record_their_inputs_and_run_again_once_they_change(tmp_path, tiny_encoder_dir, demo_data_dir, reads):
    """train() records the digests of the data files it read and of its encoder's weight files; the runner keeps
    the jobs while they are the same, reading each file once, and re-runs them once the data or the weights change."""
    data, encoder = tmp_path / "data", (tmp_path / "encoder").resolve()
    shutil.copytree(demo_data_dir / "rte", data / "rte")
    shutil.copytree(tiny_encoder_dir, encoder)
    experiment = tiny_experiment(encoder, tmp_path / "out", seeds=[1, 2], tasks=["rte"], setups=["head"])
    experiment["data_dir"] = str(data)
    jobs = ["head/rte/seed-1", "head/rte/seed-2"]
    train, validation = data / "rte" / "train.jsonl.gz", data / "rte" / "validation.jsonl.gz"
    weights = encoder / "model.safetensors"

    first = run_experiment(experiment, progress=False, report=False)
    assert first.ok and first.ran == jobs
    with ResultsStore(tmp_path / "out", readonly=True) as store:
        config = json.loads((Path(store.jobs()[0].run_dir) / "config.json").read_text())
    assert config["data_files"] == files_sha256([train, validation])
    assert config["encoder_files"] == {
        "folder": str(encoder),
        "sha256": {weights.name: files_sha256([weights])[str(weights)]},
    }
    assert config["tokenizer_files"] == tokenizer_files(Encoder(str(encoder), folder=encoder))
    assert "tokenizer_config.json" in config["tokenizer_files"]["sha256"]
    tokenizer = [str(encoder / name) for name in config["tokenizer_files"]["sha256"]]
    read_once = [str(train), str(validation), str(weights), *tokenizer]
    assert Counter(reads) == dict.fromkeys(read_once, 1)  # not once per job
    reads.clear()

    again = run_experiment(experiment, progress=False, report=False)
    assert again.ran == [] and again.rerun == {} and reads == []

    write_jsonl(train, read_rows(train)[1:], gz=True)
    edited = run_experiment(experiment, progress=False, report=False)
    assert edited.ok and edited.ran == jobs
    assert edited.rerun == dict.fromkeys(jobs, f"its data file {train} changed since it ran")

    torch.manual_seed(1)
    transformers.BertModel(transformers.AutoConfig.from_pretrained(encoder)).save_pretrained(encoder)
    replaced = run_experiment(experiment, progress=False, report=False)
    assert replaced.ok and replaced.ran == jobs
    assert replaced.rerun == dict.fromkeys(jobs, f"other weights were saved at its encoder {encoder} since it ran")


def test_status_marks_a_stale_job_and_a_blocked_job_gets_no_reason(tmp_path, capsys):
    """`status` showed a job whose data changed as plainly done; a blocked job whose folder held an older run's
    config got that run's change as its re-run reason (it never ran under these settings)."""
    from adapterfusion.cli import main
    from adapterfusion.experiments.stale import stale_jobs

    spec = _done(tmp_path)
    train = write_jsonl(tmp_path / "data" / "train.jsonl", [{"text": "a", "label": 0}])
    _record(spec, ADAPTER, data_files=files_sha256([train]))
    write_jsonl(train, [{"text": "a", "label": 1}])
    assert main(["status", str(spec.output_dir)]) == 0
    out = capsys.readouterr().out
    assert "stale: its data file" in out and "(1 of them stale" in out  # the note column is cut at 80 characters
    jobs = plan_jobs(spec)
    states = {job.id: "done" for job in jobs} | {ADAPTER: "blocked"}
    assert ADAPTER not in stale_jobs(jobs, states, spec.output_dir)
