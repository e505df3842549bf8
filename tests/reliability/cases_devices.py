"""Bad-input cases at one boundary, devices, dtypes and environment settings: device arguments, half precision on CPU,
meta or offloaded models, ADAPTERFUSION_* variables."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import torch
import transformers
from accelerate import cpu_offload

import adapterfusion as af
from adapterfusion import defaults
from adapterfusion.training import TrainingError
from catalogue import Action, BadInput, tiny_lm, train_on_damaged
from tiny_decoders import tiny_decoder_inputs
from tiny_models import tiny_encoder, tiny_inputs

B = BadInput
GROUP = "devices and dtypes"


# ---- helpers -------------------------------------------------------------------------------------------------------
def _adapted(encoder: torch.nn.Module | None = None) -> af.AdaptedModel:
    """A tiny BERT (or `encoder`) with adapter 'a' active."""
    model = af.wrap(encoder if encoder is not None else tiny_encoder())
    model.add_adapter("a")
    model.activate(adapter="a")
    return model


def _wrap_offloaded_to_disk(folder: Path) -> Action:
    """A tiny BERT loaded with its second layer offloaded to disk (device_map 'disk'), then wrapped, given an adapter
    and run."""
    tiny_encoder().save_pretrained(folder / "encoder")
    places = {"embeddings": "cpu", "encoder.layer.0": "cpu", "encoder.layer.1": "disk", "pooler": "cpu"}
    encoder = transformers.AutoModel.from_pretrained(
        folder / "encoder", device_map=places, offload_folder=folder / "offload"
    )
    return lambda: _adapted(encoder)(**tiny_inputs())


def _forward_after_cpu_offload(folder: Path) -> Action:
    """A wrapped tiny BERT with adapter 'a', whose weights accelerate's cpu_offload then moves off the model."""
    model = _adapted()
    cpu_offload(model.model, execution_device=torch.device("cpu"))
    return lambda: model(**tiny_inputs())


def _moved(*args: Any, forward: bool = False) -> Callable[[Path], Action]:
    """model.to(*args) on a tiny BERT with adapter 'a' (then a forward, if `forward`)."""

    def prepare(folder: Path) -> Action:
        model = _adapted()

        def act() -> Any:
            model.to(*args)
            return model(**tiny_inputs()) if forward else None

        return act

    return prepare


def _from_meta_to_cpu(folder: Path) -> Action:
    """A wrapped tiny BERT moved to the meta device, then back with model.to('cpu')."""
    model = _adapted().to("meta")
    return lambda: model.to("cpu")


def _cuda_method(folder: Path) -> Action:
    model = _adapted()
    return lambda: model.cuda(999)


def _with_environment(variables: dict[str, str], action: Callable[[], Any]) -> Action:
    """`action` run with the environment `variables` set (and put back after)."""

    def act() -> Any:
        with mock.patch.dict(os.environ, variables):
            return action()

    return act


def _train_with_environment(**variables: str) -> Callable[[Path], Action]:
    """train() of st-a on rte for one step (catalogue.train_on_damaged) with the environment `variables` set."""

    def prepare(folder: Path) -> Action:
        return _with_environment(variables, train_on_damaged(lambda path: None)(folder))

    return prepare


def _decoder_in_cache_with_triton(value: str) -> Callable[[Path], Action]:
    """A tiny Llama's forward inside inference_cache() (where its lanes are built) with ADAPTERFUSION_TRITON=value."""

    def prepare(folder: Path) -> Action:
        model = tiny_lm("llama")

        def act() -> Any:
            with model.inference_cache():
                return model(**tiny_decoder_inputs("llama"))

        return _with_environment({"ADAPTERFUSION_TRITON": value}, act)

    return prepare


def _cache_folder(value: str) -> Callable[[Path], Action]:
    return lambda folder: _with_environment({defaults.CACHE_ENV: value}, defaults.cache_dir)


def _blank_cache_folder(folder: Path) -> Action:
    """cache_dir() with ADAPTERFUSION_CACHE='   ' and with it unset: the same folder."""

    def act() -> str:
        with mock.patch.dict(os.environ, {defaults.CACHE_ENV: ""}):
            unset = defaults.cache_dir()
        with mock.patch.dict(os.environ, {defaults.CACHE_ENV: "   "}):
            blank = defaults.cache_dir()
        return f"a blank {defaults.CACHE_ENV} gives the default cache folder: {blank == unset}"

    return act


