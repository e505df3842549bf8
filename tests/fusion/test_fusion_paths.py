"""The fast fusion path against the literal reference: same outputs and gradients. Both compute the same equation,
so they are compared in float64 with the tight row of tests/tolerances.py."""

from __future__ import annotations

import copy

import pytest
import torch

from adapterfusion.adapters import AdapterConfig, BottleneckAdapter
from adapterfusion.fusion import FusionConfig, FusionLayer, fuse_fast, fuse_reference
from tolerances import assert_close

D = 24


def _randomise(module: torch.nn.Module, std: float = 0.2) -> None:
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(torch.randn_like(parameter) * std)


def _adapters(specs: list[tuple[int, str, bool]]) -> list[BottleneckAdapter]:
    adapters = []
    for size, activation, ln_before in specs:
        config = AdapterConfig(non_linearity=activation, ln_before=ln_before, scaling=0.7 if ln_before else 1.0)
        adapter = BottleneckAdapter(D, size, config).double()
        _randomise(adapter)
        adapters.append(adapter)
    return adapters


ADAPTER_SETS = {
    "equal-relu": [(6, "relu", False)] * 4,
    "mixed-sizes-acts": [(8, "relu", False), (3, "swish", False), (12, "gelu", False)],
    "ln-before": [(6, "leaky_relu", True), (6, "leaky_relu", True)],
    "mixed-ln": [(6, "relu", True), (4, "relu", False)],
    "single": [(5, "tanh", False)],
}
FUSION_CONFIGS = {
    "dynamic": FusionConfig.dynamic(),
    "static": FusionConfig.static(),
    "residual-before": FusionConfig.dynamic(residual_before=True),
    "value-after-softmax": FusionConfig.dynamic(value_before_softmax=False),
    "no-query": FusionConfig(query=False),
    "no-key": FusionConfig(key=False),
    "no-query-no-key": FusionConfig(query=False, key=False),
}


def _run_both(adapter_set: str, fusion_config: FusionConfig, temperature: float = 1.0, keep=None):
    torch.manual_seed(0)
    adapters = _adapters(ADAPTER_SETS[adapter_set])
    layer = FusionLayer(D, fusion_config).double()
    _randomise(layer)
    x = torch.randn(3, 7, D, dtype=torch.float64, requires_grad=True)
    query = torch.randn(3, 7, D, dtype=torch.float64, requires_grad=True)
    residual = torch.randn(3, 7, D, dtype=torch.float64, requires_grad=True)
    results = []
    for fuse in (fuse_reference, fuse_fast):
        modules = [copy.deepcopy(a) for a in adapters] + [copy.deepcopy(layer)]
        inputs = [t.detach().clone().requires_grad_() for t in (x, query, residual)]
        out, probs = fuse(modules[-1], modules[:-1], *inputs, temperature=temperature, keep=keep)
        weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
        (out * weights).sum().backward()
        grads = [t.grad for t in inputs] + [p.grad for m in modules for p in m.parameters()]
        results.append((out, probs, grads))
    return results


@pytest.mark.parametrize("adapter_set", ADAPTER_SETS)
@pytest.mark.parametrize("fusion_name", FUSION_CONFIGS)
def test_fast_path_matches_reference_outputs_and_gradients(adapter_set: str, fusion_name: str) -> None:
    (ref_out, ref_probs, ref_grads), (fast_out, fast_probs, fast_grads) = _run_both(
        adapter_set, FUSION_CONFIGS[fusion_name]
    )
    assert_close(fast_out, ref_out)
    assert_close(fast_probs, ref_probs)
    assert len(ref_grads) == len(fast_grads)
    largest = max(g.abs().max() for g in ref_grads if g is not None)
    for ref_grad, fast_grad in zip(ref_grads, fast_grads, strict=True):
        if ref_grad.abs().max().item() <= 1e-5 * largest:
            # The key bias adds one constant to every score, which the softmax cancels: its true gradient is
            # zero (no dropout here): the reference shows rounding noise, the fast path exactly zero.
            assert_close(ref_grad / largest, torch.zeros_like(ref_grad))
            assert_close(fast_grad / largest, torch.zeros_like(fast_grad))
        else:
            assert_close(fast_grad, ref_grad)


