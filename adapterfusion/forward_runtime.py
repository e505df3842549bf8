"""What the model's forwards share through its ForwardRuntime (injection/runtime.py): `inference_cache`, which folds
each fusion's weights once for every forward inside it, and the recording of fusion attentions. AdaptedModel's
methods of these names are these functions.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from adapterfusion import blocks
from adapterfusion._validation import check_bool
from adapterfusion.errors import ConfigError
from adapterfusion.injection.runtime import Recorder
from adapterfusion.injection.unloaded import check_wrapped

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel


@contextlib.contextmanager
def inference_cache(model: AdaptedModel, check_values: bool = True) -> Iterator[None]:
    """Fold each fusion's weights once and reuse them for every forward inside the block (evaluation,
    serving, generate); saves about 3·(M + N)·d² per fusion layer and forward. Weights must not change inside:
    it runs under torch.no_grad(). A later block reuses a site's last fold while its weights are unchanged,
    checked by a hash of their values, of every kept fold at once on the block's entry (writes through `p.data`
    change nothing else). check_values=False skips that hash, trusting the tensors' identity and version alone: for a
    caller whose weights change only by optimizer steps, in-place operations, `.to()` or loading (the server)."""
    check_wrapped(model.sites)
    check_bool(check_values, "inference_cache(check_values)")
    with model.runtime.caching(check_values, _placement(model)), torch.no_grad():
        yield


def check_cache_placement(model: AdaptedModel) -> None:
    """Inside inference_cache(): refuse a forward after the model was cast or moved in the block, or one with
    gradients turned back on (torch.enable_grad() inside the block): the folds and stacked adapters the block makes
    once would carry the first call's autograd graph into every later call, whose backward then fails in torch
    ("backward through the graph a second time") or sends no gradient to the pieces the folds stand for."""
    if model.runtime.is_caching:
        model.runtime.check_placement(_placement(model))
        if torch.is_grad_enabled():
            raise ConfigError(
                "a forward with gradients enabled inside inference_cache(): the block runs under torch.no_grad() and "
                "reuses the fusion folds and adapter stacks it prepares once, which carry no gradient to later calls; "
                "train or take gradients outside the block (drop torch.enable_grad() inside it, or leave "
                "`with model.inference_cache():`)"
            )


def _placement(model: AdaptedModel) -> tuple[torch.dtype, torch.device]:
    """(dtype, device) of the embeddings, from one lookup: checked on every forward inside the cache."""
    weight = cast(nn.Embedding, cast(Any, model.model).get_input_embeddings()).weight
    return weight.dtype, weight.device


def recording_fusion_attentions(
    model: AdaptedModel, enabled: bool = True
) -> contextlib.AbstractContextManager[Recorder | None]:
    """Inside the block every fusion site records its softmax weights into the yielded dict, keyed (layer,
    position): around model(...), model.model(...), forward_parallel or generate, whatever their own
    output_fusion_attentions (a call's own recording fills its output and this dict alike; after several calls
    the dict holds the last one's, during generate every position run). With enabled=False this block records
    nothing of its own and yields None; a block around it still records. One fusion's weights per site and
    call: a routed call (adapter_names=, BatchSplit, Parallel) and a Stack of two fusions are refused inside."""
    check_bool(enabled, "recording_fusion_attentions(enabled)")
    check_wrapped(model.sites)
    return model.runtime.recording(enabled)


def check_fusion_to_record(model: AdaptedModel) -> None:
    """Refuse output_fusion_attentions=True on a call that runs no fusion: its output would hold only Nones, as if
    the fusion had recorded nothing. (A recording block around a call records silently whatever runs.)"""
    if model.active_fusion is not None or blocks.fusions_in(model.active_block):
        return
    if model.active_block is not None:
        active = f"a {type(model.active_block).__name__} block with no fusion in it"
    elif model.active_adapter is not None:
        active = f"adapter {model.active_adapter!r} alone"
    else:
        active = "no adapter or fusion (the plain encoder)"
    loaded = model.fusion_names
    how = (
        f"activate one of the loaded fusions {loaded} first: model.activate(fusion={loaded[0]!r}), or "
        f"`with model.activated(fusion={loaded[0]!r}):` around the call"
        if loaded
        else "no fusion is loaded: add_fusion() or load_fusion() one and activate it"
    )
    raise ConfigError(
        f"output_fusion_attentions=True, but no fusion is active: this call runs {active}, so there are no fusion "
        f"attentions to return; {how}, or drop output_fusion_attentions"
    )


@contextlib.contextmanager
def recording_generation(model: AdaptedModel, generating: nn.Module) -> Iterator[None]:
    """Inside the block a recording of fusion attentions grows by the positions of each cached step of
    `generating` (the transformers model whose generate() runs; generation.py): each of its forwards says where
    it starts (its cache's length), so an uncached step, which runs every position again, replaces the recording,
    and a step after candidate tokens were rejected (assisted decoding) runs their positions again. At the end the
    recording is cut to the cache's length: the positions generation kept. Without a recording open around
    generate() no hook is set: reading the cache's length is a host sync and a graph break inside the decode step
    that transformers compiles for a static cache (CUDA graphs)."""
    if not model.runtime.is_recording:
        yield
        return
    caches: list[Any] = []

    def step_start(_module: nn.Module, _args: Any, kwargs: dict[str, Any]) -> None:
        caches[:] = [kwargs.get("past_key_values")]
        model.runtime.starting_at(cached_length(kwargs))

    handle = generating.register_forward_pre_hook(step_start, with_kwargs=True)
    try:
        with model.runtime.extending():
            yield
            length = getattr(caches[0], "get_seq_length", None) if caches else None
            if callable(length):
                model.runtime.ending_at(int(length()))
    finally:
        handle.remove()


def cached_length(kwargs: dict[str, Any]) -> int:
    """How many positions a forward's KV cache holds before it runs (0 without one): its first token's position."""
    cache = kwargs.get("past_key_values")
    if cache is None:
        return 0
    positions = kwargs.get("cache_position")
    if isinstance(positions, torch.Tensor) and positions.numel() > 0:
        return int(positions.reshape(-1)[0])
    length = getattr(cache, "get_seq_length", None)
    return int(length()) if callable(length) else 0


def keep_state_in_recompute(model: AdaptedModel) -> None:
    """Under gradient checkpointing the wrapped model's layers run again in backward(), after the call that set
    what runs has returned (a routed call, forward_parallel, an `activated` block): each checkpointing layer's
    function is wrapped once so that its recompute runs the state its first run had, not the model's state at
    backward time (routed rows otherwise got another adapter's gradients, silently). Training calls only."""
    if not (model.training and torch.is_grad_enabled()):
        return
    for module in model.model.modules():
        inner = getattr(module, "_gradient_checkpointing_func", None)
        if getattr(module, "gradient_checkpointing", False) is not True or inner is None:
            continue
        if isinstance(inner, _ReplayingCheckpoint):
            if inner.owner() is model:
                continue
            inner = inner.inner  # a copy's wrapper (deepcopy, pickle) still points at the original model
        setattr(module, "_gradient_checkpointing_func", _ReplayingCheckpoint(model, inner))  # noqa: B010 - not a Module


class _ReplayingCheckpoint:
    """A layer's checkpoint function that replays, in the recompute, the model state of the forward it checkpoints."""

    def __init__(self, model: AdaptedModel, inner: Callable[..., Any]) -> None:
        self.owner: Callable[[], AdaptedModel | None] = weakref.ref(model)
        self.inner = inner

    def __call__(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        model = self.owner()
        if model is None:
            return self.inner(function, *args, **kwargs)
        state = model.state

        def replay(*replay_args: Any, **replay_kwargs: Any) -> Any:
            if model.state is state:  # the first run
                return function(*replay_args, **replay_kwargs)
            with model.running(state):  # the recompute in backward()
                return function(*replay_args, **replay_kwargs)

        return self.inner(replay, *args, **kwargs)

    def __reduce__(self) -> tuple[Any, ...]:
        """A copy is the wrapped function itself: the next training forward of the copy wraps it for the copy."""
        return (_unwrapped, (self.inner,))


def _unwrapped(inner: Callable[..., Any]) -> Callable[..., Any]:
    return inner
