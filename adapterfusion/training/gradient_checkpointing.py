"""Gradient checkpointing of the wrapped encoder's layers for the length of a training run
(TrainingConfig.gradient_checkpointing)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from torch import nn

from adapterfusion.training.errors import TrainingError


@contextlib.contextmanager
def checkpointed_activations(model: nn.Module, enabled: bool = True) -> Iterator[None]:
    """Each encoder layer, its adapter sites included, runs again in the backward pass instead of keeping its
    activations while the block runs. Non-reentrant, so frozen inputs need not require grad and the replayed RNG gives
    the same dropout masks, hence the same gradients. A model without an encoder (a head on cached features) has
    nothing to checkpoint."""
    if not enabled:
        yield
        return
    # transformers' modeling_utils takes about 1.5 s to import, which every CLI command would pay at start-up; a
    # wrapped encoder has loaded it already.
    from transformers import PreTrainedModel

    encoder = getattr(model, "model", None)
    if not isinstance(encoder, PreTrainedModel):
        yield
        return
    if not encoder.supports_gradient_checkpointing:
        raise TrainingError(
            f"gradient_checkpointing=True: {type(encoder).__name__} does not support gradient "
            "checkpointing in this transformers version; set gradient_checkpointing=False"
        )
    had_input_hook = hasattr(encoder, "_require_grads_hook")
    kwargs = {"use_reentrant": False}
    if hasattr(encoder, "activation_checkpointing_enable"):  # transformers >= 5.x; the old names warn there
        encoder.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        encoder.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    try:
        yield
    finally:
        (getattr(encoder, "activation_checkpointing_disable", None) or encoder.gradient_checkpointing_disable)()
        if not had_input_hook and hasattr(encoder, "_require_grads_hook"):
            encoder.disable_input_require_grads()  # the enable call added it; leave the model as it was
