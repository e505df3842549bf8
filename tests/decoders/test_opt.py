"""OPT (issue #23's "models people use"; PEFT's examples' model): its block runs the feed-forward on the batch
flattened to [B*T, d] with no module of its own, so the site wraps fc2 and views the rows back as examples and
tokens (`SiteSpec.rows_from`). Pre-norm (OPT-125m, 1.3b and larger) and post-norm (OPT-350m) configs have a row each.
Checked here: the feed-forward site by hand from the bare sub-modules, fusion's fast path against its reference and
fusion attentions of [B, T, N], per-example routing, and cached against uncached generation (test_decoder_sites.py's
tests, whose hand computations read a feed-forward module OPT lacks)."""

from __future__ import annotations

import pytest
import torch
from test_decoder_sites import _fused
from test_decoder_sites import (  # under other names, so that pytest does not collect them here as well
    test_fusion_fast_path_equals_the_literal_reference_on_decoders as _fast_path_equals_reference,
)
from test_decoder_sites import (
    test_greedy_generation_with_the_cache_equals_generation_without_it as _cached_generation_equals_uncached,
)

import adapterfusion as af
from tiny_decoders import randomise_pieces, tiny_decoder, tiny_decoder_inputs
from tolerances import assert_close

OPT_ROWS = ("opt", "opt_post_norm")


def _bottleneck(adapter: torch.nn.Module, value: torch.Tensor) -> torch.Tensor:
    down, up = adapter.down, adapter.up
    return torch.relu(value @ down.weight.T + down.bias) @ up.weight.T + up.bias


@pytest.mark.parametrize("name", OPT_ROWS)
def test_pfeiffer_at_the_last_feed_forward_by_hand(name: str) -> None:
    """Pre-norm: out = r + x + A(x + r), r the input of final_layer_norm; post-norm (as BART):
    out = LN(r + x + A(LN(x + r))), r the input of fc1; x = fc2's output. Both flat, [B*T, d], in the block."""
    model = af.wrap(tiny_decoder(name, dtype=torch.float64))
    inputs = tiny_decoder_inputs(name)
    model.add_adapter("a", af.AdapterConfig.pfeiffer(4, leave_out=[0]))
    randomise_pieces(model, seed=3)
    layer = model.model.base_model.decoder.layers[-1]
    pre_norm = model.model.config.do_layer_norm_before
    r_module = layer.final_layer_norm if pre_norm else layer.fc1
    seen: dict[str, torch.Tensor] = {}
    hooks = [
        r_module.register_forward_pre_hook(lambda m, args: seen.__setitem__("r", args[0])),
        layer.fc2.register_forward_hook(lambda m, args, out: seen.__setitem__("x", out.clone())),
        layer.register_forward_hook(lambda m, args, out: seen.__setitem__("out", out)),
    ]
    with torch.no_grad():
        model(**inputs)
        r, x = seen["r"], seen["x"]
        assert r.dim() == x.dim() == 2  # the rows the block flattened
        adapter = model.sites_with_adapter("a")[0].adapters["a"]
        norm = layer.final_layer_norm
        expected = r + x + _bottleneck(adapter, x + r) if pre_norm else norm(r + x + _bottleneck(adapter, norm(x + r)))
        model.activate(adapter="a")
        model(**inputs)
    for hook in hooks:
        hook.remove()
    assert_close(seen["out"], expected.view(seen["out"].shape), dtype=torch.float64)
    assert (seen["out"].flatten(0, 1) - (r + x if pre_norm else norm(r + x))).abs().max() > 1e-3


# Houlsby's preset trains LayerNorm copies, which a post-norm block (its own LayerNorm after the sub-layer, as BART's)
# has no place for: the site refuses them there.
@pytest.mark.parametrize(("name", "adapter"), [("opt", "pfeiffer"), ("opt", "houlsby"), ("opt_post_norm", "pfeiffer")])
def test_fusion_fast_path_equals_the_literal_reference(name: str, adapter: str) -> None:
    """Fusion attentions come back per example and token, [B, T, N], at the flattened site too."""
    _fast_path_equals_reference(name, adapter)
    inputs = tiny_decoder_inputs(name)
    with torch.no_grad():
        weights = _fused(name, adapter)(**inputs, output_fusion_attentions=True).fusion_attentions_by_site
    assert {tuple(w.shape) for w in weights.values()} == {(*inputs["input_ids"].shape, 3)}


@pytest.mark.parametrize("name", OPT_ROWS)
def test_greedy_generation_with_the_cache_equals_generation_without_it(name: str) -> None:
    _cached_generation_equals_uncached(name)


@pytest.mark.parametrize("name", OPT_ROWS)
def test_routed_rows_equal_each_row_alone(name: str) -> None:
    """adapter_names per row at a site whose rows the block flattened: each row as run alone with its choice."""
    model = af.wrap(tiny_decoder(name, dtype=torch.float64))
    for adapter in ("a", "b"):
        model.add_adapter(adapter, af.AdapterConfig.pfeiffer(4))
    model.add_fusion("f", ["a", "b"])
    randomise_pieces(model, seed=4)
    ids = tiny_decoder_inputs(name, batch=3)["input_ids"]
    choices = ["a", "f", None]
    with torch.no_grad():
        routed = model(input_ids=ids, adapter_names=choices).logits
        for row, choice in enumerate(choices):
            model.activate(**({} if choice is None else {"fusion" if choice == "f" else "adapter": choice}))
            alone = model(input_ids=ids[row : row + 1]).logits[0]
            assert_close(routed[row], alone, dtype=torch.float64, label=f"row {row} ({choice})")
