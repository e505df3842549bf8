"""The machine a run runs on: which device trains (the one choice every recipe uses), what the run's provenance
records about it, whether it was launched as one of several processes, which of the precision and compile
switches it can honour, and which logging integrations (report_to) it has installed."""

from __future__ import annotations

import functools
import logging
import os
import platform
import warnings
from collections.abc import Iterable
from typing import Any

import torch

from adapterfusion.devices import available_device
from adapterfusion.training.config import TrainingConfig
from adapterfusion.training.errors import SlowPrecisionWarning, TrainingError

logger = logging.getLogger(__name__)


def training_device() -> torch.device:
    """Where a run trains and evaluates: the first CUDA GPU when one is visible, else the CPU. The Trainer's own
    placement agrees (training_arguments asks for the CPU exactly when this says so)."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def check_evaluation_device(device: str | None) -> None:
    """A device asked for a trained run's evaluation (rebuild_run, the span ablations), refused before any model
    loads: one this machine lacks (no CUDA on a CPU-only one), or the meta device, where torch failed only after
    the model had loaded. None: training_device()."""
    if device is not None:
        available_device(device, "pass device='cpu', or leave device unset (cuda when there is one, else cpu)")


def hardware_info() -> dict[str, Any]:
    """Where a run ran, for its provenance: the accelerator (or CPU), thread and core counts, library versions."""
    cuda = training_device().type == "cuda"
    return {
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "cuda": torch.version.cuda if cuda else None,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_native_bf16": cpu_has_native_bf16(),
        "advised_precision": advised_precision(),
    }


def cpu_has_native_bf16() -> bool | None:
    """Whether this x86 CPU does bfloat16 matmuls natively (AVX512_BF16 or AMX-BF16); None where torch cannot say
    (other architectures, or a torch without these probes)."""
    probes = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    if platform.machine().lower() not in ("x86_64", "amd64") or None in probes:
        return None
    return any(probe() for probe in probes)  # type: ignore[misc]


def advised_precision() -> str:
    """'bf16' where bfloat16 matmuls are native (a CUDA GPU that supports them; an x86 CPU with AVX512_BF16 or AMX),
    else 'fp32': half the memory and, there, faster steps, with fp32's exponent range (no loss scaling). What
    README's decoder section advises for decoders, whose activations dominate memory."""
    if training_device().type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    return "bf16" if cpu_has_native_bf16() else "fp32"


def launched_distributed() -> bool:
    """True under `torchrun` / `accelerate launch` with more than one process (they set WORLD_SIZE)."""
    return launch_variables().get("WORLD_SIZE", 1) > 1


def is_main_process() -> bool:
    """False on the non-zero ranks of a distributed launch: they train in step with rank 0 but write no files."""
    return launch_variables().get("RANK", 0) == 0


# what torchrun and accelerate launch set, and what each means; LOCAL_RANK -1 is accelerate's "not launched"
_LAUNCH_VARIABLES = {
    "WORLD_SIZE": (1, "the number of processes"),
    "RANK": (0, "this process's rank"),
    "LOCAL_RANK": (-1, "this process's rank on its machine"),
    "LOCAL_WORLD_SIZE": (1, "the number of processes on this machine"),
}


def launch_variables() -> dict[str, int]:
    """The launcher's variables that are set, as numbers, each checked (those read here, and LOCAL_RANK, which
    accelerate reads as the Trainer starts): a value that is not a whole number (left in the environment by hand,
    a job template not filled in) was a ValueError from int(), here or deep inside accelerate."""
    found = {}
    for variable, (lowest, meaning) in _LAUNCH_VARIABLES.items():
        value = os.environ.get(variable)
        if value is None:
            continue
        try:
            found[variable] = int(value)
        except ValueError:
            found[variable] = lowest - 1
        if found[variable] < lowest:
            raise TrainingError(
                f"the environment variable {variable}={value!r} is not a whole number >= {lowest}: torchrun and "
                f"accelerate launch set it to {meaning}; unset it for a run of one process (unset {variable}), or "
                "start the run with one of those launchers"
            )
    return found


