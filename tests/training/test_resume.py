"""A run killed after an epoch and resumed with `train(..., resume=True)` ends exactly where the uninterrupted run
ends (AdapterHub issue #299: resuming lost the optimizer and scheduler state): the same trained weights, dev
metrics per epoch and training losses, in float64 to the tight tolerance, for an adapter, a fusion and MT-A
(`train_multitask(..., resume=True)`, killed mid-epoch)."""

import json
import re
import shutil

import pytest
import torch
import transformers

from adapterfusion.training import AdapterStore, StartOverWarning, TrainingError, train, train_multitask
from adapterfusion.training.callbacks import FusionStepCallback
from adapterfusion.training.checkpoints import LEGACY_TRAINABLE_FILE, RESUME_FILES, TRAINABLE_FILE, resumable_checkpoint
from task_data import read_rows, write_jsonl
from tolerances import assert_close

STEPS_PER_EPOCH = 4  # 32 training examples in batches of 8
SLICE = {"train": 32, "validation": 16}
SETTINGS = dict(
    epochs=3, batch_size=8, max_length=32, learning_rate=3e-3, logging_steps=1, patience=None, keep_checkpoints=True
)


class Killed(Exception):
    """Stands for the process being killed."""


def _kill_after_saving(step: int, monkeypatch) -> None:
    """Stop the run right after the checkpoint of `step` is on disk, as a kill between two epochs would."""

    def on_save(self, args, state, control, **kwargs):
        if state.global_step == step:
            raise Killed(f"killed after saving step {step}")

    monkeypatch.setattr(FusionStepCallback, "on_save", on_save, raising=False)


def _trained(result) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in result.model.named_parameters() if p.requires_grad}


def _assert_same_run(resumed, uninterrupted) -> None:
    weights, expected = _trained(resumed), _trained(uninterrupted)
    assert weights.keys() == expected.keys() and weights
    for name in expected:
        assert_close(weights[name], expected[name], label=name)
    got, want = (json.loads(r.metrics_path.read_text()) for r in (resumed, uninterrupted))
    assert got["global_step"] == want["global_step"] == 3 * STEPS_PER_EPOCH
    assert [e["step"] for e in got["train_losses"]] == [e["step"] for e in want["train_losses"]]
    assert_close(
        [e["loss"] for e in got["train_losses"]],
        [e["loss"] for e in want["train_losses"]],
        dtype=torch.float64,
        label="training losses",
    )
    for key in ("best", "epochs"):
        assert_close(_untimed(got[key]), _untimed(want[key]), dtype=torch.float64, label=key)


def _untimed(metrics):
    """Metrics without the evaluation's timings (runtime, samples and steps per second), which no two runs share."""
    if isinstance(metrics, list):
        return [_untimed(m) for m in metrics]
    return {k: v for k, v in metrics.items() if "runtime" not in k and "per_second" not in k}


def _interrupted_then_resumed(run, tmp_path, monkeypatch, epochs_before_kill: int = 1):
    with monkeypatch.context() as patch:
        _kill_after_saving(epochs_before_kill * STEPS_PER_EPOCH, patch)
        with pytest.raises(Killed):
            run(tmp_path / "resumed")
    checkpoints = next((tmp_path / "resumed").rglob("checkpoints"))
    checkpoint = resumable_checkpoint(checkpoints)
    assert checkpoint is not None and checkpoint.name == f"checkpoint-{epochs_before_kill * STEPS_PER_EPOCH}"
    assert all((checkpoint / name).is_file() for name in (TRAINABLE_FILE, *RESUME_FILES, "rng_state.pth"))
    assert not (checkpoints.parent / "metrics.json").exists()
    resumed = run(tmp_path / "resumed", resume=True)
    metrics = json.loads(resumed.metrics_path.read_text())
    assert metrics["resumed_from"] == f"checkpoints/{checkpoint.name}"
    return resumed


