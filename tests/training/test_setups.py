"""Every setup trains for a few steps, writes its run files, and changes only what it should."""

import json
import re

import pytest
import torch

from adapterfusion.evaluation import evaluate_run
from adapterfusion.model import wrap
from adapterfusion.tasks import get_task
from adapterfusion.training import TrainingError, train
from adapterfusion.training.setups import (
    LAYERNORM_ONLY,
    SetupContext,
    check_bottleneck,
    check_layer_norms,
    get_setup,
    missing_layer_norms,
)
from tiny_decoders import tiny_decoder
from training_helpers import encoder_state, fresh_model

FAST = dict(max_steps=4, batch_size=16, max_length=64, learning_rate=1e-2, logging_steps=1, patience=None)
SLICE = {"train": 64, "validation": 32}


def _run(tmp_path, encoder, data_dir, setup, task="rte", options=None, **overrides):
    return train(
        task,
        setup,
        seed=3,
        encoder=encoder,
        data_dir=data_dir,
        output_dir=tmp_path / "runs",
        training_config={**FAST, **overrides},
        setup_options=options,
        max_examples=SLICE,
    )


def _changed(before, after):
    return {n for n in before if not torch.equal(before[n], after[n])}


@pytest.mark.slow
@pytest.mark.parametrize(
    "setup, options",
    [
        ("head", None),
        ("full", None),
        ("st-a", {"reduction_factor": 2}),
        ("st-a-houlsby", None),
        ("top-k", {"k": 1}),
        ("layernorm-only", None),
    ],
)
def test_setup_trains_only_its_parameters(tmp_path, tiny_encoder_dir, demo_data_dir, setup, options):
    before = encoder_state(fresh_model(tiny_encoder_dir))
    result = _run(tmp_path, tiny_encoder_dir, demo_data_dir, setup, options=options)

    config = json.loads((result.run_dir / "config.json").read_text())
    metrics = json.loads((result.run_dir / "metrics.json").read_text())
    assert (config["setup"], config["task"], config["seed"], config["training"]["max_steps"]) == (setup, "rte", 3, 4)
    assert config["data"]["splits"]["train"]["num_rows"] == 64
    assert "accuracy" in metrics["best"] and metrics["epochs"] and metrics["train_seconds"] > 0
    assert 0 < metrics["parameters"]["trainable"] < metrics["parameters"]["total"] or setup == "full"
    assert (result.run_dir / "head" / "head.safetensors").is_file()
    assert not (result.run_dir / "checkpoints").exists()

    changed = _changed(before, encoder_state(result.model))
    model = result.model
    if setup in ("head", "st-a", "st-a-houlsby"):
        assert changed == set()
    elif setup == "full":
        assert len(changed) > len(before) // 2
    elif setup == "top-k":
        assert changed and all(".layer.1." in n for n in changed)
    elif setup == "layernorm-only":
        norms = {n for n, m in model.model.named_modules() if isinstance(m, torch.nn.LayerNorm)}
        assert changed and all(n.rsplit(".", 1)[0] in norms for n in changed)
    if setup.startswith("st-a"):
        assert (result.run_dir / "adapter" / "adapter.safetensors").is_file()
        assert model.adapter_configs["rte"].reduction_factor == (2.0 if options else 16.0)
    if setup in ("full", "top-k", "layernorm-only"):  # the saved encoder is the trained one
        reloaded = fresh_model(result.run_dir / "encoder")
        assert _changed(encoder_state(model), encoder_state(reloaded)) == set()


@pytest.mark.slow
def test_loss_falls_on_a_learnable_slice(tmp_path, tiny_encoder_dir, demo_data_dir):
    result = _run(
        tmp_path,
        tiny_encoder_dir,
        demo_data_dir,
        "full",
        task="sst2",
        max_steps=40,
        learning_rate=5e-3,
        warmup_ratio=0.0,
    )
    losses = [entry["loss"] for entry in json.loads(result.metrics_path.read_text())["train_losses"]]
    assert sum(losses[-4:]) / 4 < 0.8 * sum(losses[:4]) / 4, losses


def test_early_stopping_stops_when_the_metric_cannot_improve(tmp_path, tiny_encoder_dir, demo_data_dir):
    result = _run(
        tmp_path,
        tiny_encoder_dir,
        demo_data_dir,
        "head",
        learning_rate=1e-30,  # > 0 (0 is refused) but too small to change a float32 weight
        max_steps=None,
        epochs=10,
        batch_size=32,
        patience=1,
    )
    metrics = json.loads(result.metrics_path.read_text())
    assert metrics["stopped_early"] and metrics["global_step"] == 4  # 2 steps per epoch, stopped after epoch 2
    assert len(metrics["epochs"]) == 2


def test_multiple_choice_task_trains(tmp_path, tiny_encoder_dir, data_dir):
    result = _run(tmp_path, tiny_encoder_dir, data_dir, "st-a", task="commonsense_qa", max_steps=2)
    assert result.model.heads["commonsense_qa"].config.kind == "multiple_choice"
    # The accuracy the run recorded is what its saved model scores on the same 32 dev questions, re-scored from the
    # run folder by evaluate_run (rebuilt model, plain predict loop), not by the Trainer's evaluation that recorded it.
    rescored = evaluate_run(result.run_dir, data_dir=data_dir)
    assert rescored["examples"] == SLICE["validation"]
    assert rescored["metrics"]["accuracy"] == pytest.approx(result.metrics["accuracy"], abs=1e-9)
    share = result.metrics["accuracy"] * SLICE["validation"]
    assert share == pytest.approx(round(share), abs=1e-9)