def check_precision(config: TrainingConfig) -> None:
    """fp16 trains in half precision with a loss scaler on CUDA; on a CPU the HF Trainer accepts the flag and the
    run is not what was asked for, so it is refused here (bf16 runs on CPUs). bf16 on an x86 CPU without native
    bf16 runs, but far slower than fp32, so the user is warned."""
    on_cpu = training_device().type == "cpu"
    if config.fp16 and on_cpu:
        raise TrainingError(
            "fp16=True needs a CUDA GPU, and none is visible here (the run would be on the CPU); "
            "use bf16=True (CPUs run bfloat16) or no mixed precision"
        )
    if not (config.bf16 or config.fp16) and advised_precision() == "bf16":
        logger.info("this machine runs bfloat16 natively: bf16=True halves activation memory and speeds up steps")
    if config.bf16 and on_cpu and cpu_has_native_bf16() is False:
        warnings.warn(
            "bf16=True on a CPU without AVX512_BF16 or AMX: its bfloat16 matmuls run on a slow path, measured "
            "20-25x slower than fp32 on a 2-core AVX2 machine (benchmarks/README.md); set bf16=False here",
            SlowPrecisionWarning,
            stacklevel=3,
        )


def check_trainable_precision(parameters: Iterable[torch.nn.Parameter], encoder: str) -> None:
    """Refuse to train float16 parameters, which a model saved in float16 gets (transformers loads a checkpoint in
    its saved dtype, and new adapters and heads take the model's): AdamW's update underflows in float16 (its eps,
    1e-8, is 0 there), so the loss becomes NaN within a few steps, with or without fp16=True, whose loss scaler
    needs float32 weights to unscale into. bfloat16 keeps float32's range and trains."""
    half = [parameter for parameter in parameters if parameter.dtype == torch.float16]
    if not half:
        return
    count = sum(parameter.numel() for parameter in half)
    raise TrainingError(
        f"encoder {encoder!r} holds float16 weights (the dtype it was saved in, which it loads in), so the {count} "
        "parameters this run trains would be float16 too, and AdamW's steps underflow there: the loss becomes NaN "
        "within a few steps. Save the model in float32 (or bfloat16) and train that one: "
        "AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).save_pretrained(folder), with its "
        "tokenizer; fp16=True then trains in mixed precision on a GPU"
    )


def bfloat16_warning(parameters: Iterable[torch.nn.Parameter], encoder: str) -> str | None:
    """Why bfloat16 parameters to train (a model saved in bfloat16 loads so) train less than asked, or None: with 8
    bits of mantissa, an AdamW step smaller than 1/256 of a weight rounds away, so a fusion's value matrices, which
    start at the identity, keep their diagonal at 1 at the fusion learning rate (5e-5), without a word."""
    half = [parameter for parameter in parameters if parameter.dtype == torch.bfloat16]
    if not half:
        return None
    return (
        f"encoder {encoder!r} holds bfloat16 weights (the dtype it was saved in, which it loads in), so the "
        f"{sum(parameter.numel() for parameter in half)} parameters this run trained were bfloat16 too, where an "
        "update smaller than 1/256 of a weight is lost to rounding (a fusion's value matrices keep their diagonal "
        "at 1); for full-precision training save the model in float32 and train with bf16=True (bfloat16 compute, "
        "float32 weights)"
    )


@functools.lru_cache(maxsize=1)
def compile_problem() -> str | None:
    """Why torch.compile cannot work here (None if it can): TorchInductor compiles a two-op function, which on
    CPU needs a working C++ compiler. Checked once per process."""
    try:
        torch.compile(lambda x: torch.relu(x) * 2.0 + 1.0)(torch.ones(8))
    except Exception as err:  # noqa: BLE001 - any compiler failure means the same to the user
        return f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"
    return None


def check_compile(config: TrainingConfig) -> None:
    """torch_compile=True is refused, with the fix, where torch.compile fails (compile_problem)."""
    if config.torch_compile and (problem := compile_problem()) is not None:
        raise TrainingError(
            f"torch_compile=True, but torch.compile fails on this machine ({problem}); on CPU "
            "TorchInductor needs a C++ compiler (e.g. apt-get install g++); or set torch_compile=False"
        )


# report_to target -> (the package to install, transformers' test of it, which the Trainer asks when it starts)
_REPORT_PACKAGES = {
    "tensorboard": ("tensorboard", "is_tensorboard_available"),
    "mlflow": ("mlflow", "is_mlflow_available"),
    "wandb": ("wandb", "is_wandb_available"),
}


def check_report_to(config: TrainingConfig) -> None:
    """A report_to target whose package is not installed is refused before any data loads: the Trainer fails on it
    (a RuntimeError of its own) only once the data is loaded and encoded. 'all' takes what is installed."""
    if config.report_to not in _REPORT_PACKAGES:
        return
    package, test = _REPORT_PACKAGES[config.report_to]
    from transformers import integrations

    if not getattr(integrations, test)():
        raise TrainingError(
            f"report_to={config.report_to!r}, but {package} is not installed here; install it (pip install "
            f"{package}), or set report_to='none' (or 'all': whichever integrations are installed)"
        )