@pytest.mark.slow
def test_resumed_adapter_training_equals_the_uninterrupted_run(
    tmp_path, tiny_float64_encoder_dir, demo_data_dir, monkeypatch
):
    def run(output_dir, resume=False):
        return train(
            "rte",
            "st-a",
            seed=3,
            encoder=tiny_float64_encoder_dir,
            data_dir=demo_data_dir,
            output_dir=output_dir,
            training_config=SETTINGS,
            max_examples=SLICE,
            resume=resume,
        )

    uninterrupted = run(tmp_path / "uninterrupted")
    assert json.loads(uninterrupted.metrics_path.read_text())["resumed_from"] is None
    _assert_same_run(_interrupted_then_resumed(run, tmp_path, monkeypatch), uninterrupted)


@pytest.mark.slow
def test_resumed_fusion_training_equals_the_uninterrupted_run(
    tmp_path, tiny_float64_encoder_dir, demo_data_dir, monkeypatch
):
    store = AdapterStore(tmp_path / "store")
    for task in ("rte", "sst2"):
        train(
            task,
            "st-a",
            seed=3,
            encoder=tiny_float64_encoder_dir,
            data_dir=demo_data_dir,
            output_dir=tmp_path / "stage1",
            store=store,
            training_config={**SETTINGS, "max_steps": 2},
            max_examples=SLICE,
        )

    def run(output_dir, resume=False):
        return train(
            "rte",
            "fusion-st-a",
            seed=3,
            encoder=tiny_float64_encoder_dir,
            data_dir=demo_data_dir,
            output_dir=output_dir,
            store=store,
            training_config=SETTINGS,
            max_examples=SLICE,
            setup_options={"sources": ["sst2"]},
            resume=resume,
        )

    uninterrupted = run(tmp_path / "uninterrupted")
    _assert_same_run(_interrupted_then_resumed(run, tmp_path, monkeypatch, epochs_before_kill=2), uninterrupted)


def test_resume_without_a_checkpoint_trains_from_the_start(tmp_path, tiny_encoder_dir, demo_data_dir):
    result = train(
        "rte",
        "st-a",
        seed=3,
        encoder=tiny_encoder_dir,
        data_dir=demo_data_dir,
        output_dir=tmp_path,
        training_config={**SETTINGS, "max_steps": 2},
        max_examples=SLICE,
        resume=True,
    )
    metrics = json.loads(result.metrics_path.read_text())
    assert metrics["resumed_from"] is None and metrics["global_step"] == 2


def _st_a_run(output_dir, encoder, data_dir):
    """train() of the RTE ST-A run these tests kill and resume, with SETTINGS changed by the call's keywords."""

    def run(resume=False, overwrite=False, **changes):
        return train(
            "rte",
            "st-a",
            seed=3,
            encoder=encoder,
            data_dir=data_dir,
            output_dir=output_dir,
            training_config={**SETTINGS, **changes},
            max_examples=SLICE,
            resume=resume,
            overwrite=overwrite,
        )

    return run


def _killed_after_the_first_epoch(run, monkeypatch) -> None:
    """`run()` killed right after it saved its first epoch's checkpoint."""
    with monkeypatch.context() as patch:
        _kill_after_saving(STEPS_PER_EPOCH, patch)
        with pytest.raises(Killed):
            run()


def test_resume_refuses_a_checkpoint_of_other_settings(tmp_path, tiny_encoder_dir, demo_data_dir, monkeypatch):
    run = _st_a_run(tmp_path, tiny_encoder_dir, demo_data_dir)
    _killed_after_the_first_epoch(run, monkeypatch)
    with pytest.raises(
        TrainingError,
        match=r"other settings \(training differs: learning_rate was 0.003, now 0.001\).*remove .*checkpoints to start",
    ):
        run(resume=True, learning_rate=1e-3)


def test_a_refused_resume_names_the_setting_and_not_a_tokenizer_edit(
    tmp_path, tiny_encoder_dir, demo_data_dir, monkeypatch
):
    """A shorter max_length also encodes the data otherwise; the refusal names max_length, not "the encoder's
    tokenizer was edited", which sent the user looking for an edit that was never made."""
    run = _st_a_run(tmp_path, tiny_encoder_dir, demo_data_dir)
    _killed_after_the_first_epoch(run, monkeypatch)
    with pytest.raises(TrainingError, match=r"training differs: max_length was \d+, now 16\)") as refused:
        run(resume=True, max_length=16)
    assert "encoded data" not in str(refused.value) and "tokenizer" not in str(refused.value)


