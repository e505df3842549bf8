"""Generation with adapters: `AdaptedModel.generate` runs the wrapped model's own `generate()` (KV cache, greedy,
beam search, sampling, encoder-decoders) with what is active.

Nothing of transformers' generation is copied: the adapter sites sit inside the wrapped model, so its generate loop
runs them at every step. Every site acts on each position alone (an adapter, a fusion's attention over adapters
per token), so a cached step computes exactly what the full forward computes for that position. Fusions run with
their weights folded once for the whole call (`inference_cache`), as in evaluation. The LM head of the wrapped model
picks the tokens; a prediction head of ours plays no part. Inside `recording_fusion_attentions()`, each fusion
site's weights grow by the positions of each step: [rows, every position kept, N] at the end (rows as generate runs
them: beams are rows, and beam reordering is not followed; assisted decoding's rejected candidates are dropped).

Per-example routing: `generate(..., adapter_names=[...])` (one entry per prompt, as in `model(**batch,
adapter_names=...)`; an active BatchSplit gives them too) runs every forward of the call with each row's choice.
generate repeats each prompt's row in place for beams and returned sequences (repeat_interleave), so a forward of
k times as many rows gives each choice to k consecutive rows; beam search reorders rows only within a prompt, so a
row keeps its prompt's choice. An encoder-decoder's encoder runs the prompts once, its decoder their copies.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from adapterfusion.blocks import BatchSplit, Parallel
from adapterfusion.errors import AdapterFusionError, ConfigError
from adapterfusion.forward_inputs import (
    GENERATE_INPUTS,
    check_early_exit,
    check_generate_arguments,
    check_generate_inputs,
    check_generate_settings,
    check_token_ids,
    read_setting,
)
from adapterfusion.forward_inputs.generate_callbacks import checked_callbacks, checked_scores
from adapterfusion.forward_inputs.generate_settings import score_scales
from adapterfusion.injection.unloaded import check_wrapped
from adapterfusion.routing import example_choices

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel


def generate(model: AdaptedModel, *args: Any, adapter_names: Sequence[Any] | None = None, **kwargs: Any) -> Any:
    """The wrapped model's `generate(*args, **kwargs)` with the active adapter or fusion (transformers' arguments and
    return value: e.g. input_ids, attention_mask, max_new_tokens, do_sample, num_beams); adapter_names: one entry
    per prompt (an adapter, a fusion, a block or None), each prompt generated with its own (see the module
    docstring)."""
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
    if "head_names" in kwargs:
        raise ConfigError(
            "generate() takes no head_names: it picks tokens with the wrapped model's language-model head, and no "
            "prediction head plays a part; route each prompt to its adapter or fusion with adapter_names=[...]"
        )
    if "output_fusion_attentions" in kwargs:
        raise ConfigError(
            "generate() takes no output_fusion_attentions; record them around the call: "
            "`with model.recording_fusion_attentions() as weights: model.generate(...)`"
        )
    if isinstance(model.state.block, Parallel):
        raise ConfigError(
            "a Parallel block is active, which runs every example once per child; generate() keeps one row per "
            "prompt: repeat the prompts once per child and pass adapter_names=[child, ...] instead"
        )
    check_wrapped(model.sites)  # in train mode no inference_cache() below would tell an unloaded model
    if isinstance(kwargs.get("assistant_model"), nn.Module) and hasattr(kwargs["assistant_model"], "sites"):
        raise ConfigError(
            "generate(): assistant_model is an AdaptedModel; pass the transformers model inside it, "
            "assistant_model=draft.model (the draft's active adapter or fusion runs in it)"
        )
    paged = _continuous_batching(wrapped, args, kwargs)
    _check_recordable(model, args, kwargs, paged)
    settings = check_generate_settings(wrapped, args, kwargs)
    check_early_exit(wrapped, args, kwargs)
    args, kwargs = settings.args, settings.kwargs  # with numpy / torch scalars as the Python numbers they hold
    vocabulary = int(wrapped.get_input_embeddings().weight.shape[0])
    check_token_ids(wrapped, args, kwargs, vocabulary)
    copies = int(settings.values.get("num_beams", 1)) * int(settings.values.get("num_return_sequences", 1))
    prompts = _prompt_rows(args, kwargs)
    check_generate_arguments(wrapped, args, kwargs, vocabulary, prompts * copies if prompts is not None else None)
    inputs = _model_inputs(args, kwargs)
    check_generate_inputs(model, inputs, settings.max_new_tokens, settings.max_length, copies, settings.least)
    args, kwargs = checked_callbacks(wrapped, args, kwargs, vocabulary)
    routed = adapter_names is not None or isinstance(model.state.block, BatchSplit)
    if routed and paged:
        raise ConfigError(
            "generate(cache_implementation='paged') with adapter_names (or an active BatchSplit): transformers' "
            "continuous batching packs every prompt's tokens into one row, which per-prompt choices cannot follow "
            "(its background loop fails and the prompts come back without new tokens); route without "
            "cache_implementation='paged', or generate each choice's prompts in a call of their own"
        )
    caching = model.inference_cache() if not model.training else contextlib.nullcontext()
    routing = _routed_rows(model, wrapped, _routed_prompts(prompts), adapter_names) if routed else None
    sampling = bool(read_setting(wrapped, args, kwargs, "do_sample"))
    scaled = score_scales(settings, sampling)
    # Greedy decoding with no setting that scales the scores skips the check: its per-step read of the device would
    # cost every plain decode step a second wait on the GPU.
    scores = checked_scores(wrapped, sampling, scaled) if sampling or scaled else contextlib.nullcontext()
    with caching, model.recording_generation(wrapped), routing or contextlib.nullcontext(), scores:
        try:
            return wrapped.generate(*args, **kwargs)
        except ValueError as error:  # transformers' refusal of settings together, e.g. 3 sequences of 2 beams
            if isinstance(error, AdapterFusionError):
                raise
            raise ConfigError(f"generate(): {error}") from error


# Decoding that drafts candidate tokens with the generating model itself, whose draft forwards a recording of its
# fusion attentions cannot tell from the forwards that verify them.
_SELF_DRAFTS = ("assistant_early_exit", "use_mtp")


def _continuous_batching(wrapped: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether generate() runs transformers' continuous batching, which it does for the keyword
    cache_implementation='paged' alone. The same value in a generation_config (the one passed, or the model's own,
    where read_setting finds it) is refused: transformers then runs an ordinary generation with a dynamic cache
    without a word, not the continuous batching asked for."""
    if kwargs.get("cache_implementation") == "paged":
        return True
    if read_setting(wrapped, args, kwargs, "cache_implementation") == "paged":
        raise ConfigError(
            "generate(): cache_implementation='paged' in a generation_config (the one passed, or the model's own): "
            "transformers switches to continuous batching only for the keyword, and would run an ordinary "
            "generation with a dynamic cache without a word; pass generate(..., cache_implementation='paged') "
            "instead, or set the config's cache_implementation to None (the default cache)"
        )
    return False


