"""What machine a run runs on: for its provenance, and for the precision checks that depend on the CPU."""

from __future__ import annotations

import os
import platform
from typing import Any

import torch


def hardware_info() -> dict[str, Any]:
    """Where a run ran, for its provenance: the accelerator (or CPU), thread and core counts, library versions."""
    cuda = torch.cuda.is_available()
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
    }


def cpu_has_native_bf16() -> bool | None:
    """Whether this x86 CPU does bfloat16 matmuls natively (AVX512_BF16 or AMX-BF16); None where torch cannot say
    (other architectures, or a torch without these probes)."""
    probes = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    if platform.machine().lower() not in ("x86_64", "amd64") or None in probes:
        return None
    return any(probe() for probe in probes)  # type: ignore[misc]
