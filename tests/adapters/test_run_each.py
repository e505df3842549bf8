"""run_each (adapter n on slice n, one batched matmul per projection) against its literal loop, in float64."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import adapterfusion as af
from adapterfusion.adapters.bottleneck import layer_norm_each, run_each, run_each_reference
from tiny_models import randomise
from tolerances import assert_close

D = 16

CASES = {
    "same shape": [af.AdapterConfig.pfeiffer(reduction_factor=4)] * 3,
    "scaling, new LayerNorms": [
        af.AdapterConfig.pfeiffer(reduction_factor=4, ln_before=True, scaling=0.5),
        af.AdapterConfig.pfeiffer(reduction_factor=4, ln_after=True),
        af.AdapterConfig.pfeiffer(reduction_factor=4, ln_after=True, skip_before_ln_after=False),
    ],
    "sizes and activations differ": [
        af.AdapterConfig.pfeiffer(reduction_factor=4),
        af.AdapterConfig.pfeiffer(reduction_factor=2, non_linearity="gelu"),
    ],
}


@pytest.mark.parametrize("case", CASES)
def test_run_each_equals_each_adapter_on_its_slice(case: str) -> None:
    adapters = [af.BottleneckAdapter(D, config.bottleneck_size(D, 0), config).double() for config in CASES[case]]
    randomise(nn.ModuleList(adapters), std=0.3)
    x = torch.randn(len(adapters), 3, 5, D, dtype=torch.float64)
    residual = torch.randn_like(x)
    expected = torch.stack([adapter(x[n], residual[n]) for n, adapter in enumerate(adapters)])
    assert_close(run_each_reference(adapters, x, residual), expected)
    assert_close(run_each(adapters, x, residual), expected)


def test_layer_norm_each_uses_each_slices_own_norm() -> None:
    norms = [nn.LayerNorm(D).double() for _ in range(3)]
    randomise(nn.ModuleList(norms))
    u = torch.randn(3, 2, 4, D, dtype=torch.float64)
    expected = torch.stack([norm(u[n]) for n, norm in enumerate(norms)])
    assert_close(layer_norm_each(norms, u), expected)
    assert_close(layer_norm_each([norms[0]] * 3, u), norms[0](u))
    assert_close(
        layer_norm_each([norms[0], nn.Identity(), norms[2]], u), torch.stack([norms[0](u[0]), u[1], norms[2](u[2])])
    )
