"""The wrapped HuggingFace model's own `save_pretrained` while af.wrap holds it.

Wrapping happens in place, so the user's model object has an AdapterSite at each insertion site: its state dict
names each sub-layer's weights `<site>.base_layer.<...>` and holds the adapters' and fusions' weights beside them.
transformers would write that as the checkpoint, and `from_pretrained` of it loads with those sub-layers freshly
initialised, with only a warning about unexpected keys. While wrapped, the model's `save_pretrained` (and
`push_to_hub`, which calls it) writes the plain model's weights instead: what `unload()` gives back, no adapter in
them (they are saved with AdaptedModel.save_pretrained). A caller that passes its own `state_dict` keeps it.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import nn

from adapterfusion.injection.site import AdapterSite

_OVERRIDE = "save_pretrained"


def plain_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """`model`'s state dict under the keys of the unwrapped model: each site's `<site>.base_layer.` prefix made
    `<site>.`, and the weights of its adapters and fusions left out."""
    sites = [path for path, module in model.named_modules() if isinstance(module, AdapterSite)]
    state = {}
    for key, value in model.state_dict().items():
        site = next((path for path in sites if key.startswith(f"{path}.")), None)
        if site is None:
            state[key] = value
            continue
        rest = key[len(site) + 1 :]
        if rest.startswith("base_layer."):
            state[f"{site}.{rest[len('base_layer.') :]}"] = value
    return state


def _save_plain(model: nn.Module, *args: Any, **kwargs: Any) -> Any:
    if kwargs.get("state_dict") is None and len(args) < 3:  # (save_directory, is_main_process, state_dict, ...)
        kwargs["state_dict"] = plain_state(model)
    return getattr(type(model), _OVERRIDE)(model, *args, **kwargs)


def guard_save(model: nn.Module) -> None:
    """Make `model.save_pretrained` write the plain model while it is wrapped (a partial, which pickles and copies
    with the model, unlike a bound method set on the instance)."""
    if callable(getattr(type(model), _OVERRIDE, None)):
        model.__dict__[_OVERRIDE] = functools.partial(_save_plain, model)


def release_save(model: nn.Module) -> None:
    """Give `model` its class's save_pretrained back (unload())."""
    model.__dict__.pop(_OVERRIDE, None)
