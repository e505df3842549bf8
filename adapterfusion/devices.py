"""Whether this machine has the torch device a user names (`serve --device`, `af.pipeline(device=...)`,
`model.to(...)` and `model.cuda()` of a wrapped model): checked before anything loads or moves, with an error that
says what the machine has, not torch's assertion from deep inside `.to()` minutes later. And whether accelerate
offloads a model's weights, which adapters beside them cannot work with."""

from __future__ import annotations

from typing import Any, TypeVar

import torch
from torch import nn

from adapterfusion._validation import check_has_values
from adapterfusion.errors import ConfigError
from adapterfusion.io.paths import listing


def available_device(device: str | torch.device, fix: str) -> torch.device:
    """`device` as a torch device this machine has; ConfigError naming what it has otherwise, ending with `fix`
    (what to pass instead, e.g. "serve with --device cpu")."""
    shown = repr(str(device))  # 'cuda:0' for a torch.device too, as written for a string
    try:
        target = torch.device(device)
    except (RuntimeError, TypeError):
        raise ConfigError(f"device {shown} is not a torch device such as 'cpu' or 'cuda:0'") from None
    if target.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ConfigError(f"device {shown}: this machine's torch sees no CUDA GPU; {fix}")
        index = _written_index(device, target)
        if index is not None and index >= count:
            raise ConfigError(f"device {shown}: this machine has {count} CUDA GPU(s), cuda:0 to cuda:{count - 1}")
    elif target.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"device {shown}: MPS is not available on this machine; {fix}")
    elif target.type == "meta":
        raise ConfigError(f"device {shown} holds shapes but no values, so nothing can run there; use cpu or cuda:N")
    elif target.type != "cpu":
        try:  # xpu, hpu, xla, ...: only a tensor placed there says whether this torch has that backend
            torch.empty(0, device=target)
        except Exception as error:  # noqa: BLE001 - each backend fails its own way (AssertionError, ImportError, ...)
            raise ConfigError(
                f"device {shown}: this machine's torch cannot place tensors on {target.type} "
                f"({type(error).__name__}); {fix}, or cuda:N on a machine with CUDA GPUs"
            ) from None
    return target


def _written_index(device: str | torch.device, target: torch.device) -> int | None:
    """The device index as written: torch keeps an index in 8 bits, so it reads 'cuda:999' as cuda:-25 and
    'cuda:256' as cuda:0, which would pass a check against the GPUs there are."""
    written = str(device).rpartition(":")[2] if isinstance(device, str) else ""
    return int(written) if written.isdigit() else target.index


def offloaded_modules(model: nn.Module) -> list[str]:
    """The modules whose weights accelerate offloads (a device_map entry 'disk', or 'cpu' beside a GPU;
    cpu_offload, disk_offload): they stay on the meta device and a hook reads them in for each forward only."""
    modules = model.named_modules()
    return [name or "<the model>" for name, module in modules if _offloads(getattr(module, "_hf_hook", None))]


def _offloads(hook: object) -> bool:
    """Whether an accelerate hook (or one of a SequentialHook's) offloads its module's weights."""
    if hook is None:
        return False
    return getattr(hook, "offload", False) is True or any(_offloads(inner) for inner in getattr(hook, "hooks", ()))


def check_not_offloaded(model: nn.Module, doing: str) -> None:
    """Refuse a model whose weights accelerate offloads: an adapter, fusion or head built beside such a layer takes
    its device, the meta device, and so has no values (a Houlsby adapter copies the layer's LayerNorm, which is not
    there to copy); forwards then fail deep in torch, saves keep nothing."""
    offloaded = offloaded_modules(model)
    placed = getattr(model, "hf_device_map", None) or {}  # from_pretrained(device_map=...): name its entries
    named = [key for key in placed if any(name == key or name.startswith(f"{key}.") for name in offloaded)]
    named = named or offloaded
    outermost = [name for name in named if not any(name.startswith(f"{other}.") for other in named)]
    if offloaded:
        raise ConfigError(
            f"{doing}: accelerate offloads this model's weights ({listing(outermost)}): they stay on the meta device "
            "and a hook reads them in only for their own module's forward, while adapters, fusions and heads read "
            "weights directly (built beside an offloaded layer, they too are on the meta device, without values); "
            "load the model whole onto devices that hold its weights: from_pretrained(..., device_map=None), or a "
            "device_map without 'disk' (and without 'cpu' entries beside a GPU), and no cpu_offload/disk_offload"
        )