def test_overwrite_starts_over_without_the_earlier_runs_checkpoints(
    tmp_path, tiny_encoder_dir, demo_data_dir, monkeypatch
):
    """overwrite=True killed before its first checkpoint, then resume=True: it used to continue from the earlier
    run's checkpoint (other settings) and record the result as the new run's."""
    run = _st_a_run(tmp_path, tiny_encoder_dir, demo_data_dir)
    _killed_after_the_first_epoch(run, monkeypatch)
    checkpoints = tmp_path / "rte" / "st-a" / "seed-3" / "checkpoints"
    assert any(checkpoints.iterdir())

    def killed_in_step(self, args, state, control, **kwargs):
        raise Killed("killed in the first step")

    with monkeypatch.context() as patch:
        patch.setattr(FusionStepCallback, "on_step_end", killed_in_step, raising=False)
        with pytest.raises(Killed):
            run(overwrite=True, learning_rate=1e-4)
    assert not checkpoints.exists() or not any(checkpoints.iterdir())  # the new run's own, none saved yet
    resumed = run(resume=True, learning_rate=1e-4, max_steps=2)
    assert json.loads(resumed.metrics_path.read_text())["resumed_from"] is None


def test_resume_accepts_a_run_saved_before_a_training_setting_existed(
    tmp_path, tiny_encoder_dir, demo_data_dir, monkeypatch
):
    """A run saved by a version without TrainingConfig.fast_dropout resumes when the call turns it off (the
    behaviour of that version), and a call that leaves it on is told which setting to change."""
    run = _st_a_run(tmp_path, tiny_encoder_dir, demo_data_dir)
    with monkeypatch.context() as patch:
        _kill_after_saving(STEPS_PER_EPOCH, patch)
        with pytest.raises(Killed):
            run(fast_dropout=False)
    config_path = tmp_path / "rte" / "st-a" / "seed-3" / "config.json"
    saved = json.loads(config_path.read_text())
    del saved["training"]["fast_dropout"]  # as the older version wrote it
    config_path.write_text(json.dumps(saved))
    with pytest.raises(TrainingError, match=r"training differs: fast_dropout was False, now True"):
        run(resume=True)
    result = run(resume=True, fast_dropout=False)
    assert json.loads(result.metrics_path.read_text())["resumed_from"] == f"checkpoints/checkpoint-{STEPS_PER_EPOCH}"


def test_resume_refuses_a_checkpoint_of_other_encoder_weights(tmp_path, tiny_encoder_dir, demo_data_dir, monkeypatch):
    """Other weights saved at the encoder's path between the kill and the resume: the run went on, mixing epochs
    of two encoders, and recorded only the new digest. A run saved before runs recorded the digest still resumes."""
    run = _st_a_run(tmp_path, tiny_encoder_dir, demo_data_dir)
    _killed_after_the_first_epoch(run, monkeypatch)
    config_path = tmp_path / "rte" / "st-a" / "seed-3" / "config.json"
    saved = json.loads(config_path.read_text())
    digest = saved["encoder_identity"]["weights_sha256"]
    saved["encoder_identity"]["weights_sha256"] = "0" * 64  # as if the run had started on other weights
    config_path.write_text(json.dumps(saved))
    with pytest.raises(
        TrainingError, match=rf"the encoder's weights differ \(sha256 000000000000 then, {digest[:12]} now"
    ):
        run(resume=True)
    del saved["encoder_identity"]  # as a version before the digest wrote it
    config_path.write_text(json.dumps(saved))
    result = run(resume=True)
    assert json.loads(result.metrics_path.read_text())["resumed_from"] == f"checkpoints/checkpoint-{STEPS_PER_EPOCH}"


