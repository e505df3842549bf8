"""Whether this machine has the torch device a user names (`serve --device`, `af.pipeline(device=...)`): checked
before anything loads or moves, with an error that says what the machine has, not torch's assertion from deep
inside `.to()` minutes later."""

from __future__ import annotations

import torch

from adapterfusion.errors import ConfigError


def available_device(device: str | torch.device, fix: str) -> torch.device:
    """`device` as a torch device this machine has; ConfigError naming what it has otherwise, ending with `fix`
    (what to pass instead, e.g. "serve with --device cpu")."""
    try:
        target = torch.device(device)
    except (RuntimeError, TypeError):
        raise ConfigError(f"device {device!r} is not a torch device such as 'cpu' or 'cuda:0'") from None
    if target.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ConfigError(f"device {device!r}: this machine's torch sees no CUDA GPU; {fix}")
        if target.index is not None and target.index >= count:
            raise ConfigError(f"device {device!r}: this machine has {count} CUDA GPU(s), cuda:0 to cuda:{count - 1}")
    elif target.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"device {device!r}: MPS is not available on this machine; {fix}")
    elif target.type == "meta":
        raise ConfigError(f"device {device!r} holds shapes but no values, so nothing can run there; use cpu or cuda:N")
    elif target.type != "cpu":
        try:  # xpu, hpu, xla, ...: only a tensor placed there says whether this torch has that backend
            torch.empty(0, device=target)
        except Exception as error:  # noqa: BLE001 - each backend fails its own way (AssertionError, ImportError, ...)
            raise ConfigError(
                f"device {device!r}: this machine's torch cannot place tensors on {target.type} "
                f"({type(error).__name__}); {fix}, or cuda:N on a machine with CUDA GPUs"
            ) from None
    return target
