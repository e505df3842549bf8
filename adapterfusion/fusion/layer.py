"""AdapterFusion at one insertion site (Pfeiffer et al. 2021, §3.2), in two implementations.

With h the query (the sub-layer output), z_n the contribution of adapter n (its up-projection output) and
r the site's residual:
    s_n = softmax_n( (Q h)·(K z_n) / T )        z'_n = V z_n        o = sum_n s_n z'_n + r

`fuse_reference` computes this literally: N adapter outputs, N key and N value projections.
`fuse_fast` gives the same numbers without cost growing like N·d²:
  * all N down-projections run as one matmul into the concatenated bottleneck space (size M = sum of m_n);
  * z_n = U_n a_n + c_n is linear in the bottleneck activation a_n, so the score needs only
    (Qᵀ K b)·h for the M + N basis vectors b (columns of U and the biases c_n), plus (Qᵀ b_K)·h for K's
    bias b_K: the same for every adapter, so the softmax cancels it, except that score dropout acts on single
    scores first (without dropout it is added with weight 0, so b_K gets its true, zero, gradient);
  * V is linear and the s_n sum to one, so sum_n s_n V z_n = V sum_n s_n z_n, applied once, and again
    folded into the basis.
Nothing of shape [batch, seq, N, d] is ever built; per token the cost is about 3·M·d.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from adapterfusion.adapters.bottleneck import BottleneckAdapter
from adapterfusion.fusion.config import FusionConfig


class FusionLayer(nn.Module):
    """Q, K, V of one site. Q and K start random (std 0.02, as BERT's init); V at identity plus tiny noise
    so that fusion starts as a plain average of the adapters' outputs."""

    def __init__(self, hidden_size: int, config: FusionConfig) -> None:
        super().__init__()
        self.config = config
        self.hidden_size = hidden_size
        self.query = nn.Linear(hidden_size, hidden_size) if config.query else None
        self.key = nn.Linear(hidden_size, hidden_size) if config.key else None
        # z'_n = z_n^T V (§3.2): a plain matrix, no bias, as in the paper and AdapterHub.
        self.value = nn.Linear(hidden_size, hidden_size, bias=False) if config.value else None
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        for linear in (self.query, self.key):
            if linear is not None:
                nn.init.normal_(linear.weight, std=0.02)
                nn.init.zeros_(linear.bias)
        if self.value is not None:
            eye = torch.eye(self.hidden_size, dtype=self.value.weight.dtype)
            self.value.weight.copy_(eye + torch.randn_like(eye) * self.config.value_init_noise)

    def regularization(self) -> torch.Tensor:
        """weight * ||V - I||²_F: keeps V near identity (§3.2); part of the loss of the step it is computed in."""
        if self.value is None or not self.config.regularization:
            return self._zero()
        eye = torch.eye(self.hidden_size, device=self.value.weight.device, dtype=self.value.weight.dtype)
        return self.config.regularization_weight * (self.value.weight - eye).pow(2).sum()

    def _zero(self) -> torch.Tensor:
        first = next(self.parameters(), None)
        return torch.zeros((), device=first.device if first is not None else None)

    def extra_repr(self) -> str:
        parts = [name for name in ("query", "key", "value") if getattr(self.config, name)]
        return f"d={self.hidden_size}, learns={'+'.join(parts) or 'nothing'}"


def _normalise_scores(
    scores: torch.Tensor, temperature: float, keep: torch.Tensor | None, dropout: float, training: bool
) -> torch.Tensor:
    """Shared by both paths so that masking, dropout and temperature can never drift apart."""
    if dropout > 0:
        scores = F.dropout(scores, dropout, training)
    if temperature != 1.0:
        scores = scores / temperature
    if keep is not None:
        scores = scores.masked_fill(~keep, float("-inf"))
    return scores.softmax(dim=-1)


# Softmax weights below this are set to 0 by the fast path at inference on the CPU (float32, bfloat16; also in
# injection/lanes.py). A saturated fusion (scores tens apart, as the trained SmolLM2 fusions were) gives the other
# adapters weights of 1e-40 and less: subnormal numbers, which x86 multiplies tens to hundreds of times slower, and
# the products they scale stay subnormal into the next matmul (measured, 2 cores: the two products of a fusion over
# 12 adapters on 2048 tokens, 312 ms with such weights, 2 ms with them 0; a decoder's prefill 8 x 128 on SmolLM2,
# 1.24x bare with them, 1.13x without). A weight this small changes no output bit of float32 or bfloat16 (their
# epsilon is 1e-7 and 8e-3); float64 and float16 (whose subnormals start at 6e-5, a visible weight) keep theirs, and
# so does training, whose gradients the reference path must match.
SUBNORMAL_WEIGHT = 1e-30
_FLUSHED_DTYPES = (torch.float32, torch.bfloat16)


def flushes_subnormal_weights(tensor: torch.Tensor) -> bool:
    """Whether softmax weights of `tensor`'s device and dtype below SUBNORMAL_WEIGHT become 0 at inference."""
    return tensor.device.type == "cpu" and tensor.dtype in _FLUSHED_DTYPES


QUERY_NORM_EPS = 1e-6


def normalised_query(query: torch.Tensor) -> torch.Tensor:
    """`query` at unit root mean square over its last dimension (FusionConfig.query_norm), the same in both
    implementations: an RMSNorm without weights."""
    return query * torch.rsqrt(query.pow(2).mean(dim=-1, keepdim=True) + QUERY_NORM_EPS)


def fuse_reference(
    layer: FusionLayer,
    adapters: Sequence[BottleneckAdapter],
    x: torch.Tensor,
    query: torch.Tensor,
    residual: torch.Tensor,
    temperature: float = 1.0,
    keep: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The paper's equations, literally. Returns (output, attention probabilities [..., N])."""
    config = layer.config
    z = [adapter.delta(x) for adapter in adapters]
    q = layer.query(query) if layer.query is not None else query
    keys = [layer.key(z_n) if layer.key is not None else z_n for z_n in z]
    scores = torch.stack([(q * k_n).sum(dim=-1) for k_n in keys], dim=-1)
    probs = _normalise_scores(scores, temperature, keep, config.score_dropout, layer.training)
    values = [z_n + residual for z_n in z] if config.residual_before else z
    if layer.value is not None and config.value_before_softmax:
        values = [layer.value(v_n) for v_n in values]
    mixed = sum(probs[..., n : n + 1] * v_n for n, v_n in enumerate(values))
    assert isinstance(mixed, torch.Tensor)  # not sum()'s 0 for no terms: stacking the scores needed N >= 1
    if layer.value is not None and not config.value_before_softmax:
        mixed = layer.value(mixed)
    if not config.residual_before:
        mixed = mixed + residual
    return mixed, probs


class FoldedFusion(NamedTuple):
    """The weight products `fuse_fast` needs, which depend on the weights only, not on the tokens."""

    down: tuple[torch.Tensor, torch.Tensor, float | None] | None  # stacked (weight, bias, LN eps); None: per adapter
    score_weight: torch.Tensor  # [M + N (+ 1), d]: row j is Qᵀ K b_j for basis vector b_j; last: Qᵀ b_K
    score_bias: torch.Tensor | None
    # Row j of [M + N, d] is V b_j (or b_j without V), split into the rows of the activations [M, d] and of the
    # biases [N, d], the two accumulating matmuls of `fuse_fast`.
    by_activation: torch.Tensor
    by_probability: torch.Tensor
    # The stacked down-projections and the score projection as one [M + M + N (+ 1), d] matrix and its bias, for a
    # query that is the adapters' input (query_before_ln=False, no LayerNorm before the adapters): one matmul.
    joint: tuple[torch.Tensor, torch.Tensor] | None = None


def fold_fusion(layer: FusionLayer, adapters: Sequence[BottleneckAdapter]) -> FoldedFusion:
    """Precompute the folded weights. Costs about 3 (M + N) d² once per call; `AdaptedModel.inference_cache()`
    reuses the result across forwards while the weights cannot change."""
    # z-space basis: row j < M is column j of the stacked up-projections, row M + n is adapter n's bias,
    # so z_n = sum_j coef_j basis_j with coef = (a_n on n's segment, 1 on row M + n).
    basis = torch.cat(
        [
            torch.cat([a.up.weight * a.config.scaling for a in adapters], dim=1).t(),
            torch.stack([a.up.bias * a.config.scaling for a in adapters]),
        ],
        dim=0,
    )  # [M + N, d]
    score_weight, score_bias = basis, None
    if layer.key is not None:
        # K's bias b_K adds q·b_K to every score; the softmax alone would cancel it, but score dropout acts on
        # each score before the softmax, so it is kept as one more row (and b_K always gets a gradient).
        score_weight = torch.cat([score_weight @ layer.key.weight.t(), layer.key.bias[None]], dim=0)
    if layer.query is not None:
        score_bias = score_weight @ layer.query.bias
        score_weight = score_weight @ layer.query.weight
    out_weight = basis @ layer.value.weight.t() if layer.value is not None else basis
    down = _stacked_down(adapters)
    joint = None
    if down is not None and down[2] is None:
        bias = score_bias if score_bias is not None else score_weight.new_zeros(score_weight.shape[0])
        joint = (torch.cat([down[0], score_weight]), torch.cat([down[1], bias]))
    total = out_weight.shape[0] - len(adapters)
    return FoldedFusion(down, score_weight, score_bias, out_weight[:total], out_weight[total:], joint)


def fuse_fast(
    layer: FusionLayer,
    adapters: Sequence[BottleneckAdapter],
    x: torch.Tensor,
    query: torch.Tensor,
    residual: torch.Tensor,
    temperature: float = 1.0,
    keep: torch.Tensor | None = None,
    folded: FoldedFusion | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Same result as `fuse_reference`, computed in the concatenated bottleneck space."""
    config = layer.config
    folded = folded if folded is not None else fold_fusion(layer, adapters)
    sizes = [adapter.bottleneck_size for adapter in adapters]
    total, count = sum(sizes), len(sizes)
    # Tokens as rows of 2-D tensors from here: every product is one addmm, without the reshapes a 3-D F.linear adds
    # (at a decode step of one token the cost is the number of operations, not their size).
    rows = x.reshape(-1, x.shape[-1])

    # Column slices as one split each (one operator, not one per slice: on a GPU each costs the host microseconds).
    if folded.joint is not None and query is x:  # one matmul for the adapters' down-projections and the scores
        both = torch.addmm(folded.joint[1], rows, folded.joint[0].t())
        pre, by_unit, by_adapter, key_column = both.split([total, total, count, both.shape[1] - 2 * total - count], 1)
        activations = _activate(adapters, pre)  # [tokens, M]
    else:
        activations = _bottleneck_activations(adapters, rows, folded.down)
        projected = F.linear(query.reshape(-1, query.shape[-1]), folded.score_weight, folded.score_bias)
        by_unit, by_adapter, key_column = projected.split([total, count, projected.shape[1] - total - count], 1)
    scores = _segment_sum(activations * by_unit, sizes).add_(by_adapter)  # [tokens, N]
    score_dropout = layer.training and config.score_dropout > 0
    if layer.key is not None and (score_dropout or torch.is_grad_enabled()):  # the key-bias term, for every adapter
        key_term = key_column
        if not score_dropout:
            # Nothing acts on single scores, so the softmax cancels the term and its true gradient is zero (without
            # gradients it is left out: the softmax gives the same weights):
            # weight 0 gives key.bias exactly that (not rounding noise, which Adam would turn into drift).
            key_term = key_term * 0
        scores = scores + key_term
    probs = _normalise_scores(scores, temperature, keep, config.score_dropout, layer.training)
    if not torch.is_grad_enabled() and flushes_subnormal_weights(probs):
        probs = F.threshold(probs, SUBNORMAL_WEIGHT, 0.0)

    # o = sum_j coef_j (V b_j) + base, as two accumulating matmuls on the token rows: the weighted activations
    # against V U, then the softmax weights against V C. The residual enters as addmm's input, so neither the
    # coefficients [tokens, M + N] nor a separate sum over [tokens, d] is ever materialised.
    base = residual
    if config.residual_before and layer.value is not None:  # V(sum_n s_n (z_n + r)) = V sum_n s_n z_n + V r
        base = F.linear(residual, layer.value.weight)
    weighted = _segment_scale(activations, probs, sizes)
    # Under autocast addmm would cast the residual stream to bf16/fp16: then it is added outside, in its own dtype.
    separate = torch.is_autocast_enabled(base.device.type)
    if separate:
        out = weighted @ folded.by_activation
    else:
        out = torch.addmm(base.reshape(weighted.shape[0], -1), weighted, folded.by_activation)
    out = torch.addmm(out, probs, folded.by_probability).view(base.shape)
    return (base + out if separate else out), probs.view(*x.shape[:-1], count)


def mix_layer_norms_reference(norms: Sequence[nn.Module], probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """sum_n s_n LN_n(u), literally: how a fusion ends over adapters that each trained their own copy of the
    site's LayerNorm (Houlsby). One adapter (s = 1) ends exactly as it does alone; equal copies give LN(u)."""
    return sum(probs[..., n : n + 1] * norm(u) for n, norm in enumerate(norms))


def mix_layer_norms_fast(norms: Sequence[nn.Module], probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The same, normalising u once: LN_n(u) = γ_n ⊙ û + β_n is affine in (γ_n, β_n) and the s_n sum to one,
    so sum_n s_n LN_n(u) = (sum_n s_n γ_n) ⊙ û + sum_n s_n β_n."""
    affine = [
        norm for norm in norms if isinstance(norm, nn.LayerNorm) and norm.weight is not None and norm.bias is not None
    ]
    first = affine[0] if affine else None
    if (
        first is None
        or len(affine) < len(norms)
        or any(norm.eps != first.eps or norm.normalized_shape != first.normalized_shape for norm in affine)
    ):
        return mix_layer_norms_reference(norms, probs, u)  # another LayerNorm class or mixed eps: no shortcut
    normalised = F.layer_norm(u, first.normalized_shape, eps=first.eps)
    weight = probs @ torch.stack([norm.weight for norm in affine])
    bias = probs @ torch.stack([norm.bias for norm in affine])
    return normalised * weight + bias


class FusionImplementation(NamedTuple):
    """One way to compute a fusion, literal or fast: `fuse` mixes the adapters' outputs; `mix_layer_norms` ends
    the site when fused adapters carry their own LayerNorm copies (Houlsby)."""

    fuse: Callable[..., tuple[torch.Tensor, torch.Tensor]]
    mix_layer_norms: Callable[[Sequence[nn.Module], torch.Tensor, torch.Tensor], torch.Tensor]


# The fusion implementations by name (ActiveState.fusion_implementation): what a site runs for a fusion.
FUSION_IMPLEMENTATIONS: dict[str, FusionImplementation] = {
    "fast": FusionImplementation(fuse_fast, mix_layer_norms_fast),
    "reference": FusionImplementation(fuse_reference, mix_layer_norms_reference),
}


def _stacked_down(adapters: Sequence[BottleneckAdapter]) -> tuple[torch.Tensor, torch.Tensor, float | None] | None:
    """All down-projections as one [M, d] matrix. A new LayerNorm before an adapter is folded in:
    D(γ ⊙ x̂ + β) + e = (D diag γ) x̂ + (D β + e), with x̂ normalised once (eps returned). None when the
    adapters cannot share one input (some with a LayerNorm before, some without, or different eps)."""
    norms = [adapter.ln_before for adapter in adapters]
    if all(norm is None for norm in norms):
        return (
            torch.cat([a.down.weight for a in adapters], dim=0),
            torch.cat([a.down.bias for a in adapters], dim=0),
            None,
        )
    present = [norm for norm in norms if norm is not None]
    if len(present) < len(norms) or len({norm.eps for norm in present}) > 1:
        return None
    weight = torch.cat([a.down.weight * norm.weight for a, norm in zip(adapters, present, strict=True)], dim=0)
    bias = torch.cat(
        [a.down.bias + a.down.weight @ norm.bias for a, norm in zip(adapters, present, strict=True)], dim=0
    )
    return weight, bias, present[0].eps


def _bottleneck_activations(
    adapters: Sequence[BottleneckAdapter], x: torch.Tensor, down: tuple[torch.Tensor, torch.Tensor, float | None] | None
) -> torch.Tensor:
    """act(down(x)) of all adapters, [..., M]: one matmul when the down-projections are stacked."""
    if down is None:  # a rare mix: no shared input, so run each down-projection on its own
        pre = torch.cat(
            [adapter.down(adapter.ln_before(x) if adapter.ln_before is not None else x) for adapter in adapters], dim=-1
        )
    else:
        weight, bias, eps = down
        pre = F.linear(F.layer_norm(x, (x.shape[-1],), eps=eps) if eps is not None else x, weight, bias)
    return _activate(adapters, pre)


def _activate(adapters: Sequence[BottleneckAdapter], pre: torch.Tensor) -> torch.Tensor:
    """Each adapter's non-linearity on its segment of the stacked pre-activations [..., M]."""
    kinds = {type(adapter.activation) for adapter in adapters}
    if len(kinds) == 1:
        return adapters[0].activation(pre)
    pieces = pre.split([adapter.bottleneck_size for adapter in adapters], dim=-1)
    return torch.cat([adapter.activation(piece) for adapter, piece in zip(adapters, pieces, strict=True)], dim=-1)


def _segment_sum(values: torch.Tensor, sizes: Sequence[int]) -> torch.Tensor:
    """Sum each adapter's segment of the last dimension: [..., M] -> [..., N]."""
    if len(set(sizes)) == 1:
        return values.unflatten(-1, (len(sizes), sizes[0])).sum(dim=-1)
    return torch.stack([piece.sum(dim=-1) for piece in values.split(list(sizes), dim=-1)], dim=-1)


def _segment_scale(values: torch.Tensor, weights: torch.Tensor, sizes: Sequence[int]) -> torch.Tensor:
    """Multiply adapter n's segment of the last dimension by its weight: [..., M] x [..., N] -> [..., M]."""
    if len(set(sizes)) == 1:
        return (values.unflatten(-1, (len(sizes), sizes[0])) * weights.unsqueeze(-1)).flatten(-2)
    repeats = torch.tensor(list(sizes), device=weights.device)
    return values * weights.repeat_interleave(repeats, dim=-1)