def test_resume_with_another_base_model_names_both(tmp_path, tiny_encoder_dir, demo_data_dir, monkeypatch) -> None:
    """Resumed with another model folder: refused naming the model the checkpoint was trained on and the one given
    (it said 'encoder_key differs' and that other weights were saved at the encoder's path), checkpoint kept."""
    run = _st_a_run(tmp_path / "runs", tiny_encoder_dir, demo_data_dir)
    _killed_after_the_first_epoch(run, monkeypatch)
    other = tmp_path / "other-bert"
    shutil.copytree(tiny_encoder_dir, other)
    resumed = _st_a_run(tmp_path / "runs", other, demo_data_dir)
    with pytest.raises(TrainingError) as refused:
        resumed(resume=True)
    message = str(refused.value)
    assert f"the encoder was {str(tiny_encoder_dir)!r}, now {str(other)!r}" in message, message
    assert "encoder_key" not in message and "saved at its path" not in message
    assert resumable_checkpoint(tmp_path / "runs" / "rte" / "st-a" / "seed-3" / "checkpoints") is not None


def test_resume_with_another_model_whose_path_ends_alike_names_both(
    tmp_path, tiny_encoder_dir, demo_data_dir, monkeypatch
) -> None:
    """/a/models/bert and /b/models/bert share an encoder_key: resumed with the second (other weights), it was refused
    as if other weights had been saved at the first one's path; now it names both models."""
    first, second = tmp_path / "a" / "models" / "bert", tmp_path / "b" / "models" / "bert"
    shutil.copytree(tiny_encoder_dir, first)
    shutil.copytree(tiny_encoder_dir, second)
    model = transformers.AutoModel.from_pretrained(second)
    with torch.no_grad():
        model.embeddings.word_embeddings.weight.add_(1.0)
    model.save_pretrained(second)
    run = _st_a_run(tmp_path / "runs", first, demo_data_dir)
    _killed_after_the_first_epoch(run, monkeypatch)
    with pytest.raises(TrainingError) as refused:
        _st_a_run(tmp_path / "runs", second, demo_data_dir)(resume=True)
    message = str(refused.value)
    assert f"the encoder was {str(first)!r}, now {str(second)!r}" in message, message
    assert "saved at its path" not in message


def test_resume_refuses_a_checkpoint_of_other_data_files(tmp_path, tiny_encoder_dir, demo_data_dir, monkeypatch):
    """A data file edited between the kill and the resume, with as many rows as before: the run went on training on
    other rows. A run saved before runs recorded the files' digests still resumes."""
    data = tmp_path / "data"
    shutil.copytree(demo_data_dir / "rte", data / "rte")
    run = _st_a_run(tmp_path / "runs", tiny_encoder_dir, data)
    _killed_after_the_first_epoch(run, monkeypatch)
    train_file = data / "rte" / "train.jsonl.gz"
    rows = read_rows(train_file)
    write_jsonl(train_file, [{**rows[0], "sentence1": "an edited premise"}, *rows[1:]], gz=True)
    with pytest.raises(
        TrainingError,
        match=rf"the data files differ: {re.escape(str(train_file))} \(sha256 \w{{12}} then, \w{{12}} now\)",
    ):
        run(resume=True)
    config_path = tmp_path / "runs" / "rte" / "st-a" / "seed-3" / "config.json"
    saved = json.loads(config_path.read_text())
    del saved["data_files"]  # as a version before the digests wrote it
    config_path.write_text(json.dumps(saved))
    result = run(resume=True)
    assert json.loads(result.metrics_path.read_text())["resumed_from"] == f"checkpoints/checkpoint-{STEPS_PER_EPOCH}"