def _check_recordable(model: AdaptedModel, args: tuple[Any, ...], kwargs: dict[str, Any], paged: bool) -> None:
    """Inside recording_fusion_attentions(): refuse decoding whose forwards the recording cannot follow, a draft run
    by the recorded model's own sites, continuous batching (`paged`, its prompts packed into one row), contrastive
    search (its candidates are extra rows) and classifier-free guidance (its negative prompt runs through the same
    sites beside each step). A separate draft model and prompt lookup are followed
    (forward_runtime.recording_generation)."""
    if not model.runtime.is_recording:
        return
    if paged:
        raise ConfigError(
            "generate(cache_implementation='paged') inside recording_fusion_attentions(): transformers' continuous "
            "batching runs every prompt's tokens packed into one row, which the recording cannot follow; record "
            "without cache_implementation='paged', or record outside this call"
        )
    wrapped = model.model
    drafts = [f"{name}={value!r}" for name in _SELF_DRAFTS if (value := read_setting(wrapped, args, kwargs, name))]
    assistant, sites = kwargs.get("assistant_model"), {id(site) for site in model.sites}
    if isinstance(assistant, nn.Module) and any(id(module) in sites for module in assistant.modules()):
        drafts.append("assistant_model=<the recorded model>")
    if drafts:
        raise ConfigError(
            f"generate() with {', '.join(drafts)} inside recording_fusion_attentions(): the draft runs the recorded "
            "model's own fusion sites, whose draft steps the recording cannot tell from the steps that verify them; "
            "draft with a separate model (assistant_model=<another transformers model>) or "
            "prompt_lookup_num_tokens=..., or record outside this call"
        )
    scale = read_setting(wrapped, args, kwargs, "guidance_scale")
    if scale is not None and scale != 1:
        raise ConfigError(
            f"generate() with guidance_scale={scale!r} (classifier-free guidance) inside "
            "recording_fusion_attentions(): beside each step it runs the negative prompt through the recorded model's "
            "own fusion sites, which the recording cannot tell from the step's; record without guidance_scale, or "
            "record outside this call"
        )
    alpha = read_setting(wrapped, args, kwargs, "penalty_alpha")
    if isinstance(alpha, (int, float)) and alpha > 0:
        raise ConfigError(
            f"generate() with penalty_alpha={alpha!r} (contrastive search) inside recording_fusion_attentions(): it "
            "runs each step's top_k candidate tokens as extra rows, which the recording cannot follow; record a "
            "greedy, sampled, beam or assisted generate() instead, or record outside this call"
        )


