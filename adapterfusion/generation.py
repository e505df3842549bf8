"""Generation with adapters: `AdaptedModel.generate` runs the wrapped model's own `generate()` (KV cache, greedy,
beam search, sampling, encoder-decoders) with what is active.

Nothing of transformers' generation is copied: the adapter sites sit inside the wrapped model, so its generate loop
runs them at every step. Every site acts on each position alone (an adapter, a fusion's attention over adapters
per token), so a cached step computes exactly what the full forward computes for that position. Fusions run with
their weights folded once for the whole call (`inference_cache`), as in evaluation. The LM head of the wrapped model
picks the tokens; a prediction head of ours plays no part. Inside `recording_fusion_attentions()`, each fusion
site's weights grow by one position per step: [rows, every position run, N] at the end (rows as generate runs them:
beams are rows, and beam reordering is not followed).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from adapterfusion.errors import ConfigError

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel


def generate(model: AdaptedModel, *args: Any, **kwargs: Any) -> Any:
    """The wrapped model's `generate(*args, **kwargs)` with the active adapter or fusion (transformers' arguments and
    return value: e.g. input_ids, attention_mask, max_new_tokens, do_sample, num_beams)."""
    wrapped: Any = model.model  # a transformers PreTrainedModel; nn.Module types its attributes as Tensor | Module
    can_generate = getattr(wrapped, "can_generate", None)
    if not callable(can_generate) or not can_generate():
        raise ConfigError(
            f"the wrapped {type(wrapped).__name__} has no language-model head, so it cannot generate; wrap the model "
            "loaded with AutoModelForCausalLM (decoders) or AutoModelForSeq2SeqLM (T5, BART) instead"
        )
    if model.active_head is not None:
        raise ConfigError(
            f"head {model.active_head!r} is active, but generate() picks tokens with the wrapped model's "
            "language-model head, not a prediction head; activate the adapter or fusion without it "
            "(model.activate(adapter=..., head=None)) to generate, and use the head through model(**inputs).logits"
        )
    if "output_fusion_attentions" in kwargs:
        raise ConfigError(
            "generate() takes no output_fusion_attentions; record them around the call: "
            "`with model.recording_fusion_attentions() as weights: model.generate(...)`"
        )
    caching = model.inference_cache() if not model.training else contextlib.nullcontext()
    with caching, model.recording_generation():
        return wrapped.generate(*args, **kwargs)
