"""ScaLearn at one insertion site (Frohmann et al. 2023, "ScaLearn: Simple and Highly Parameter-Efficient Task
Transfer by Learning to Scale"), the second kind of fusion (FusionConfig kind='scalearn'), in two implementations.

With z_n the contribution of frozen source adapter n (its scaled up-projection output, as AdapterFusion mixes) and r
the site's residual, the site learns scales w_n and outputs
    o = sum_n w_n ⊙ z_n + r
w_n is a vector of d numbers (scale_shape='vector': ScaLearn, N·d parameters per site) or one number broadcast over
the d dimensions (scale_shape='scalar': ScaLearnUniform, N per site). Nothing normalises the scales: unlike
AdapterFusion's softmax they need not sum to one, nor stay positive. In training, dropout (scale_dropout) zeroes
single scales, as the authors' code does; a fusion mask drops adapter n by taking w_n = 0.

With share_layers=True (the paper's ScaLearn++ and ScaLearnUniform++) every site's layer holds the same Parameter:
one set of N·d (or N) scales for the whole model, as the authors' code shares one tensor across layers.

`scale_reference` computes the sum literally, one adapter at a time. `scale_fast` folds the scales into the stacked
up-projections, w_n ⊙ (U_n a_n + c_n) = (diag(w_n) U_n) a_n + w_n ⊙ c_n, so the whole site is one matmul into the
concatenated bottleneck space (size M = sum of m_n) and one back: the cost of a single adapter of size M.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from adapterfusion.adapters.bottleneck import BottleneckAdapter
from adapterfusion.errors import SerializationError
from adapterfusion.fusion.config import FusionConfig
from adapterfusion.fusion.layer import _bottleneck_activations, _stacked_down


class ScaLearnLayer(nn.Module):
    """The scales of one site, [N, d] (vector) or [N, 1] (scalar); each starts at scale_init / N plus normal noise of
    std scale_init_std (the authors' code: 2 / N and 0.001), so ScaLearn starts as twice the adapters' average.
    `shared`: the Parameter of another site's layer to use instead of new scales (share_layers=True)."""

    def __init__(
        self, hidden_size: int, num_adapters: int, config: FusionConfig, shared: nn.Parameter | None = None
    ) -> None:
        super().__init__()
        self.config = config
        self.hidden_size = hidden_size
        self.num_adapters = num_adapters
        if config.share_layers:  # the first site's layer too: assign=True is refused before anything is assigned
            self.register_load_state_dict_pre_hook(functools.partial(_same_as_shared, first=shared is None))
        if shared is not None:
            self.scales = shared
            self.register_state_dict_post_hook(_own_copy)
            return
        width = hidden_size if config.scale_shape == "vector" else 1
        self.scales = nn.Parameter(torch.empty(num_adapters, width))
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        nn.init.normal_(self.scales, mean=self.config.scale_init / self.num_adapters, std=self.config.scale_init_std)

    def extra_repr(self) -> str:
        shared = ", shared by all layers" if self.config.share_layers else ""
        return f"d={self.hidden_size}, adapters={self.num_adapters}, scales={self.config.scale_shape}{shared}"


def _own_copy(module: nn.Module, state: dict[str, Any], prefix: str, metadata: Any) -> None:
    """A state dict holds its own copy of shared scales: every site's entry would otherwise be one storage, which
    safetensors refuses to write (each site's copy is saved; loading puts them back into one Parameter)."""
    key = prefix + "scales"
    if key in state and not isinstance(state[key], nn.Parameter):  # keep_vars=True asks for the Parameter itself
        state[key] = state[key].clone()


def _same_as_shared(
    module: nn.Module, state: dict[str, Any], prefix: str, metadata: Any, *args: Any, first: bool
) -> None:
    """Shared scales load into one Parameter at the `first` site's layer; a later site's copy must be that same
    value. Copies that differ (a fusion saved with share_layers=False whose config was edited to True, or copies
    edited apart) were loaded one over the other, leaving the last layer's scales at every layer without a word."""
    incoming, scales = state.get(prefix + "scales"), cast(ScaLearnLayer, module).scales
    if not isinstance(incoming, torch.Tensor) or incoming.shape != scales.shape:
        return  # missing or of another shape: the loader's own checks name it
    if isinstance(metadata, dict) and metadata.get("assign_to_params_buffers"):
        raise SerializationError(
            f"load_state_dict(assign=True) puts each layer's own tensor in place of the ScaLearn scales that all "
            f"layers share (share_layers=True, {prefix.rstrip('.') or 'fusion layer'}): they would no longer be "
            "shared, and each layer would train its own; load without assign=True"
        )
    if first:
        return
    if torch.equal(incoming.detach().to(scales.device, scales.dtype), scales.detach()):
        return
    where = f"at {prefix.rstrip('.')}" if prefix else "of a later layer"
    raise SerializationError(
        f"the ScaLearn scales {where} differ from those loaded at the first layer, but "
        "the fusion's config shares one set of scales across all layers (share_layers=True): loading them would keep "
        "only the last layer's. They were saved per layer (share_layers=False) or edited; load them with the config "
        "they were saved with, or save the fusion again"
    )


def effective_scales(layer: ScaLearnLayer, keep: torch.Tensor | None = None) -> torch.Tensor:
    """The scales this forward uses, [N, d or 1]: dropout in training, then the rows a mask drops set to zero. Both
    implementations take their scales from here, so they cannot drift apart."""
    scales = F.dropout(layer.scales, layer.config.scale_dropout, layer.training)
    if keep is not None:
        scales = scales * keep.to(scales.dtype)[:, None]
    return scales


def scale_weights(scales: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """What `output_fusion_attentions` reports for ScaLearn: per token [..., N] the mean of each adapter's scales over
    the d dimensions (for scale_shape='scalar', the scale itself). The same for every token, as the scales are."""
    return scales.mean(dim=-1).expand(*x.shape[:-1], scales.shape[0])


def scale_reference(
    layer: ScaLearnLayer,
    adapters: Sequence[BottleneckAdapter],
    x: torch.Tensor,
    residual: torch.Tensor,
    keep: torch.Tensor | None = None,
    kept: tuple[int, ...] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """o = sum_n w_n ⊙ z_n + r, literally, over all N adapters (a masked one with w_n = 0; `kept` is the fast
    path's shortcut and is not needed here). Returns (output, scale_weights [..., N])."""
    scales = effective_scales(layer, keep)
    out = residual
    for n, adapter in enumerate(adapters):
        out = out + scales[n] * adapter.delta(x)
    return out, scale_weights(scales, x)


def scale_fast(
    layer: ScaLearnLayer,
    adapters: Sequence[BottleneckAdapter],
    x: torch.Tensor,
    residual: torch.Tensor,
    keep: torch.Tensor | None = None,
    kept: tuple[int, ...] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same output as `scale_reference`: one matmul down through all (kept) adapters, one matmul up through the
    scale-folded up-projections. A mask's adapters are left out when `kept` lists the others."""
    scales = effective_scales(layer, keep)
    weights = scale_weights(scales, x)
    run = list(range(len(adapters))) if kept is None else list(kept)
    chosen = [adapters[n] for n in run]
    rows = x.reshape(-1, x.shape[-1])
    activations = _bottleneck_activations(chosen, rows, _stacked_down(chosen))  # [tokens, M]
    # (scaling U_n) with row i of the output times w_n[i]: [d, m_n] * [d, 1]; the biases likewise.
    up = torch.cat([adapters[n].up.weight * (adapters[n].config.scaling * scales[n][:, None]) for n in run], dim=1)
    bias = torch.stack([adapters[n].up.bias * (adapters[n].config.scaling * scales[n]) for n in run]).sum(dim=0)
    out = F.linear(activations, up, bias).view(residual.shape)
    return out + residual, weights


# The ScaLearn implementations by name, as FUSION_IMPLEMENTATIONS (fusion/layer.py) for attention fusions.
ScaLearnImplementation = Callable[..., tuple[torch.Tensor, torch.Tensor]]
SCALEARN_IMPLEMENTATIONS: dict[str, ScaLearnImplementation] = {"fast": scale_fast, "reference": scale_reference}