COMPUTE_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)  # what a model's matmuls run in
_MOVE_FIX = "keep the model on the CPU (model.to('cpu'))"


def check_move(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """The arguments of `model.to(...)`, refused before anything moves: a device this machine lacks (torch's
    AssertionError 'Torch not compiled with CUDA enabled'), something that is neither a device nor a dtype, a
    dtype that weights do not compute in (torch casts to float8 or complex, and the next forward fails deep inside
    a layer), and a model on the meta device moved to a real one (torch's NotImplementedError 'Cannot copy out of
    meta tensor'). The meta device is taken: `model.to('meta')` keeps shapes without values, on purpose."""
    try:
        device, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)
    except (RuntimeError, TypeError, ValueError) as error:
        call = ", ".join([*map(repr, args), *(f"{key}={value!r}" for key, value in kwargs.items())])
        raise ConfigError(
            f"model.to({call}): {str(error).splitlines()[0]}; pass a device ('cpu', 'cuda:0'), a dtype "
            "(torch.float32, torch.bfloat16, torch.float16, torch.float64) or both"
        ) from None
    if device is not None and device.type != "meta":
        given = kwargs.get("device", args[0] if args else None)  # as written: torch reads 'cuda:999' as cuda:-25
        movable_to(given if isinstance(given, (str, torch.device)) else str(device))
        check_has_values(model.parameters(), "the model's weights are", f"there is nothing to copy to {device}")
    if dtype is not None and dtype not in COMPUTE_DTYPES:
        raise ConfigError(
            f"model.to({dtype}): the model's weights compute in torch.float32, torch.bfloat16, torch.float16 or "
            f"torch.float64, not {dtype} (a storage or index type: a forward would fail inside a layer); pass one of "
            "those"
        )


def movable_to(device: str | torch.device) -> None:
    """Refuse a device to move a model to that this machine lacks; the meta device is taken (shapes only)."""
    if str(device) != "meta":
        available_device(device, _MOVE_FIX)


def cuda_device(index: int | torch.device | None) -> torch.device:
    """`model.cuda(index)`'s device, if this machine has it (check_move's reason)."""
    if isinstance(index, torch.device):
        return available_device(index, _MOVE_FIX)
    return available_device("cuda" if index is None else f"cuda:{index}", _MOVE_FIX)


_Module = TypeVar("_Module", bound=nn.Module)


def checked_to(model: _Module, *args: Any, **kwargs: Any) -> _Module:
    """nn.Module.to (AdaptedModel.to), with a device this machine lacks, or a dtype weights do not compute in, refused
    before anything moves (check_move)."""
    check_move(model, args, kwargs)
    return nn.Module.to(model, *args, **kwargs)


def checked_cuda(model: _Module, device: int | torch.device | None = None) -> _Module:
    """nn.Module.cuda (AdaptedModel.cuda), refused with the library's error on a machine without that GPU."""
    cuda_device(device)
    return nn.Module.cuda(model, device)


def checked_to_empty(model: _Module, *, device: str | torch.device | int | None, recurse: bool = True) -> _Module:
    """nn.Module.to_empty (AdaptedModel.to_empty; after init_empty_weights: room for the weights, to be loaded next),
    refused with the library's error on a machine without that device. The model's tied weights are tied again
    afterwards (transformers' tie_weights, as from_pretrained ties them): init_empty_weights leaves a GPT-2's or a
    tied Llama's lm_head apart from its embeddings, and weights saved without the tied copy left it empty."""
    if device is not None:
        movable_to(f"cuda:{device}" if isinstance(device, int) else device)
    moved = nn.Module.to_empty(model, device=device, recurse=recurse)
    tie = getattr(getattr(model, "model", None), "tie_weights", None)
    if recurse and callable(tie):
        tie()
    return moved
