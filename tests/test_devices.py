"""Devices, dtypes and the environment: device indices as written, model.to() of a wrapped model, accelerate's
offloading, the launcher's variables, the ADAPTERFUSION_TRITON switch and the cache folder's variables."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers

import adapterfusion as af
from adapterfusion import defaults, devices
from adapterfusion.injection import lane_kernels
from adapterfusion.training import TrainingError
from adapterfusion.training.hardware import is_main_process, launch_variables, launched_distributed
from adapterfusion.training.run import git_sha
from tiny_models import tiny_encoder, tiny_inputs


def _one_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)


@pytest.mark.parametrize("written", ["cuda:256", "cuda:999", "cuda:1"])
def test_a_gpu_index_is_checked_as_written_not_as_torch_wraps_it(monkeypatch, written):
    _one_gpu(monkeypatch)  # torch keeps an index in 8 bits: 'cuda:256' is cuda:0 to it
    with pytest.raises(af.ConfigError, match=f"device '{written}': this machine has 1 CUDA GPU"):
        devices.available_device(written, "fix")
    assert devices.available_device("cuda:0", "fix") == torch.device("cuda:0")


def test_model_to_takes_what_torch_takes_and_returns_the_model():
    model = af.wrap(tiny_encoder())
    model.add_adapter("a")
    model.activate(adapter="a")
    assert model.to(torch.float64) is model and model.dtype == torch.float64
    assert model.to("cpu", dtype=torch.float32, non_blocking=True) is model
    assert model.to(torch.zeros(1, dtype=torch.bfloat16)).dtype == torch.bfloat16
    assert model(**tiny_inputs()).last_hidden_state.dtype == torch.bfloat16
    assert model.to("meta").device.type == "meta"  # shapes only, on purpose


@pytest.mark.parametrize(
    "args, words",
    [
        ((torch.int64,), "not torch.int64"),
        ((torch.complex64,), "not torch.complex64"),
        (("float16",), "Invalid device string"),
        ((torch.device("cuda", 3),), "device 'cuda:3'"),
    ],
)
def test_model_to_refuses_what_a_forward_cannot_run_on_before_moving(monkeypatch, args, words):
    _one_gpu(monkeypatch)
    model = af.wrap(tiny_encoder())
    with pytest.raises(af.ConfigError, match=words):
        model.to(*args)
    assert model.dtype == torch.float32 and model.device.type == "cpu"


def test_model_cuda_checks_the_gpu(monkeypatch):
    _one_gpu(monkeypatch)
    with pytest.raises(af.ConfigError, match="device 'cuda:2': this machine has 1 CUDA GPU"):
        af.wrap(tiny_encoder()).cuda(2)


def test_a_device_map_that_offloads_nothing_wraps_and_runs_as_the_plain_model(tmp_path):
    tiny_encoder().save_pretrained(tmp_path / "encoder")
    placed = af.wrap(transformers.AutoModel.from_pretrained(tmp_path / "encoder", device_map={"": "cpu"}))
    plain = af.wrap(transformers.AutoModel.from_pretrained(tmp_path / "encoder"))
    for model in (placed, plain):
        torch.manual_seed(0)
        model.add_adapter("a")
        model.activate(adapter="a")
    assert devices.offloaded_modules(placed.model) == []
    torch.testing.assert_close(placed(**tiny_inputs()).last_hidden_state, plain(**tiny_inputs()).last_hidden_state)


def test_launch_variables_are_numbers(monkeypatch):
    for variable in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(variable, raising=False)
    assert not launched_distributed() and is_main_process()
    monkeypatch.setenv("WORLD_SIZE", " 2 ")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "-1")  # accelerate's "not launched"
    assert launched_distributed() and not is_main_process()
    assert launch_variables() == {"WORLD_SIZE": 2, "RANK": 1, "LOCAL_RANK": -1}
    for variable, value in (("WORLD_SIZE", "0"), ("RANK", "-1"), ("LOCAL_RANK", "-2"), ("LOCAL_WORLD_SIZE", "1.0")):
        monkeypatch.setenv(variable, value)
        with pytest.raises(TrainingError, match=f"{variable}='{value}' is not a whole number"):
            launch_variables()
        monkeypatch.delenv(variable)


@pytest.mark.parametrize("value, on", [("", True), ("1", True), (" Yes", True), ("0", False), ("OFF", False)])
def test_the_triton_switch_reads_the_usual_words(monkeypatch, value, on):
    monkeypatch.setenv(lane_kernels.TRITON_ENV, value)
    assert lane_kernels.kernels_enabled() is on


def test_a_relative_xdg_cache_home_is_ignored(monkeypatch, tmp_path: Path):
    monkeypatch.delenv(defaults.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    assert defaults.cache_dir() == Path.home() / ".cache" / "adapterfusion"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert defaults.cache_dir() == tmp_path / "adapterfusion"
    monkeypatch.setenv(defaults.CACHE_ENV, "~/af-cache")
    assert defaults.cache_dir() == Path.home() / "af-cache"


@pytest.mark.parametrize("value, recorded", [("  abc123 \n", "abc123"), ("  \n", None)])
def test_a_git_sha_from_the_environment_is_stripped_and_a_blank_one_unset(value, recorded, monkeypatch):
    """A blank ADAPTERFUSION_GIT_SHA was recorded as the run's commit; it now falls back to git."""
    monkeypatch.setenv("ADAPTERFUSION_GIT_SHA", value)
    if recorded is None:
        monkeypatch.delenv("ADAPTERFUSION_GIT_SHA")
        recorded = git_sha()
        monkeypatch.setenv("ADAPTERFUSION_GIT_SHA", value)
    assert git_sha() == recorded
