"""The past_key_values of a cached step: a transformers Cache made by this model for this batch's rows, which a head
cannot use, and how many tokens it holds already (a cached step's attention mask covers those too). A cache of
another model (other layer count, key/value heads or head size, an encoder-decoder's for a decoder, a decoder's for
an encoder-decoder) would fail in transformers' cache code, or, with more layers than the model, be read without a
word."""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, cast

import torch
import transformers.configuration_utils as transformers_configs
from torch import nn
from transformers.cache_utils import Cache, EncoderDecoderCache

from adapterfusion.errors import ConfigError
from adapterfusion.forward_inputs.encoder_decoder import is_seq2seq
from adapterfusion.injection.inject import decoder_layers

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel

_FIX = "pass the past_key_values this model returned (use_cache=True) for these rows, or {start} to start one"


def _fix(model: nn.Module) -> str:
    """How to get a cache `model` takes: an encoder-decoder's holds its self- and cross-attention apart."""
    start = "EncoderDecoderCache(DynamicCache(), DynamicCache())" if is_seq2seq(model) else "DynamicCache()"
    return _FIX.format(start=start)


def past_length(model: AdaptedModel, given: Mapping[str, Any], batch: int, head: str | None) -> int:
    """How many tokens the given past_key_values hold already (0: none): a transformers Cache of this model's layout
    (check_cache_layout) and this batch's rows, which a head cannot use (it pools the whole sequence; a cached step
    runs the new tokens only)."""
    past = given.get("past_key_values")
    if past is None:
        return 0
    if head is not None:
        raise ConfigError(
            f"head {head!r} is active: a head pools the whole sequence, but a step with past_key_values runs only "
            "the new tokens; run the head on the whole sequence, or activate(head=None) for cached decoding"
        )
    if not isinstance(past, Cache):
        raise ConfigError(f"past_key_values is a {type(past).__name__}, not a transformers Cache; {_fix(model.model)}")
    check_cache_layout(model, past)
    rows = _cache_rows(past)
    if rows is not None and rows != batch:
        raise ConfigError(
            f"past_key_values hold {rows} rows but the inputs have {batch}; a cached step continues the batch the "
            f"cache was made with: pass the next tokens of those {rows} rows"
        )
    return int(past.get_seq_length())


def check_cache_layout(model: AdaptedModel, cache: Cache) -> None:
    """A cache's filled layers are those of this model's (decoder's) layers: as many, each of the key/value heads
    and head size its config gives; an EncoderDecoderCache for an encoder-decoder and only for one. An
    encoder-decoder's attention layers share any other Cache between self- and cross-attention, appending the encoder
    states to the decoder's keys (a RuntimeError from the attention mask's shape)."""
    wrapped = model.model
    weight = cast(Any, wrapped).get_input_embeddings().weight
    if _CHECKED.get(cache) == (wrapped, weight.dtype, weight.device):  # generate's own, every step after its first
        return
    name, seq2seq = type(wrapped).__name__, is_seq2seq(wrapped)
    if isinstance(cache, EncoderDecoderCache) != seq2seq:
        held = (
            f"a {type(cache).__name__}, but {name} is an encoder-decoder, whose decoder keeps its self-attention "
            "and cross-attention apart in an EncoderDecoderCache"
            if seq2seq
            else f"an EncoderDecoderCache, an encoder-decoder's, but {name} is a decoder"
        )
        raise ConfigError(f"past_key_values is {held}; {_fix(wrapped)}")
    layers = decoder_layers(model) or model.num_layers
    heads, sizes = _head_shapes(wrapped)
    parts = (
        (cache.self_attention_cache, cache.cross_attention_cache)
        if isinstance(cache, EncoderDecoderCache)
        else (cache,)
    )
    complete = True
    for part in parts:
        filled = list(_filled_keys(part))
        complete = complete and len(filled) == layers
        if filled and len(filled) != layers:
            raise ConfigError(
                f"past_key_values hold {len(filled)} layer{'s' * (len(filled) != 1)} but {name} has {layers}: they "
                f"were made by another model; {_fix(wrapped)}"
            )
        for index, keys in enumerate(filled):
            _check_placement(wrapped, keys, weight, index)
            expected = (_of_layer(heads, index), _of_layer(sizes, index))
            if None not in expected and (keys.shape[1], keys.shape[-1]) != expected:
                raise ConfigError(
                    f"past_key_values hold keys of {keys.shape[1]} heads of size {keys.shape[-1]} at layer {index}, "
                    f"but {name} has {expected[0]} key/value heads of size {expected[1]} there: they were made by "
                    f"another model; {_fix(wrapped)}"
                )
    if complete:  # every layer filled by this model's layout: the steps that grow it need no second look
        _CHECKED[cache] = (wrapped, weight.dtype, weight.device)


