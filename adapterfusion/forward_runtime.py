"""What the model's forwards share through its ForwardRuntime (injection/runtime.py): `inference_cache`, which folds
each fusion's weights once for every forward inside it, and the recording of fusion attentions. AdaptedModel's
methods of these names are these functions.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from adapterfusion._validation import check_bool
from adapterfusion.injection.runtime import Recorder
from adapterfusion.injection.unloaded import check_wrapped

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel


@contextlib.contextmanager
def inference_cache(model: AdaptedModel, check_values: bool = True) -> Iterator[None]:
    """Fold each fusion's weights once and reuse them for every forward inside the block (evaluation,
    serving, generate); saves about 3·(M + N)·d² per fusion layer and forward. Weights must not change inside:
    it runs under torch.no_grad(). A later block reuses a site's last fold while its weights are unchanged,
    checked by a hash of their values on the block's first use of each site (writes through `p.data` change
    nothing else). check_values=False skips that hash, trusting the tensors' identity and version alone: for a
    caller whose weights change only by optimizer steps, in-place operations, `.to()` or loading (the server)."""
    check_wrapped(model.sites)
    check_bool(check_values, "inference_cache(check_values)")
    with model.runtime.caching(check_values, _placement(model)), torch.no_grad():
        yield


def check_cache_placement(model: AdaptedModel) -> None:
    """Inside inference_cache(): refuse a forward after the model was cast or moved in the block."""
    if model.runtime.is_caching:
        model.runtime.check_placement(_placement(model))


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


def recording_generation(model: AdaptedModel) -> contextlib.AbstractContextManager[None]:
    """Inside the block a recording of fusion attentions grows by the positions of each step (generation.py)."""
    return model.runtime.extending()
