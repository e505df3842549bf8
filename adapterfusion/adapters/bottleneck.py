"""The bottleneck adapter module: down-projection, non-linearity, up-projection, internal skip.

`delta(x)` is the up-projection output z (what AdapterFusion mixes); `combine(z, residual)` adds the skip
connection and the optional new LayerNorm after it. The site that holds the adapter supplies x and the
residual (see injection/site.py), because where they come from is a property of the placement.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from adapterfusion.adapters.activations import make_activation
from adapterfusion.adapters.config import AdapterConfig


class BottleneckAdapter(nn.Module):
    """d -> m -> d with near-identity initialisation (Houlsby §2.1): 2md + d + m parameters."""

    def __init__(
        self,
        hidden_size: int,
        bottleneck_size: int,
        config: AdapterConfig,
        pretrained_layer_norm: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        self.hidden_size = hidden_size
        self.bottleneck_size = bottleneck_size
        self.ln_before = nn.LayerNorm(hidden_size) if config.ln_before else None
        self.down = nn.Linear(hidden_size, bottleneck_size)
        self.activation = make_activation(config.non_linearity)
        self.up = nn.Linear(bottleneck_size, hidden_size)
        self.ln_after = nn.LayerNorm(hidden_size) if config.ln_after else None
        # Houlsby trains the layer norms per task: a private copy keeps the shared encoder untouched.
        self.layer_norm = (
            copy.deepcopy(pretrained_layer_norm)
            if config.train_layer_norm and pretrained_layer_norm is not None
            else None
        )
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Near-identity: small weights and zero biases make delta(x) ~ 0, so the adapted encoder starts
        where the pretrained one is (Houlsby §3.6: too large an init fails to train)."""
        std = self.config.init_std
        if self.config.init == "houlsby":
            for linear in (self.down, self.up):
                nn.init.trunc_normal_(linear.weight, std=std, a=-2 * std, b=2 * std)
        elif self.config.init == "bert":
            for linear in (self.down, self.up):
                nn.init.normal_(linear.weight, std=0.02)
        else:  # zero_up: exact identity at start
            nn.init.kaiming_uniform_(self.down.weight, a=5**0.5)
            nn.init.zeros_(self.up.weight)
        nn.init.zeros_(self.down.bias)
        nn.init.zeros_(self.up.bias)

    def delta(self, x: torch.Tensor) -> torch.Tensor:
        """The bottleneck's contribution z = scaling * up(act(down(x))), before any skip connection."""
        if self.ln_before is not None:
            x = self.ln_before(x)
        z = self.up(self.activation(self.down(x)))
        return z * self.config.scaling if self.config.scaling != 1.0 else z

    def combine(self, z: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """Skip connection and optional new LayerNorm, in the order the config says (`skip_first`)."""
        if not self.config.skip_first:
            out = self.ln_after(z) if self.ln_after is not None else z
            return out + residual
        out = z + residual
        return self.ln_after(out) if self.ln_after is not None else out

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.combine(self.delta(x), residual)

    def extra_repr(self) -> str:
        return f"d={self.hidden_size}, m={self.bottleneck_size}, act={self.config.non_linearity}"


def run_each_reference(adapters: Sequence[BottleneckAdapter], x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """Adapter n on slice n, literally: x, residual [N, ..., d] -> [N, ..., d]."""
    return torch.stack([adapter(x[n], residual[n]) for n, adapter in enumerate(adapters)])


def run_each(adapters: Sequence[BottleneckAdapter], x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """The same as `run_each_reference` with one batched matmul per projection over the stacked weights, so N
    adapters on their own inputs cost one call each way instead of N. Adapters that differ in bottleneck size or
    non-linearity (a rare mix) run one by one."""
    sizes = {adapter.bottleneck_size for adapter in adapters}
    if len(sizes) > 1 or len({type(adapter.activation) for adapter in adapters}) > 1:
        return run_each_reference(adapters, x, residual)
    flat = x.flatten(1, -2)  # [N, tokens, d]
    if any(adapter.ln_before is not None for adapter in adapters):
        flat = layer_norm_each([adapter.ln_before or nn.Identity() for adapter in adapters], flat)
    down_weight = torch.stack([adapter.down.weight for adapter in adapters])  # [N, m, d]
    down_bias = torch.stack([adapter.down.bias for adapter in adapters])
    hidden = adapters[0].activation(torch.baddbmm(down_bias[:, None], flat, down_weight.transpose(1, 2)))
    # scaling * (U a + c) = (scaling U) a + scaling c
    up_weight = torch.stack([adapter.up.weight * adapter.config.scaling for adapter in adapters])  # [N, d, m]
    up_bias = torch.stack([adapter.up.bias * adapter.config.scaling for adapter in adapters])
    z = torch.baddbmm(up_bias[:, None], hidden, up_weight.transpose(1, 2)).view_as(x)
    if all(adapter.ln_after is None for adapter in adapters):
        return z + residual
    return torch.stack([adapter.combine(z[n], residual[n]) for n, adapter in enumerate(adapters)])


def layer_norm_each(norms: Sequence[nn.Module], u: torch.Tensor) -> torch.Tensor:
    """norms[n](u[n]) for u [N, ..., d]: one normalisation and a stacked affine when all are affine LayerNorms of
    one shape and eps (Houlsby's per-adapter copies), else one module per slice."""
    first = norms[0]
    if all(norm is first for norm in norms):
        return first(u)
    affine = [
        norm for norm in norms if isinstance(norm, nn.LayerNorm) and norm.elementwise_affine and norm.bias is not None
    ]
    if len(affine) < len(norms) or any(
        norm.eps != affine[0].eps or norm.normalized_shape != affine[0].normalized_shape for norm in affine
    ):
        return torch.stack([norm(u[n]) for n, norm in enumerate(norms)])
    shape = (len(norms),) + (1,) * (u.dim() - 2) + (u.shape[-1],)
    weight = torch.stack([norm.weight for norm in affine]).view(shape)
    bias = torch.stack([norm.bias for norm in affine]).view(shape)
    return F.layer_norm(u, affine[0].normalized_shape, eps=affine[0].eps) * weight + bias
