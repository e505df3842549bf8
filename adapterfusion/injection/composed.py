"""What a resolved composition block (blocks.py) computes at one site, in the flow of injection/site.py.

With h the sub-layer output and r its residual input, one adapter or fusion alone at a site computes
`out = piece(place(h, r))` and, where the sub-layer ends with a LayerNorm, `LN(out + r)` (site.adapt_with). Blocks
reuse those two steps, with AdapterHub's semantics:
  * Stack(c_1..c_K): h_k = c_k's site output from h_{k-1} (h_0 = h), each child placed as it is alone (LN(h_{k-1}
    + r) for Pfeiffer, its residual h_{k-1}); only c_K ends with LN(h_K + r). Children a site does not hold
    (leave_out) are skipped there.
  * Average(a_1..a_N, w): x and the residual placed once, as for a_1; out = sum_i w_i a_i(x, residual); ended as
    a_N ends (its LayerNorm).
  * Fuse: the fusion's own path (its mask and implementation as activate(fusion=...) runs them).
BatchSplit and Parallel never reach a site: the model turns them into per-example choices (routing.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from adapterfusion.blocks import ADAPTER, Average, Block, Fuse, Stack
from adapterfusion.errors import ConfigError
from adapterfusion.injection.architectures import SiteKind

if TYPE_CHECKING:
    from adapterfusion.injection.site import AdapterSite


def held_at(site: AdapterSite, node: Any) -> bool:
    """Whether `site` holds any piece of a resolved leaf or block (else the block runs the bare sub-layer here)."""
    if node is None:  # a BatchSplit child: those rows run the plain model
        return False
    if isinstance(node, Fuse):
        return node.name is not None and node.name in site.fusions
    if isinstance(node, Block):
        return any(held_at(site, child) for child in node.children)
    return node[1] in (site.adapters if node[0] == ADAPTER else site.fusions)


def run_node(site: AdapterSite, node: Any, h: torch.Tensor, r: torch.Tensor | None, end: bool) -> torch.Tensor:
    """The site's output for `node` (a resolved leaf or block) on h, r; `end`: finish as the sub-layer does."""
    if isinstance(node, Stack):
        present = [child for child in node.children if held_at(site, child)]
        if site._runtime.is_recording:
            _check_one_fusion(site, present)
        for index, child in enumerate(present):
            h = run_node(site, child, h, r, end and index == len(present) - 1)
        return h
    if isinstance(node, Average):
        return _average(site, node, h, r, end)
    if isinstance(node, Fuse):
        assert node.name is not None  # resolved
        names = tuple(child[1] for child in node.children)
        keep, kept = _mask(site, node.name, names, h.device)
        return site.adapt_with(h, r, end, node.name, names, keep, kept)
    return site.adapt_with(h, r, end, None, (node[1],), None, None)


def _check_one_fusion(site: AdapterSite, present: list[Any]) -> None:
    """Refuse to record a Stack that runs several fusions at `site`: a recording holds one fusion's weights per site
    (fusion_attentions_by_site[(layer, position)]), and a second one's would silently replace the first's."""
    fusions = [child.name for child in present if isinstance(child, Fuse)]
    if len(fusions) > 1:
        raise ConfigError(
            f"recording fusion attentions records one fusion's weights per site, which a Stack running fusions "
            f"{fusions} one after the other at {site.key} does not give; record each fusion activated alone: "
            f"`with model.activated(fusion={fusions[0]!r}): model(**batch, output_fusion_attentions=True)`, or "
            "activate a Stack with one fusion"
        )


def _average(site: AdapterSite, node: Average, h: torch.Tensor, r: torch.Tensor | None, end: bool) -> torch.Tensor:
    names = [child[1] for child in node.children]
    missing = [name for name in names if name not in site.adapters]
    if missing:
        raise ConfigError(
            f"Average{tuple(names)}: adapters {missing} are not at {site.key} (their leave_out differs from the "
            "others'); average adapters placed at the same sites"
        )
    adapters = [site.adapter(name) for name in names]
    first, last = adapters[0], adapters[-1]
    if site.spec.kind is SiteKind.PRE_NORM:
        x, residual = site._placed_pre_norm(h, r, first.config)
    else:
        r, norm = site._around(r, first.layer_norm if first.layer_norm is not None else site.pretrained_layer_norm)
        x, residual = site._placed(h, r, first.config, norm)
    out = sum(weight * adapter(x, residual) for weight, adapter in zip(node.weights, adapters, strict=True))
    assert isinstance(out, torch.Tensor)
    if site._ends_with_layer_norm(last.config, end):
        r, norm = site._around(r, last.layer_norm if last.layer_norm is not None else site.pretrained_layer_norm)
        out = norm(out + r)
    return out


def _mask(
    site: AdapterSite, fusion: str, names: tuple[str, ...], device: torch.device
) -> tuple[torch.Tensor | None, tuple[int, ...] | None]:
    """The fusion's mask as adapt_with takes it: a bool per adapter, and the kept indices the fast path runs."""
    mask = site.state.fusion_masks.get(fusion)
    if mask is None:
        return None, None
    kept = tuple(i for i, name in enumerate(names) if name in mask)
    keep = torch.tensor([i in kept for i in range(len(names))], dtype=torch.bool, device=device)
    fast = site.state.fusion_implementation == "fast" and len(kept) < len(names)
    return keep, kept if fast else None