def test_resumable_checkpoint_skips_incomplete_ones(tmp_path, tiny_encoder_dir, demo_data_dir, monkeypatch):
    with monkeypatch.context() as patch:
        _kill_after_saving(2 * STEPS_PER_EPOCH, patch)
        with pytest.raises(Killed):
            train(
                "rte",
                "st-a",
                seed=3,
                encoder=tiny_encoder_dir,
                data_dir=demo_data_dir,
                output_dir=tmp_path,
                training_config={**SETTINGS, "save_total_limit": 2},
                max_examples=SLICE,
            )
    checkpoints = tmp_path / "rte" / "st-a" / "seed-3" / "checkpoints"
    newest, older = checkpoints / f"checkpoint-{2 * STEPS_PER_EPOCH}", checkpoints / f"checkpoint-{STEPS_PER_EPOCH}"
    assert resumable_checkpoint(checkpoints) == newest
    (newest / "trainer_state.json").write_text('{"global_step": ')  # killed while writing its last file
    assert resumable_checkpoint(checkpoints) == older
    (older / "optimizer.pt").unlink()  # killed while rotation removed it
    assert resumable_checkpoint(checkpoints) is None
    assert resumable_checkpoint(tmp_path / "none") is None


@pytest.mark.slow
def test_resumed_run_keeps_the_early_stopping_count(tmp_path, tiny_encoder_dir, demo_data_dir, monkeypatch):
    """At learning rate 1e-30 (0 is refused) no weight moves in float32, so the dev metric never improves and
    patience 2 ends the run after epoch 3 of 4; a run
    resumed after epoch 2 must remember the one evaluation without improvement it has already seen."""

    def run(output_dir, resume=False):
        return train(
            "rte",
            "st-a",
            seed=3,
            encoder=tiny_encoder_dir,
            data_dir=demo_data_dir,
            output_dir=output_dir,
            training_config={**SETTINGS, "epochs": 4, "learning_rate": 1e-30, "patience": 2},
            max_examples=SLICE,
            resume=resume,
        )

    uninterrupted = json.loads(run(tmp_path / "uninterrupted").metrics_path.read_text())
    resumed = json.loads(
        _interrupted_then_resumed(run, tmp_path, monkeypatch, epochs_before_kill=2).metrics_path.read_text()
    )
    assert uninterrupted["stopped_early"] and uninterrupted["global_step"] == 3 * STEPS_PER_EPOCH
    assert resumed["stopped_early"] and resumed["global_step"] == 3 * STEPS_PER_EPOCH


@pytest.mark.slow
def test_cli_resume_flag_continues_the_interrupted_run(tmp_path, tiny_encoder_dir, demo_data_dir, monkeypatch):
    from adapterfusion.cli import main

    argv = [
        "train-adapter",
        "--task",
        "rte",
        "--seed",
        "3",
        "--encoder",
        str(tiny_encoder_dir),
        "--data-dir",
        str(demo_data_dir),
        "--output-dir",
        str(tmp_path / "runs"),
        "--store",
        str(tmp_path / "store"),
        "--max-examples",
        "32",
        "--batch-size",
        "8",
        "--max-length",
        "32",
        "--epochs",
        "2",
    ]
    with monkeypatch.context() as patch:
        _kill_after_saving(STEPS_PER_EPOCH, patch)
        with pytest.raises(Killed):
            main(argv)
    assert main([*argv, "--resume"]) == 0
    metrics = json.loads((tmp_path / "runs" / "rte" / "st-a" / "seed-3" / "metrics.json").read_text())
    assert metrics["resumed_from"] == f"checkpoints/checkpoint-{STEPS_PER_EPOCH}"
    assert metrics["global_step"] == 2 * STEPS_PER_EPOCH