def _model_inputs(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """What check_generate_inputs reads among generate()'s arguments (the model inputs and flags of GENERATE_INPUTS);
    its first positional one (`inputs`) is the prompts' ids."""
    inputs = {key: kwargs[key] for key in GENERATE_INPUTS if key in kwargs}
    prompts = args[0] if args else kwargs.get("inputs")
    if prompts is not None and "input_ids" not in inputs:
        inputs["input_ids"] = prompts
    return inputs


_ROW_INPUTS = ("decoder_input_ids", "decoder_inputs_embeds", "input_ids", "inputs_embeds")


def _prompt_rows(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    """How many prompts generate() was given (the batch of its input tensor; None: none as a [batch, seq] tensor)."""
    keys = ("inputs", *_ROW_INPUTS)
    given = args[0] if args else next((kwargs[key] for key in keys if kwargs.get(key) is not None), None)
    return int(given.shape[0]) if isinstance(given, torch.Tensor) and given.dim() >= 2 else None


def _routed_prompts(prompts: int | None) -> int:
    """The prompts routed generation gives one choice each, which it needs as a [batch, seq] tensor."""
    if prompts is None:
        raise ConfigError(
            "generate() with adapter_names (or an active BatchSplit) needs the prompts as a [batch, seq] tensor "
            "(input_ids=... or inputs_embeds=...), one adapter_names entry per row"
        )
    return prompts


@contextlib.contextmanager
def _routed_rows(
    model: AdaptedModel, wrapped: Any, prompts: int, adapter_names: Sequence[Any] | None
) -> Iterator[None]:
    """Every forward inside runs row i with its prompt's choice: before each call of the wrapped model (and of an
    encoder-decoder's encoder, which generate calls alone), the model routes that call's rows."""
    choices = example_choices(model, adapter_names, prompts)

    def route(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        given = next((kwargs[key] for key in _ROW_INPUTS if kwargs.get(key) is not None), args[0] if args else None)
        if not isinstance(given, torch.Tensor) or given.dim() == 0:
            raise ConfigError(f"generate() called {type(module).__name__} without input rows to route")
        run_rows(int(given.shape[0]), given.device)

    modules = [wrapped]
    encoder = wrapped.get_encoder() if getattr(wrapped.config, "is_encoder_decoder", False) else None
    if encoder is not None and encoder is not wrapped:
        modules.append(encoder)
    with model.routing_copies(choices) as run_rows:
        handles = [module.register_forward_pre_hook(route, with_kwargs=True) for module in modules]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()
