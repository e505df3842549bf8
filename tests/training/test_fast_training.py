"""The speed switches of TrainingConfig on CPU through train(): torch_compile trains with eager's losses, bf16 runs
the encoder under bfloat16 autocast with float32 weights, and the MT-A loop refuses the switches it lacks.
(Gradient checkpointing: test_gradient_checkpointing.py; the speed itself: benchmarks/training_speed.py.)"""

import json

import pytest
import torch

from adapterfusion.training import TrainingError, train, train_multitask
from adapterfusion.training.callbacks import FusionStepCallback
from adapterfusion.training.hardware import compile_problem
from tolerances import assert_close

SETTINGS = dict(max_steps=3, batch_size=8, max_length=32, learning_rate=3e-3, logging_steps=1, patience=None)
SLICE = {"train": 24, "validation": 8}


def _run(tmp_path, encoder, data, **switches):
    result = train(
        "rte",
        "st-a",
        seed=2,
        encoder=encoder,
        data_dir=data,
        output_dir=tmp_path / "-".join(switches),
        max_examples=SLICE,
        training_config={**SETTINGS, **switches},
    )
    return result, json.loads(result.metrics_path.read_text())


@pytest.mark.slow
def test_torch_compile_trains_with_the_eager_losses(tmp_path, tiny_encoder_dir, demo_data_dir):
    if (problem := compile_problem()) is not None:
        pytest.skip(f"torch.compile does not work on this machine: {problem}")
    import torch._dynamo
    import torch._inductor.config

    _, eager = _run(tmp_path, tiny_encoder_dir, demo_data_dir)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    try:
        with torch._inductor.config.patch(fallback_random=True):  # dropout draws eager's masks, so losses compare
            _, compiled = _run(tmp_path, tiny_encoder_dir, demo_data_dir, torch_compile=True)
        assert torch._dynamo.utils.counters["stats"]["unique_graphs"] > 0  # the model really ran compiled
    finally:
        torch._dynamo.reset()
    assert [e["step"] for e in compiled["train_losses"]] == [1, 2, 3]
    assert_close(
        [e["loss"] for e in compiled["train_losses"]],
        [e["loss"] for e in eager["train_losses"]],
        dtype=torch.float32,
        label="training losses",
    )
    assert_close(compiled["best"]["loss"], eager["best"]["loss"], dtype=torch.float32, label="dev loss")


def test_bf16_trains_on_cpu_under_autocast_with_float32_weights(tmp_path, tiny_encoder_dir, demo_data_dir, monkeypatch):
    seen = []

    def on_train_begin(self, args, state, control, **kwargs):  # records the dtype the encoder's matmuls run in
        layer = self.model.model.encoder.layer[0].intermediate.dense
        self.handle = layer.register_forward_hook(lambda module, inputs, output: seen.append(output.dtype))

    def on_train_end(self, args, state, control, **kwargs):
        self.handle.remove()

    monkeypatch.setattr(FusionStepCallback, "on_train_begin", on_train_begin, raising=False)
    monkeypatch.setattr(FusionStepCallback, "on_train_end", on_train_end, raising=False)
    result, bf16 = _run(tmp_path, tiny_encoder_dir, demo_data_dir, bf16=True)
    assert seen and set(seen) == {torch.bfloat16}
    assert all(torch.isfinite(torch.tensor(e["loss"])) for e in bf16["train_losses"]) and len(bf16["train_losses"]) == 3
    assert {p.dtype for p in result.model.parameters()} == {torch.float32}
    config = json.loads(result.config_path.read_text())
    assert config["training"]["bf16"] is True
    # bf16's speed and rounding depend on the CPU's kernels: the run records which it had.
    assert config["hardware"]["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert config["hardware"]["cpu_native_bf16"] in (True, False, None)


def test_mt_a_refuses_the_switches_its_loop_lacks(tmp_path):
    for switch in ("gradient_checkpointing", "torch_compile"):
        with pytest.raises(TrainingError, match=f"mt-a: .*{switch}"):
            train_multitask(["rte", "sst2"], output_dir=tmp_path, training_config={switch: True})


@pytest.mark.parametrize(("native", "warned"), [(False, True), (True, False)])
def test_bf16_on_a_cpu_without_native_bf16_warns_that_it_is_slow(monkeypatch, native, warned):
    """bf16 on an x86 CPU without AVX512_BF16/AMX ran 20-25x slower than fp32 (benchmarks/README.md): the run is
    allowed, with a warning that names the switch to turn off."""
    import warnings

    from adapterfusion.training import SlowPrecisionWarning, TrainingConfig, hardware

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(hardware.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: native, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hardware.check_precision(TrainingConfig(bf16=True))
        hardware.check_precision(TrainingConfig(bf16=False))
    slow = [w for w in caught if issubclass(w.category, SlowPrecisionWarning)]
    assert len(slow) == int(warned)
    if warned:
        assert "AVX512_BF16" in str(slow[0].message) and "bf16=False" in str(slow[0].message)


def test_mt_a_warns_of_bf16_on_a_cpu_without_native_bf16(monkeypatch, tmp_path):
    """MT-A is not train(): it must warn too, before it opens its run."""
    from adapterfusion.training import SlowPrecisionWarning, hardware, multitask

    class Stop(Exception):
        """Ends the run right after its settings are checked."""

    def stop(*args, **kwargs):
        raise Stop

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(hardware, "cpu_has_native_bf16", lambda: False)
    monkeypatch.setattr(multitask, "resolve_metric", stop)
    with pytest.warns(SlowPrecisionWarning, match="bf16=False"), pytest.raises(Stop):
        train_multitask(["rte", "sst2"], output_dir=tmp_path, training_config={"bf16": True})


def test_native_bf16_is_unknown_off_x86(monkeypatch):
    from adapterfusion.training import hardware

    monkeypatch.setattr(hardware.platform, "machine", lambda: "aarch64")
    assert hardware.cpu_has_native_bf16() is None


@pytest.mark.parametrize(("native", "advised"), [(True, "bf16"), (False, "fp32"), (None, "fp32")])
def test_bf16_is_advised_exactly_where_the_cpu_runs_it_natively(monkeypatch, caplog, native, advised):
    from adapterfusion.training import TrainingConfig, hardware

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(hardware, "cpu_has_native_bf16", lambda: native)
    assert hardware.advised_precision() == advised
    with caplog.at_level("INFO", logger=hardware.__name__):
        hardware.check_precision(TrainingConfig())
    assert ("bf16=True halves" in caplog.text) == (advised == "bf16")


@pytest.mark.parametrize("target", ["tensorboard", "mlflow", "wandb"])
def test_report_to_an_integration_not_installed_is_refused_before_the_data_loads(tmp_path, monkeypatch, target):
    """The Trainer raised its own RuntimeError ('... requires wandb to be installed') once the data was loaded."""
    from transformers import integrations

    monkeypatch.setattr(integrations, f"is_{target}_available", lambda: False)
    for run in (
        lambda: train("rte", "st-a", output_dir=tmp_path / "runs", training_config={"report_to": target}),
        lambda: train_multitask(["rte", "cb"], output_dir=tmp_path / "runs", training_config={"report_to": target}),
    ):
        with pytest.raises(TrainingError, match=f"report_to='{target}', but {target} is not installed.*pip install"):
            run()
    assert not (tmp_path / "runs").exists()