def _generate_with_piece_cast(folder: Path) -> Action:
    """generate() of a float32 GPT-2 whose adapter 'a' was cast to bfloat16 by hand."""
    model = tiny_lm("gpt2")
    for site in model.sites:
        if "a" in site.adapters:
            site.adapters["a"].to(torch.bfloat16)
    return lambda: model.generate(**tiny_decoder_inputs("gpt2", padding_side="left"), max_new_tokens=2)


def _cached_step_after_cast(folder: Path) -> Action:
    """A tiny Llama's cached step with the past_key_values of its float32 forward, after model.to(torch.bfloat16)."""
    model = tiny_lm("llama")
    inputs = tiny_decoder_inputs("llama")
    past = model(**inputs, use_cache=True).past_key_values
    model.to(torch.bfloat16)
    mask = torch.cat([inputs["attention_mask"], torch.ones(2, 1, dtype=torch.long)], dim=1)
    return lambda: model(input_ids=inputs["input_ids"][:, :1], attention_mask=mask, past_key_values=past)


def _embeds_of_autocast_dtype(folder: Path) -> Action:
    """bfloat16 inputs_embeds into a float32 model (no adapter active) inside torch.autocast('cpu', bfloat16), and
    into the same BERT unwrapped."""
    model, bare = af.wrap(tiny_encoder()), tiny_encoder()
    embeds = torch.randn(2, 7, 32, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)

    def act() -> str:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            ours, theirs = model(inputs_embeds=embeds), bare(inputs_embeds=embeds)
        return f"the unwrapped model's output: {torch.equal(ours.last_hidden_state, theirs.last_hidden_state)}"

    return act


def _autocast_other_half(folder: Path) -> Action:
    """A bfloat16 model with adapter 'a', run under torch.autocast(dtype=torch.float16) on the CPU."""
    model = _adapted(tiny_encoder().to(torch.bfloat16))

    def act() -> Any:
        with torch.autocast("cpu", dtype=torch.float16):
            return model(**tiny_inputs())

    return act


def _encoder_partly_cast(folder: Path) -> Action:
    """A model with adapter 'a' whose encoder layers (not its embeddings) were cast to bfloat16 by hand, before the
    adapter was added (which takes its layer's dtype)."""
    encoder = tiny_encoder()
    encoder.encoder.to(torch.bfloat16)
    model = _adapted(encoder)
    return lambda: model(**tiny_inputs())


