"""UnloadedSites: what `AdaptedModel.sites` becomes after `unload()`.

unload() puts the original sub-modules back, so the model has nowhere left to put an adapter or fusion: an adapter
added after it would be kept by name and never run. Every AdaptedModel method that adds, activates, trains, saves or
runs pieces goes through the sites, so a sites list that refuses to be walked refuses all of them in one place, with
a message that says what to do instead.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NoReturn

from adapterfusion.errors import ModelUnloadedError
from adapterfusion.injection.site import AdapterSite


class UnloadedSites(list[AdapterSite]):
    """An empty list of sites that raises ModelUnloadedError as soon as anything walks it."""

    def __iter__(self) -> Iterator[AdapterSite]:
        refuse_unloaded()


def refuse_unloaded() -> NoReturn:
    raise ModelUnloadedError(
        "this model was unloaded: unload() gave the plain HuggingFace model back and removed every adapter site, so "
        "adapters, fusions and heads can no longer be added, loaded, activated, trained, saved or run on it. "
        "Wrap the returned model again with af.wrap(model) (and load the pieces into that)"
    )


def check_wrapped(sites: Sequence[AdapterSite]) -> None:
    """Refuse a model whose sites unload() removed (for the methods that would not walk them)."""
    if isinstance(sites, UnloadedSites):
        refuse_unloaded()
