"""Torch's dtype mismatches in an adapted model's forward, generate and forward_parallel, explained: torch names two
matrices, where the cause is a piece or part of the encoder cast by hand, or autocast asking for the other half
precision. The wrapper costs nothing until torch fails."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

import torch
from torch import nn

from adapterfusion import trainable
from adapterfusion.errors import ConfigError

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel

_Call = TypeVar("_Call", bound=Callable[..., Any])


def explains_dtype_errors(forward: _Call) -> _Call:
    """`forward` (or generate, forward_parallel) turning torch's dtype mismatch into the library's error where a
    piece was cast by hand to another dtype than the encoder's (`model.get_head(name).to(torch.bfloat16)`), part of
    the encoder was, or autocast asks for the other half precision: torch names two matrices, not the cause.
    Costs nothing until torch fails."""

    @functools.wraps(forward)
    def checked(self: AdaptedModel, *args: Any, **kwargs: Any) -> Any:
        try:
            return forward(self, *args, **kwargs)
        except RuntimeError as err:
            if "dtype" in str(err):
                _explain_mixed_encoder(self, err)
            odd = trainable.pieces_of_other_dtype(self) if "dtype" in str(err) else {}
            if not odd:
                _explain_autocast(self, err)
                raise
            listed = ", ".join(f"{piece} ({dtype})" for piece, dtype in odd.items())
            dtype = self.dtype
            raise ConfigError(
                f"{listed} {'holds' if len(odd) == 1 else 'hold'} weights of another dtype than the encoder's "
                f"{dtype}, so the forward mixes dtypes; cast the whole model instead (model.to({dtype}) puts every "
                "piece in the encoder's dtype, model.to(dtype) moves all of them together)"
            ) from err

    return cast(_Call, checked)


def _explain_mixed_encoder(model: AdaptedModel, err: RuntimeError) -> None:
    """torch's dtype mismatch where the encoder's own weights were cast in part (`model.model.encoder.half()`): the
    pieces built beside its layers took their dtypes, so naming a piece would blame the wrong thing. Models that
    transformers keeps partly in float32 on purpose (`_keep_in_fp32_modules`) are left to the other explanations."""
    found = trainable.encoder_dtypes(model)
    if len(found) < 2 or getattr(model.model, "_keep_in_fp32_modules", None):
        return
    listed = ", ".join(f"{dtype} ({name!r}, ...)" for dtype, name in found.items())
    raise ConfigError(
        f"the encoder's own weights are of several dtypes: {listed}, so the forward mixes dtypes; cast the whole "
        f"model to one (model.to({model.dtype}) casts every weight and piece, model.to(dtype) any other)"
    ) from err


def _explain_autocast(model: AdaptedModel, err: RuntimeError) -> None:
    """torch's dtype mismatch where autocast asks for the other half precision than a half-precision model's weights
    (bfloat16 weights under autocast(dtype=torch.float16)): autocast casts what goes into matmuls, not into
    LayerNorm, which then meets activations of one dtype and weights of the other ('mixed dtype (CPU)')."""
    weight = cast(nn.Embedding, cast(Any, model.model).get_input_embeddings()).weight
    kind, dtype = weight.device.type, weight.dtype
    if "dtype" not in str(err) or dtype not in (torch.float16, torch.bfloat16) or not torch.is_autocast_enabled(kind):
        return
    wanted = torch.get_autocast_dtype(kind)
    if wanted != dtype:
        raise ConfigError(
            f"torch.autocast(dtype={wanted}) around a model whose weights are {dtype}: autocast casts what goes into "
            f"matmuls, not into LayerNorm, which then mixes {wanted} activations with {dtype} weights; autocast a "
            f"float32 model (model.to(torch.float32)), or leave autocast out (the weights are {dtype} already)"
        ) from err