CASES: tuple[BadInput, ...] = (
    B(
        "wrap-model-offloaded-to-disk",
        GROUP,
        "af.wrap(<tiny BERT loaded with device_map={..., 'encoder.layer.1': 'disk'}>), add_adapter, a forward (was "
        "wrapped: the adapter beside the offloaded layer was built on the meta device, and the forward raised torch's "
        "RuntimeError 'Tensor on device meta is not on the expected device cpu!')",
        af.ConfigError,
        ("af.wrap", "accelerate offloads", "'encoder.layer.1'", "device_map=None", "'disk'"),
        _wrap_offloaded_to_disk,
    ),
    B(
        "forward-after-cpu-offload",
        GROUP,
        "accelerate's cpu_offload(model.model) after adapters were added, then a forward (was told the weights are "
        "on the meta device: 'load it without device='meta' or init_empty_weights', which the user had not used)",
        af.ConfigError,
        ("forward", "accelerate offloads", "'embeddings'", "cpu_offload"),
        _forward_after_cpu_offload,
    ),
    B(
        "model-to-absent-gpu",
        GROUP,
        "model.to('cuda:999') on a wrapped model (was torch's AssertionError 'Torch not compiled with CUDA enabled', "
        "or a RuntimeError 'invalid device ordinal' where CUDA is)",
        af.ConfigError,
        ("device 'cuda:999'", "CUDA GPU"),
        _moved("cuda:999"),
    ),
    B(
        "model-cuda-absent-gpu",
        GROUP,
        "model.cuda(999) on a wrapped model (was torch's RuntimeError 'Cannot access accelerator device when none is "
        "available')",
        af.ConfigError,
        ("device 'cuda:999'", "CUDA GPU"),
        _cuda_method,
    ),
    B(
        "model-to-dtype-as-string",
        GROUP,
        "model.to('float16'): a dtype's name where a torch.dtype belongs (was torch's RuntimeError 'Invalid device "
        "string')",
        af.ConfigError,
        ("model.to('float16')", "Invalid device string", "torch.float16"),
        _moved("float16"),
    ),
    B(
        "model-to-float8",
        GROUP,
        "model.to(torch.float8_e4m3fn), then a forward (was cast; the forward raised NotImplementedError "
        "'\"add_stub\" not implemented for Float8_e4m3fn' from BERT's embeddings)",
        af.ConfigError,
        ("model.to(torch.float8_e4m3fn)", "torch.bfloat16", "pass one of those"),
        _moved(torch.float8_e4m3fn, forward=True),
    ),
    B(
        "model-to-cpu-from-meta",
        GROUP,
        "model.to('meta'), then model.to('cpu') (was torch's NotImplementedError 'Cannot copy out of meta tensor; "
        "no data!')",
        af.ConfigError,
        ("on the meta device", "nothing to copy to cpu", "to_empty(device='cpu')"),
        _from_meta_to_cpu,
    ),
    B(
        "train-env-rank-not-a-number",
        GROUP,
        "train(...) with RANK='x' in the environment (was a ValueError from int() when the run opened)",
        TrainingError,
        ("RANK='x'", "not a whole number", "torchrun", "unset RANK"),
        _train_with_environment(RANK="x"),
    ),
    B(
        "train-env-local-rank-empty",
        GROUP,
        "train(...) with LOCAL_RANK='' in the environment (was a ValueError from int() deep inside accelerate, after "
        "the data was loaded and encoded)",
        TrainingError,
        ("LOCAL_RANK=''", "not a whole number >= -1", "unset LOCAL_RANK"),
        _train_with_environment(LOCAL_RANK=""),
    ),
    B(
        "triton-env-not-a-switch",
        GROUP,
        "ADAPTERFUSION_TRITON='maybe', then a decoder's forward in inference_cache() (was taken as on: only '0' "
        "turned the kernels off, so 'false' or 'off' left them on without a word)",
        af.ConfigError,
        ("ADAPTERFUSION_TRITON='maybe'", "not a switch", "0 (or false, off, no)"),
        _decoder_in_cache_with_triton("maybe"),
    ),
    B(
        "cache-env-relative",
        GROUP,
        "ADAPTERFUSION_CACHE='rel/cache' (was taken as a folder under the working directory: another cache, and "
        "another 540 MB conversion of the default decoder, in each)",
        af.ConfigError,
        ("ADAPTERFUSION_CACHE='rel/cache'", "relative path", "absolute path"),
        _cache_folder("rel/cache"),
    ),
    B(
        "cache-env-blank",
        GROUP,
        "ADAPTERFUSION_CACHE='   ' (not an error; was taken as a folder named '   ' in the working directory)",
        None,
        ("default cache folder: True",),
        _blank_cache_folder,
    ),
    B(
        "autocast-other-half-precision",
        GROUP,
        "a bfloat16 model run under torch.autocast('cpu', dtype=torch.float16) (was torch's RuntimeError 'mixed "
        "dtype (CPU): expect parameter to have scalar type of Float' from a LayerNorm)",
        af.ConfigError,
        ("torch.autocast(dtype=torch.float16)", "weights are torch.bfloat16", "LayerNorm", "model.to(torch.float32)"),
        _autocast_other_half,
    ),
    B(
        "generate-piece-cast-by-hand",
        GROUP,
        "generate() of a float32 GPT-2 whose adapter 'a' was cast to bfloat16 by hand (was torch's RuntimeError "
        "'mat1 and mat2 must have the same dtype' from the inference lane: forward named the piece, generate not)",
        af.ConfigError,
        ("adapter 'a' (torch.bfloat16)", "another dtype than the encoder's torch.float32", "model.to(torch.float32)"),
        _generate_with_piece_cast,
    ),
    B(
        "cached-step-after-cast",
        GROUP,
        "a Llama's past_key_values from a float32 forward, passed to the next step after model.to(torch.bfloat16) "
        "(was torch's RuntimeError 'expected scalar type BFloat16 but found Float' from inside the attention)",
        af.ConfigError,
        ("past_key_values hold keys of dtype torch.float32", "weights are torch.bfloat16", "start a cache"),
        _cached_step_after_cast,
    ),
    B(
        "forward-embeds-of-autocast-dtype",
        GROUP,
        "bfloat16 inputs_embeds into a float32 BERT inside torch.autocast('cpu', dtype=torch.bfloat16) (not an error: "
        "the unwrapped model takes them; was refused: 'inputs_embeds have dtype torch.bfloat16 but the model's "
        "weights are torch.float32')",
        None,
        ("the unwrapped model's output: True",),
        _embeds_of_autocast_dtype,
    ),
    B(
        "forward-encoder-partly-cast",
        GROUP,
        "model.model.encoder.to(torch.bfloat16) by hand (the embeddings left float32), then a forward (was blamed "
        "on 'adapter 'a' (torch.bfloat16)', which had only taken its layer's dtype)",
        af.ConfigError,
        ("the encoder's own weights are of several dtypes", "'encoder.layer.0", "model.to(torch.float32)"),
        _encoder_partly_cast,
    ),
)