def test_unknown_setup_and_option_are_refused(tmp_path, tiny_encoder_dir, demo_data_dir):
    with pytest.raises(TrainingError, match="Known setups"):
        _run(tmp_path, tiny_encoder_dir, demo_data_dir, "lora")
    with pytest.raises(TrainingError, match="reduction_factor"):
        _run(tmp_path, tiny_encoder_dir, demo_data_dir, "st-a", options={"rf": 2})


@pytest.mark.parametrize(
    "setup, options, message",
    [
        ("st-a", {"reduction_factor": 0}, "reduction_factor=0 must be a positive number"),
        ("st-a-houlsby", {"reduction_factor": float("nan")}, "reduction_factor=nan must be a positive number"),
        ("st-a", {"init_std": -1.0}, "init_std=-1.0 must be a positive number"),
        ("st-a", {"init_std": 10**400}, r"init_std=1000.*\.\.\.00 must be a positive number"),  # was OverflowError
    ],
)
def test_adapter_options_are_refused_before_the_encoder_or_data_load(tmp_path, monkeypatch, setup, options, message):
    """They were refused only when the adapter was added, after the encoder and the task data had loaded."""

    def never(*args, **kwargs):
        raise AssertionError("the task data was loaded")

    monkeypatch.setattr("adapterfusion.training.api.load_task_data", never)
    with pytest.raises(TrainingError, match=message):
        train("rte", setup, output_dir=tmp_path / "runs", setup_options=options)
    assert not (tmp_path / "runs").exists()


def test_layernorm_only_names_the_rmsnorms_of_a_llama_style_model_and_checks_a_config_it_can_read():
    """A model without torch.nn.LayerNorm is refused with the same message when a run prepares it and when an
    experiment file is read (check_layer_norms, from the config alone); a config that cannot be read without the
    network is left to the run."""
    model = wrap(tiny_decoder("llama"))
    context = SetupContext(get_task("rte"), get_setup(LAYERNORM_ONLY).resolve_options({}), 1, "tiny-llama")
    with pytest.raises(TrainingError, match=r"LlamaForCausalLM has no torch.nn.LayerNorm.*LlamaRMSNorm") as refused:
        get_setup(LAYERNORM_ONLY).prepare(model, context)
    assert refused.value.args[0] == missing_layer_norms(model.model)
    assert missing_layer_norms(tiny_decoder("gpt2")) is None
    check_layer_norms("some-org/an-encoder-not-in-the-cache")


@pytest.mark.parametrize("k", [0, 2.0, "1", True])
def test_top_k_k_that_no_encoder_takes_is_refused_before_the_data_loads(tmp_path, k):
    """k=0 was refused only once the encoder and the task's data had loaded (minutes for MNLI)."""
    with pytest.raises(TrainingError, match=f"top-k: k={re.escape(repr(k))} must be an integer >= 1"):
        train("rte", "top-k", output_dir=tmp_path / "runs", data_dir=tmp_path / "no-data", setup_options={"k": k})


def test_encoder_a_setup_cannot_train_is_refused_before_the_data_loads(tmp_path, tiny_encoder_dir):
    """top-k with k above the layer count, and layernorm-only on a model with RMSNorms only, were refused once the
    encoder and the task's data had loaded; the encoder's config says it before either."""
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_encoder_dir)
    tiny_decoder("llama", vocab_size=tokenizer.vocab_size).save_pretrained(tmp_path / "llama")
    tokenizer.save_pretrained(tmp_path / "llama")
    common = dict(output_dir=tmp_path / "runs", data_dir=tmp_path)  # a data folder without the task's files
    with pytest.raises(TrainingError, match=r"top-k: k=3 must be an integer in 1\.\.2 \(the layer count of encoder"):
        train("rte", "top-k", encoder=tiny_encoder_dir, setup_options={"k": 3}, **common)
    with pytest.raises(TrainingError, match="layernorm-only: LlamaModel has no torch.nn.LayerNorm"):
        train("rte", "layernorm-only", encoder=tmp_path / "llama", **common)
    assert not (tmp_path / "runs").exists()


def test_a_reduction_factor_without_a_bottleneck_is_refused_before_any_run_folder(tmp_path, tiny_encoder_dir):
    """st-a's reduction factor against the encoder's hidden size (and MT-A's), from its config before the data
    loads: it had been refused as the adapter was added, leaving the run's empty folders. An encoder whose config
    cannot be read here is left to the run."""
    with pytest.raises(TrainingError, match=r"leaves no bottleneck for hidden size 32.*at most 32 \(encoder"):
        train(
            "rte",
            "st-a",
            encoder=tiny_encoder_dir,
            output_dir=tmp_path / "runs",
            setup_options={"reduction_factor": 64},
        )
    with pytest.raises(TrainingError, match="more than .* times the hidden size"):
        check_bottleneck(1e-9, tiny_encoder_dir)
    assert not (tmp_path / "runs").exists()
    check_bottleneck(16, tiny_encoder_dir)
    check_bottleneck(10**6, tmp_path / "no-such-encoder")  # unreadable here: the loaded model refuses it