@pytest.mark.slow
def test_a_run_resumed_from_its_last_checkpoint_ends_like_the_uninterrupted_one(
    tmp_path, tiny_encoder_dir, demo_data_dir, monkeypatch
):
    """Killed after the last epoch's checkpoint (while the best model loads or metrics.json is written): the
    resumed run trains no epoch, yet leaves the same files, progress.json included (the runner empties the run dir
    but for its checkpoints before it resumes)."""

    def run(output_dir, resume=False):
        return train(
            "rte",
            "st-a",
            seed=3,
            encoder=tiny_encoder_dir,
            data_dir=demo_data_dir,
            output_dir=output_dir,
            training_config=SETTINGS,
            max_examples=SLICE,
            resume=resume,
        )

    uninterrupted = run(tmp_path / "uninterrupted")
    with monkeypatch.context() as patch:
        _kill_after_saving(3 * STEPS_PER_EPOCH, patch)
        with pytest.raises(Killed):
            run(tmp_path / "resumed")
    run_dir = next((tmp_path / "resumed").rglob("checkpoints")).parent
    (run_dir / "progress.json").unlink()
    resumed = run(tmp_path / "resumed", resume=True)
    files = {p.relative_to(run_dir) for p in run_dir.rglob("*") if "checkpoints" not in p.parts}
    expected_dir = uninterrupted.metrics_path.parent
    assert files == {p.relative_to(expected_dir) for p in expected_dir.rglob("*") if "checkpoints" not in p.parts}
    progress, expected = (
        json.loads((r.metrics_path.parent / "progress.json").read_text()) for r in (resumed, uninterrupted)
    )
    assert {k: v for k, v in progress.items() if k != "updated_at"} == {
        k: v for k, v in expected.items() if k != "updated_at"
    }


@pytest.mark.slow
def test_resumed_mt_a_training_equals_the_uninterrupted_run(
    tmp_path, tiny_float64_encoder_dir, demo_data_dir, monkeypatch
):
    """MT-A runs in the same loop: killed mid-way through its second epoch (step 6 of 12, after the checkpoint of
    step 4), train_multitask(resume=True) continues from that checkpoint and ends with the uninterrupted run's
    encoder, adapters and heads, dev metrics, training losses and task draws, in float64 to the tight tolerance."""
    steps_per_epoch = 4  # 16 + 16 training examples in batches of 8

    def run(output_dir, resume=False):
        return train_multitask(
            ["rte", "cb"],
            seed=3,
            encoder=tiny_float64_encoder_dir,
            data_dir=demo_data_dir,
            output_dir=output_dir,
            training_config=SETTINGS,
            max_examples={"train": 16, "validation": 8},
            reduction_factor=4,
            resume=resume,
        )

    uninterrupted = run(tmp_path / "uninterrupted")

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == steps_per_epoch + 2:
            raise Killed(f"killed in step {state.global_step}")

    with monkeypatch.context() as patch:
        patch.setattr(FusionStepCallback, "on_step_end", on_step_end, raising=False)
        with pytest.raises(Killed):
            run(tmp_path / "resumed")
    checkpoints = tmp_path / "resumed" / "mt-a" / "mt-a" / "seed-3" / "checkpoints"
    assert resumable_checkpoint(checkpoints) == checkpoints / f"checkpoint-{steps_per_epoch}"
    resumed = run(tmp_path / "resumed", resume=True)

    weights, expected = _trained(resumed), _trained(uninterrupted)
    assert weights.keys() == expected.keys() and len(weights) > 10  # encoder, both adapters and both heads
    for name in expected:
        assert_close(weights[name], expected[name], label=name)
    got, want = (json.loads(r.metrics_path.read_text()) for r in (resumed, uninterrupted))
    assert got["resumed_from"] == f"checkpoints/checkpoint-{steps_per_epoch}" and want["resumed_from"] is None
    assert got["global_step"] == want["global_step"] == 3 * steps_per_epoch
    assert got["task_counts"] == want["task_counts"]
    tasks = [[(e["step"], e.pop("task")) for e in r["train_losses"]] for r in (got, want)]
    assert tasks[0] == tasks[1] and len(tasks[0]) == 3 * steps_per_epoch
    for key in ("train_losses", "epochs", "best", "best_mean", "expected_task_counts"):
        assert_close(got[key], want[key], dtype=torch.float64, label=key)
    assert [e["step"] for e in got["epochs"]] == [4, 8, 12]