def _check_placement(wrapped: nn.Module, keys: torch.Tensor, weight: torch.Tensor, index: int) -> None:
    """A cache's keys in the dtype and on the device of the model's weights: made before `model.to(...)` cast or
    moved the model, the next step's new keys meet them in attention, a RuntimeError from inside the layer ('expected
    scalar type BFloat16 but found Float'). Under autocast keys take its dtype, and a model spread over devices
    (device_map) keeps each layer's on its own: those are not compared."""
    other_dtype = keys.dtype != weight.dtype and not torch.is_autocast_enabled(weight.device.type)
    other_device = keys.device != weight.device and not getattr(wrapped, "hf_device_map", None)
    if other_dtype or other_device:
        raise ConfigError(
            f"past_key_values hold keys of dtype {keys.dtype} on {keys.device} at layer {index}, but "
            f"{type(wrapped).__name__}'s weights are {weight.dtype} on {weight.device}: the cache was made before the "
            "model was cast or moved (or elsewhere), and a cached step cannot continue it; run the whole sequence "
            "again to start a cache of the model as it is now, or cast the model back"
        )


_CHECKED: weakref.WeakKeyDictionary[Cache, tuple[nn.Module, torch.dtype, torch.device]] = weakref.WeakKeyDictionary()
_HEAD_SHAPES: weakref.WeakKeyDictionary[nn.Module, tuple[Any, tuple[Any, Any]]] = weakref.WeakKeyDictionary()


def _head_shapes(model: Any) -> tuple[Any, Any]:
    """transformers' (key/value heads, head size) of the model's decoder, each an int or one per layer; (None,
    None) where this transformers version cannot say. Read again only when the config object is replaced: every
    cached step checks its cache, and transformers builds per-layer configs to answer (about 0.25 ms at 32 layers)."""
    known = _HEAD_SHAPES.get(model)
    if known is not None and known[0] is model.config:
        return known[1]
    read = getattr(transformers_configs, "get_head_shapes", None)
    config = None
    try:
        config = model.config.get_text_config(decoder=True)
        shapes = read(config) if callable(read) else (None, None)
    except (AttributeError, TypeError, ValueError, ZeroDivisionError):
        shapes = (None, None)
    shapes = _cached_otherwise(config) or shapes
    _HEAD_SHAPES[model] = (model.config, shapes)
    return shapes


def _cached_otherwise(config: Any) -> tuple[int, int] | None:
    """(key heads, key size) where the attention caches other keys than transformers' get_head_shapes says (it reads
    num_key_value_heads and head_dim): multi-head latent attention (DeepSeek-V2/V3) caches its compressed latent as
    one head of kv_lora_rank, and a multi-query Falcon outside the new decoder architecture one key/value head (it
    has no num_key_value_heads); None where get_head_shapes holds."""
    latent = getattr(config, "kv_lora_rank", None)
    if isinstance(latent, int) and not isinstance(latent, bool):
        return 1, latent
    multi_query_falcon = (
        getattr(config, "model_type", None) == "falcon"
        and bool(getattr(config, "multi_query", False))
        and not getattr(config, "new_decoder_architecture", False)
    )
    if multi_query_falcon:
        return 1, config.hidden_size // config.num_attention_heads
    return None


def _of_layer(value: Any, index: int) -> int | None:
    """A per-model or per-layer value (_head_shapes) at layer `index`."""
    if isinstance(value, (list, tuple)):
        return int(value[index]) if index < len(value) else None
    return int(value) if isinstance(value, int) else None


def _filled_keys(cache: Cache) -> Iterator[torch.Tensor]:
    """The keys of each layer of `cache` that holds some, [rows, heads, tokens, head size]."""
    for layer in getattr(cache, "layers", ()):
        keys = getattr(layer, "keys", None)
        if isinstance(keys, torch.Tensor) and keys.dim() == 4 and keys.numel():
            yield keys


def _cache_rows(cache: Cache) -> int | None:
    """The batch size of a filled cache (an encoder-decoder's: of its decoder's self-attention), from its shapes."""
    keys = next(_filled_keys(getattr(cache, "self_attention_cache", cache)), None)
    return int(keys.shape[0]) if keys is not None else None
