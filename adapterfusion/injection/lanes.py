"""Inference lanes: what an active pre-norm site runs inside `inference_cache()`, prepared once per block.

A decode step of a decoder runs one token: each product is tiny, and what a site costs is its number of operators
and the Python around them (`AdapterSite.adapt_with` resolves names, configs and placement on every call; module
calls go through torch's hook machinery). Inside `inference_cache()` the weights cannot change and nothing needs a
gradient, so a site can decide all of that once: a lane holds the transposed weights as plain tensors and runs only
the operators of its case, the same ones in the same order as the general path, so the numbers are identical
(tests/decoders/test_lanes.py). Traced by torch.compile for CUDA, a decode step's few rows run lane_kernels.py
instead: one kernel an adapter site, the joint product and one kernel a fusion site (equal up to float32 rounding).

Lanes cover the cases decoders run, at PRE_NORM sites: one adapter, or an attention fusion (the paper's) whose query
is the adapters' input, without new LayerNorms around the adapters. Anything else (`build_lane` gives None) runs
the general path: per-example routing, parallel routes, recording fusion attentions, autocast, score dropout,
the reference implementation, ScaLearn, Houlsby's LayerNorm copies. Nothing in a lane depends on training mode.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from adapterfusion.adapters.bottleneck import BottleneckAdapter
from adapterfusion.fusion.layer import SUBNORMAL_WEIGHT, FusionLayer, flushes_subnormal_weights, fold_fusion
from adapterfusion.injection import lane_kernels

# lane(h, r) -> the site's output: h the sub-layer output, r the residual stream (None where the site does not need it).
Lane = Callable[[torch.Tensor, "torch.Tensor | None"], torch.Tensor]


def build_lane(
    adapters: Sequence[BottleneckAdapter], fusion: FusionLayer | None, norm: Callable[[torch.Tensor], torch.Tensor]
) -> Lane | None:
    """The lane of a PRE_NORM site running `adapters[0]` alone (fusion None) or `fusion` over `adapters` (the kept
    ones), `norm` what original_ln_before applies to h + r; None where the case is not one a lane covers."""
    if any(a.ln_before is not None or a.ln_after is not None or a.layer_norm is not None for a in adapters):
        return None
    config = adapters[0].config
    place = _placement(config.original_ln_before, config.residual_before_ln, norm)
    if fusion is None:
        return _adapter_lane(adapters[0], place)
    if type(fusion) is not FusionLayer or getattr(fusion.config, "kind", "attention") != "attention":
        return None
    settings = fusion.config
    # Score dropout acts in training mode even inside the cache's no_grad: the general path keeps it.
    if (
        settings.query_before_ln
        or settings.query_norm
        or settings.temperature
        or settings.residual_before
        or settings.score_dropout > 0
    ):
        return None
    sizes = {a.bottleneck_size for a in adapters}
    if len(sizes) != 1 or len({type(a.activation) for a in adapters}) != 1:
        return None
    folded = fold_fusion(fusion, adapters)
    if folded.joint is None:
        return None
    weight = folded.by_activation
    return _fusion_lane(
        folded.joint,
        weight,
        folded.by_probability,
        activation=adapters[0].activation,
        count=len(adapters),
        size=adapters[0].bottleneck_size,
        place=place,
        flush_below=SUBNORMAL_WEIGHT if flushes_subnormal_weights(weight) else None,
    )


Placement = Callable[[torch.Tensor, "torch.Tensor | None"], tuple[torch.Tensor, torch.Tensor]]


def _placement(
    ln_before: bool, residual_before_ln: bool | str, norm: Callable[[torch.Tensor], torch.Tensor]
) -> Placement:
    """(x, residual) from (h, r) as AdapterSite._placed_pre_norm gives them, decided once."""

    def place(h: torch.Tensor, r: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        if r is None:
            return h, h
        x = norm(h + r) if ln_before else h
        if residual_before_ln is True:
            return x, h
        return x, (h + r if residual_before_ln == "post_add" else x)

    if not ln_before and residual_before_ln is True:
        return lambda h, r: (h, h)  # Pfeiffer's placement at a pre-norm site: r plays no part
    return place


def _in_place(activation: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
    """`activation` as a plain function that may overwrite its input (a lane's products are its own tensors): the
    same numbers without a module call and a new tensor per site and token."""
    if type(activation) is nn.ReLU:
        return torch.relu_
    if type(activation) is nn.SiLU:
        return functools.partial(F.silu, inplace=True)
    if type(activation) is nn.Tanh:
        return torch.tanh_
    if type(activation) is nn.LeakyReLU:
        return functools.partial(F.leaky_relu_, negative_slope=activation.negative_slope)
    if type(activation) is nn.GELU:
        return functools.partial(F.gelu, approximate=activation.approximate)
    return activation


def _adapter_lane(adapter: BottleneckAdapter, place: Placement) -> Lane:
    """residual + scaling * (U act(D x + d) + u), as BottleneckAdapter.forward computes it."""
    down_weight, down_bias = adapter.down.weight, adapter.down.bias
    up_weight, up_bias = adapter.up.weight, adapter.up.bias
    activation, scaling = _in_place(adapter.activation), adapter.config.scaling
    kernel = lane_kernels.adapter_kernel(adapter)

    def lane(h: torch.Tensor, r: torch.Tensor | None) -> torch.Tensor:
        x, residual = place(h, r)
        if kernel is not None and lane_kernels.fits(x, residual):
            return kernel(x, residual)
        z = F.linear(activation(F.linear(x, down_weight, down_bias)), up_weight, up_bias)
        return (z.mul_(scaling) if scaling != 1.0 else z).add_(residual)

    return lane


def _fusion_lane(
    joint: tuple[torch.Tensor, torch.Tensor],
    by_activation: torch.Tensor,
    by_probability: torch.Tensor,
    activation: Callable[[torch.Tensor], torch.Tensor],
    count: int,
    size: int,
    place: Placement,
    flush_below: float | None,
) -> Lane:
    """fusion/layer.py `fuse_fast` on its one-matmul path (query = adapters' input, equal bottleneck sizes), at
    inference: the key-bias term is left out (the softmax cancels it) and no score dropout or temperature acts;
    softmax weights below `flush_below` become 0 (SUBNORMAL_WEIGHT).

    Eagerly, per adapter sums and spreads go through a 0/1 block matrix (`blocks`: column j sums adapter j's `size`
    units), so a decode step runs nine operators and no reshapes: scores = blocks-sum of activation * projected
    query + the value-side term, one addmm; the weights spread back over each adapter's units, one mm. Traced by
    torch.compile (a static cache on a GPU: CUDA graphs), operators cost nothing to dispatch but every kernel costs
    its launch, so the traced form (`_traced_fusion_step`) runs two matmuls and lets the compiler fuse the rest; on
    CUDA for a decode step's few rows, the joint product and one kernel of lane_kernels.py."""
    joint_weight, joint_bias = joint[0].t(), joint[1]
    total = count * size
    blocks = torch.block_diag(*[torch.ones(size, 1, dtype=by_activation.dtype)] * count).to(by_activation.device)
    spread = blocks.t().contiguous()
    both_outputs = torch.cat([by_activation, by_probability])  # [total + count, d]: the traced form's one product
    by_activation, by_probability = both_outputs[:total], both_outputs[total:]  # views of it: no second copy
    traced = functools.partial(
        _traced_fusion_step, activation=activation, outputs=both_outputs, count=count, flush_below=flush_below
    )
    kernel = lane_kernels.fusion_kernel(activation, count, size, both_outputs, flush_below)
    activation = _in_place(activation)
    widths = [total, total, count, joint_weight.shape[1] - 2 * total - count]

    def lane(h: torch.Tensor, r: torch.Tensor | None) -> torch.Tensor:
        x, residual = place(h, r)
        rows = x.reshape(-1, x.shape[-1])
        both = torch.addmm(joint_bias, rows, joint_weight)
        if torch.compiler.is_compiling():
            tail = kernel if kernel is not None and lane_kernels.fits(both, residual) else traced
            return tail(both, residual).view(residual.shape)
        # one split for the three column ranges (one operator, not one per slice); the key-bias column: cancelled
        pre, by_unit, value_term, _ = both.split(widths, dim=1)
        activations = activation(pre)
        scores = torch.addmm(value_term, activations * by_unit, blocks)
        probs = scores.softmax(dim=-1)
        if flush_below is not None:
            probs = torch.threshold(probs, flush_below, 0.0)
        out = torch.addmm(residual.reshape(rows.shape[0], -1), activations * torch.mm(probs, spread), by_activation)
        return out.addmm_(probs, by_probability).view(residual.shape)  # in place: out is this lane's own tensor

    return lane


def _traced_fusion_step(
    both: torch.Tensor,
    residual: torch.Tensor,
    activation: Callable[[torch.Tensor], torch.Tensor],
    outputs: torch.Tensor,
    count: int,
    flush_below: float | None,
) -> torch.Tensor:
    """The fusion lane from its joint product `both` on, in the form torch.compile turns into few kernels: sums over
    each adapter's units as a reduction over a reshape (not a block matmul), and the two output products as one
    over [weighted activations, probabilities] with `outputs` = [by_activation; by_probability]. Nothing in place:
    the compiler decides buffers. The eager lane's numbers up to the order of its sums."""
    rows = both.shape[0]
    total = outputs.shape[0] - count
    activations = activation(both[:, :total]).view(rows, count, -1)
    query = both[:, total : 2 * total].view(rows, count, -1)
    scores = (activations * query).sum(-1) + both[:, 2 * total : 2 * total + count]
    probs = scores.softmax(dim=-1)
    if flush_below is not None:
        probs = torch.threshold(probs, flush_below, 0.0)
    weighted = (activations * probs.unsqueeze(-1)).view(rows, total)
    return torch.addmm(residual.reshape(rows, -1), torch.cat([weighted, probs], dim=1), outputs)