def test_a_checkpoint_saved_under_the_old_weights_name_still_resumes(
    tmp_path, tiny_encoder_dir, demo_data_dir, monkeypatch
):
    """Checkpoints written before the Trainer saved its trainable weights as model.safetensors named them
    trainable.safetensors; a resume takes such a checkpoint too."""
    run = _st_a_run(tmp_path, tiny_encoder_dir, demo_data_dir)
    _killed_after_the_first_epoch(run, monkeypatch)
    checkpoint = tmp_path / "rte" / "st-a" / "seed-3" / "checkpoints" / f"checkpoint-{STEPS_PER_EPOCH}"
    (checkpoint / TRAINABLE_FILE).rename(checkpoint / LEGACY_TRAINABLE_FILE)
    assert resumable_checkpoint(checkpoint.parent) == checkpoint
    result = run(resume=True)
    assert json.loads(result.metrics_path.read_text())["resumed_from"] == f"checkpoints/{checkpoint.name}"


@pytest.mark.slow
def test_a_resume_may_change_how_the_run_is_logged_and_checkpointed(
    tmp_path, tiny_float64_encoder_dir, demo_data_dir, monkeypatch
):
    """logging_steps, keep_checkpoints and gradient_checkpointing change the log, the files kept and the memory used,
    not the weights: a resume that changes them continues the run (it was refused as 'other settings') and ends with
    the uninterrupted run's weights and metrics."""
    logged_rarely = {"logging_steps": 2, "gradient_checkpointing": False}
    uninterrupted = _st_a_run(tmp_path / "uninterrupted", tiny_float64_encoder_dir, demo_data_dir)(**logged_rarely)
    run = _st_a_run(tmp_path / "resumed", tiny_float64_encoder_dir, demo_data_dir)
    with monkeypatch.context() as patch:
        _kill_after_saving(STEPS_PER_EPOCH, patch)
        with pytest.raises(Killed):
            run(**logged_rarely)
    resumed = run(resume=True, logging_steps=1, gradient_checkpointing=True)
    metrics = json.loads(resumed.metrics_path.read_text())
    assert metrics["resumed_from"] == f"checkpoints/checkpoint-{STEPS_PER_EPOCH}"
    weights, expected = _trained(resumed), _trained(uninterrupted)
    assert weights.keys() == expected.keys() and weights
    for name in expected:
        assert_close(weights[name], expected[name], label=name)
    want = json.loads(uninterrupted.metrics_path.read_text())
    assert_close(_untimed(metrics["best"]), _untimed(want["best"]), dtype=torch.float64, label="best")
    saved = json.loads((resumed.metrics_path.parent / "config.json").read_text())["training"]
    assert saved["logging_steps"] == 1 and saved["gradient_checkpointing"] is True  # what the run ended with


@pytest.mark.slow
def test_a_resume_that_finds_no_complete_checkpoint_says_so_and_removes_them(
    tmp_path, tiny_encoder_dir, demo_data_dir, monkeypatch
):
    """Every checkpoint incomplete or damaged: the run starts over, as before, but no longer silently (a start from
    step 0 looked like a resume), and the checkpoints passed over go: left beside the new run's, a stale one of a
    later step outlived the new ones in the Trainer's rotation."""
    run = _st_a_run(tmp_path, tiny_encoder_dir, demo_data_dir)
    with monkeypatch.context() as patch:
        _kill_after_saving(2 * STEPS_PER_EPOCH, patch)
        with pytest.raises(Killed):
            run(max_steps=3 * STEPS_PER_EPOCH)
    checkpoints = tmp_path / "rte" / "st-a" / "seed-3" / "checkpoints"
    found = sorted(checkpoints.iterdir())
    assert [c.name for c in found] == ["checkpoint-4", "checkpoint-8"]
    (found[1] / "optimizer.pt").unlink()
    (found[0] / "trainer_state.json").write_text("{not json")
    with pytest.warns(StartOverWarning) as said:
        result = run(resume=True, max_steps=2)
    message = str(said[0].message)
    assert "checkpoint-8 lacks optimizer.pt" in message
    assert "checkpoint-4 has an unreadable trainer_state.json" in message
    assert json.loads(result.metrics_path.read_text())["resumed_from"] is None
    # keep_checkpoints: the new run's own stay; the Trainer's rotation kept the stale checkpoint-8 as 'most recent'
    assert sorted(c.name for c in checkpoints.iterdir()) == ["checkpoint-2"]
