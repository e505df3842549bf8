"""Adapters and fusion on the encoder-decoders of EXTRA_SEQ2SEQ_CONFIGS (mT5, mBART, Marian, Pegasus, PLBART,
M2M-100), whose tiny models stay out of the tables the other decoder tests run over. mT5, mBART, Pegasus and M2M-100
are pre-norm throughout (mBART, Pegasus and M2M-100, unlike BART, normalise in front of each sub-layer); Marian and
PLBART have BART's post-norm layers. Each site is
checked in float64 against a hand computation from the bare sub-modules: hooks take the residual stream r, the
sub-layer's output x, and where the block has added the two; the adapted model must carry r + x + A(N(x + r)) for
Pfeiffer and r + x + A(x) for Houlsby, A = up(act(down(.))), N = the post-norm the block then applies to the sum
(Marian; none on the pre-norm blocks), as at T5's and BART's sites. test_seq2seq_sites.py runs its tests that name
no module (wrapping, fusion fast path against the reference, cached generation) on these rows too; parity with
AdapterHub's own files and outputs on mT5, mBART and PLBART is in test_adapterhub_decoder_parity.py; adapters 1.3.0 has
no Marian, Pegasus or M2M-100 model, so those are in our own format only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import adapterfusion as af
from adapterfusion.injection.architectures import SiteKind
from tiny_decoders import EXTRA_SEQ2SEQ_CONFIGS, randomise_pieces, tiny_decoder, tiny_decoder_inputs
from tolerances import assert_close

TYPES = tuple(EXTRA_SEQ2SEQ_CONFIGS)

# model_type -> (decoder?, position) -> (the module whose input is r, the sub-layer, where r + x shows: ("out", module)
# its output or ("in", module) its input, the post-norm N or None), relative to one layer ("" is the layer itself).
Site = tuple[str, str, tuple[str, str], str | None]
_PRE_NORM_BART: dict[tuple[bool, str], Site] = {  # the sum goes on into the next sub-layer's norm, or out of the layer
    (False, "attention"): ("self_attn_layer_norm", "self_attn", ("in", "final_layer_norm"), None),
    (False, "output"): ("final_layer_norm", "fc2", ("out", ""), None),
    (True, "attention"): ("self_attn_layer_norm", "self_attn", ("in", "encoder_attn_layer_norm"), None),
    (True, "cross"): ("encoder_attn_layer_norm", "encoder_attn", ("in", "final_layer_norm"), None),
    (True, "output"): ("final_layer_norm", "fc2", ("out", ""), None),
}
SITES: dict[str, dict[tuple[bool, str], Site]] = {
    "mt5": {
        (False, "attention"): ("layer.0.layer_norm", "layer.0.SelfAttention", ("out", "layer.0"), None),
        (False, "output"): ("layer.1.layer_norm", "layer.1.DenseReluDense", ("out", "layer.1"), None),
        (True, "attention"): ("layer.0.layer_norm", "layer.0.SelfAttention", ("out", "layer.0"), None),
        (True, "cross"): ("layer.1.layer_norm", "layer.1.EncDecAttention", ("out", "layer.1"), None),
        (True, "output"): ("layer.2.layer_norm", "layer.2.DenseReluDense", ("out", "layer.2"), None),
    },
    "mbart": _PRE_NORM_BART,
    "pegasus": _PRE_NORM_BART,
    "m2m_100": _PRE_NORM_BART,
    "marian": {  # BART's post-norm layers: N(r + sub-layer(r)); the feed-forward's r is fc1's input
        (False, "attention"): ("self_attn", "self_attn", ("in", "self_attn_layer_norm"), "self_attn_layer_norm"),
        (False, "output"): ("fc1", "fc2", ("in", "final_layer_norm"), "final_layer_norm"),
        (True, "attention"): ("self_attn", "self_attn", ("in", "self_attn_layer_norm"), "self_attn_layer_norm"),
        (True, "cross"): ("encoder_attn", "encoder_attn", ("in", "encoder_attn_layer_norm"), "encoder_attn_layer_norm"),
        (True, "output"): ("fc1", "fc2", ("in", "final_layer_norm"), "final_layer_norm"),
    },
}
SITES["plbart"] = SITES["marian"]
# What the rows are: the kind of every site, and whether AdapterHub's files translate (adapters 1.3.0 runs the model).
KINDS = {
    "mt5": SiteKind.PRE_NORM,
    "mbart": SiteKind.PRE_NORM,
    "pegasus": SiteKind.PRE_NORM,
    "m2m_100": SiteKind.PRE_NORM,
    "marian": SiteKind.PRE_RESIDUAL,
    "plbart": SiteKind.PRE_RESIDUAL,
}
IN_ADAPTERHUB = {"mt5", "mbart", "plbart"}
# (global layer index, position): the encoder's last layer (1) and the decoder's last (3) of 2 + 2
SITE_CASES = [(1, "attention"), (1, "output"), (3, "attention"), (3, "cross"), (3, "output")]


def test_every_row_here_is_an_encoder_decoder_of_one_site_kind() -> None:
    assert set(TYPES) == set(SITES) == set(KINDS)
    for model_type in TYPES:
        spec = af.ARCHITECTURES[model_type]
        assert spec.decoder is not None and spec.in_adapterhub == (model_type in IN_ADAPTERHUB)
        kinds = {stack.site(position).kind for stack in spec.stacks() for position in stack.positions}
        assert kinds == {KINDS[model_type]}


def _layer(model: af.AdaptedModel, index: int) -> nn.Module:
    stacks = model.architecture.stacks()
    stack, local = (stacks[0], index) if index < 2 else (stacks[1], index - 2)
    return model.model.base_model.get_submodule(stack.layers)[local]


def _first(value: Any) -> torch.Tensor:
    return value[0] if isinstance(value, tuple) else value


def _bottleneck(adapter: nn.Module, value: torch.Tensor, activation: Any) -> torch.Tensor:
    return activation(value @ adapter.down.weight.T + adapter.down.bias) @ adapter.up.weight.T + adapter.up.bias


@pytest.mark.parametrize("preset", ["pfeiffer", "houlsby"])
@pytest.mark.parametrize(("layer_index", "position"), SITE_CASES)
@pytest.mark.parametrize("model_type", TYPES)
def test_one_site_equals_the_hand_computation(model_type: str, layer_index: int, position: str, preset: str) -> None:
    """The adapter at one site only, so r and x are the bare model's: Pfeiffer r + x + A(N(x + r)) (ReLU), Houlsby
    r + x + A(x) (swish); Houlsby's LayerNorm copies off (Marian's block applies its own)."""
    model = af.wrap(tiny_decoder(model_type, dtype=torch.float64))
    inputs = tiny_decoder_inputs(model_type)
    leave_out = [i for i in range(model.num_layers) if i != layer_index]
    config = af.AdapterConfig.from_name(
        preset, reduction_factor=4, train_layer_norm=False, positions=(position,), leave_out=leave_out
    )
    model.add_adapter("a", config)
    randomise_pieces(model, seed=5)
    assert [site.key for site in model.sites_with_adapter("a")] == [f"layer.{layer_index}.{position}"]
    layer = _layer(model, layer_index)
    takes_r, sub_layer, (where, summed), post_norm = SITES[model_type][(layer_index >= 2, position)]
    norm = nn.Identity() if post_norm is None else layer.get_submodule(post_norm)
    seen: dict[str, torch.Tensor] = {}
    sum_module = layer.get_submodule(summed)
    hooks = [
        layer.get_submodule(takes_r).register_forward_pre_hook(
            lambda m, args, kwargs: seen.__setitem__("r", args[0] if args else kwargs["hidden_states"]),
            with_kwargs=True,
        ),
        layer.get_submodule(sub_layer).register_forward_hook(lambda m, args, out: seen.__setitem__("x", _first(out))),
        sum_module.register_forward_pre_hook(lambda m, args: seen.__setitem__("out", args[0]))
        if where == "in"
        else sum_module.register_forward_hook(lambda m, args, out: seen.__setitem__("out", _first(out))),
    ]
    with torch.no_grad():
        model(**inputs)  # nothing active: the bare model
        r, x = seen["r"], seen["x"]
        assert_close(seen["out"], r + x, dtype=torch.float64)  # the hooks see the block's own sum
        adapter = model.sites_with_adapter("a")[0].adapters["a"]
        if preset == "pfeiffer":
            expected = r + x + _bottleneck(adapter, norm(x + r), torch.relu)
        else:
            expected = r + x + _bottleneck(adapter, x, F.silu)
        model.activate(adapter="a")
        model(**inputs)
    for hook in hooks:
        hook.remove()
    assert_close(seen["out"], expected, dtype=torch.float64)
    assert (seen["out"] - (r + x)).abs().max() > 1e-3  # the adapter did change the site


def _fused(model_type: str, preset: str, positions: tuple[str, ...], base: nn.Module | None = None) -> af.AdaptedModel:
    model = af.wrap(base if base is not None else tiny_decoder(model_type, dtype=torch.float64))
    for name in ("a", "b"):
        config = af.AdapterConfig.from_name(preset, reduction_factor=4, train_layer_norm=False, positions=positions)
        model.add_adapter(name, config)
    model.add_fusion("f", ["a", "b"], af.FusionConfig.dynamic(value_init_noise=0.1))
    randomise_pieces(model, seed=5)
    model.activate(fusion="f")
    return model.eval()


@pytest.mark.parametrize("model_type", TYPES)
def test_adapters_and_fusion_save_and_load_to_the_same_outputs(model_type: str, tmp_path: Path) -> None:
    """Piece by piece into a fresh wrapped model, and as a whole setup onto the base saved as a folder (every base
    loaded from that folder: from_pretrained picks its own attention implementation, whose rounding differs)."""
    tiny_decoder(model_type, dtype=torch.float64).save_pretrained(tmp_path / "base")

    def loaded_base() -> nn.Module:
        return type(tiny_decoder(model_type)).from_pretrained(tmp_path / "base")

    model = _fused(model_type, "houlsby", ("attention", "cross", "output"), loaded_base())
    inputs = tiny_decoder_inputs(model_type)
    with torch.no_grad():
        expected = model(**inputs).logits
    again = af.wrap(loaded_base()).eval()
    for name in ("a", "b"):
        model.save_adapter(name, tmp_path / name)
        again.load_adapter(tmp_path / name)
    model.save_fusion("f", tmp_path / "f")
    again.load_fusion(tmp_path / "f")
    again.activate(fusion="f")
    model.save_pretrained(tmp_path / "setup")
    whole = af.AdaptedModel.from_pretrained(tmp_path / "base", tmp_path / "setup").eval()
    assert type(whole.model) is type(model.model) and whole.active_fusion == "f"
    with torch.no_grad():
        assert torch.equal(again(**inputs).logits, expected)
        assert torch.equal(whole(**inputs).logits, expected)