def test_temperature_and_mask_agree_between_paths() -> None:
    keep = torch.tensor([True, False, True, True])
    (ref_out, ref_probs, _), (fast_out, fast_probs, _) = _run_both("equal-relu", FusionConfig.dynamic(), 3.0, keep)
    assert_close(fast_out, ref_out)
    assert torch.all(ref_probs[..., 1] == 0) and torch.all(fast_probs[..., 1] == 0)
    assert_close(fast_probs.sum(-1), torch.ones(3, 7, dtype=torch.float64))


def test_reference_is_the_papers_equation() -> None:
    """An independent, scalar-loop computation of Pfeiffer et al. §3.2 for one token."""
    torch.manual_seed(3)
    adapters = _adapters([(4, "relu", False), (4, "relu", False), (4, "relu", False)])
    layer = FusionLayer(D, FusionConfig.dynamic()).double()
    _randomise(layer)
    x, query, residual = (torch.randn(D, dtype=torch.float64) for _ in range(3))
    out, probs = fuse_reference(layer, adapters, x, query, residual)
    with torch.no_grad():
        z = [a.up.weight @ torch.relu(a.down.weight @ x + a.down.bias) + a.up.bias for a in adapters]
        q = layer.query.weight @ query + layer.query.bias
        scores = torch.tensor([float(q @ (layer.key.weight @ z_n + layer.key.bias)) for z_n in z], dtype=torch.float64)
        s = torch.exp(scores - scores.max()) / torch.exp(scores - scores.max()).sum()
        expected = sum(s[n] * (layer.value.weight @ z[n]) for n in range(3)) + residual
    assert_close(probs, s)
    assert_close(out, expected)


def test_padding_positions_do_not_change_real_tokens() -> None:
    """Fusion is per token: what padding holds never leaks into other positions (both paths)."""
    torch.manual_seed(4)
    adapters = _adapters(ADAPTER_SETS["equal-relu"])
    layer = FusionLayer(D, FusionConfig.dynamic()).double()
    _randomise(layer)
    x = torch.randn(2, 5, D, dtype=torch.float64)
    padded = x.clone()
    padded[:, 3:] = torch.randn(2, 2, D, dtype=torch.float64) * 100
    for fuse in (fuse_reference, fuse_fast):
        clean, _ = fuse(layer, adapters, x, x, x)
        noisy, _ = fuse(layer, adapters, padded, padded, padded)
        torch.testing.assert_close(noisy[:, :3], clean[:, :3], rtol=0, atol=0)


def test_autocast_keeps_the_residual_stream_in_its_own_dtype() -> None:
    """Under bf16 autocast the fast path adds the residual outside its matmuls: a residual of about 1000 would lose
    up to 4 to bf16 rounding (8-bit mantissa), while the adapters' mix, of order 1, may only lose ~1e-2."""
    torch.manual_seed(5)
    adapters = [adapter.float() for adapter in _adapters(ADAPTER_SETS["equal-relu"])]
    layer = FusionLayer(D, FusionConfig.dynamic())
    x = torch.randn(2, 5, D)
    residual = 1000 + torch.randn(2, 5, D)
    expected, _ = fuse_fast(layer, adapters, x, x, residual)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, _ = fuse_fast(layer, adapters, x, x, residual)
    assert out.dtype == torch.float32
    assert (out - expected).abs().max().item() < 0.25


def test_value_starts_near_identity() -> None:
    layer = FusionLayer(D, FusionConfig.dynamic()).double()
    deviation = layer.value.weight - torch.eye(D, dtype=torch.float64)
    assert 0 < deviation.abs().max().item() < 1e-4  # the init noise's scale, not a rounding bound
    assert_close(layer.regularization(), 0.01 * deviation.pow(2).sum())
