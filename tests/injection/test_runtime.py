"""ForwardRuntime.prepared: what a site prepares inside `inference_cache()` (a fold, a lane, stacked weights) is made
once per block and kept across blocks per key, so a server alternating between fusions does not refold each batch;
a weight changed in place, or more keys than it keeps, makes it again."""

from __future__ import annotations

import torch

from adapterfusion.injection.runtime import KEPT_PER_SITE, ForwardRuntime


class Maker:
    """Counts what it makes, per key."""

    def __init__(self) -> None:
        self.made: list[str] = []

    def __call__(self, key: str) -> str:
        self.made.append(key)
        return f"made {key} #{len(self.made)}"


def _use(runtime: ForwardRuntime, maker: Maker, key: str, weights: list[torch.Tensor], site: str = "layer.0.output"):
    with runtime.caching():
        first = runtime.prepared("fold", site, key, lambda: maker(key), lambda: weights)
        assert runtime.prepared("fold", site, key, lambda: maker(key), lambda: weights) is first  # once per block
        return first


def test_keys_used_in_turn_are_each_made_once_across_blocks() -> None:
    runtime, maker = ForwardRuntime(), Maker()
    weights = {key: [torch.ones(3)] for key in ("f1", "f2")}
    results = [_use(runtime, maker, key, weights[key]) for key in ["f1", "f2"] * 5]
    assert maker.made == ["f1", "f2"]
    assert results[0] == results[2] == "made f1 #1" and results[1] == results[3] == "made f2 #2"


def test_a_weight_changed_in_place_makes_it_again() -> None:
    runtime, maker = ForwardRuntime(), Maker()
    weight = torch.ones(3)
    _use(runtime, maker, "f1", [weight])
    weight.add_(1.0)  # as an optimizer step does
    _use(runtime, maker, "f1", [weight])
    _use(runtime, maker, "f1", [weight])
    _use(runtime, maker, "f1", [weight.clone()])  # another tensor of the same values
    assert maker.made == ["f1", "f1", "f1"]


def test_only_the_most_recently_used_keys_are_kept_per_site_and_kind() -> None:
    runtime, maker = ForwardRuntime(), Maker()
    keys = [f"f{i}" for i in range(KEPT_PER_SITE + 1)]
    weights = [torch.ones(1)]
    for key in keys:
        _use(runtime, maker, key, weights)
    _use(runtime, maker, keys[-1], weights)  # kept
    _use(runtime, maker, keys[0], weights)  # the least recently used: dropped, made again
    assert maker.made == [*keys, keys[0]]
    _use(runtime, maker, keys[0], weights, site="layer.1.output")  # another site keeps its own
    assert maker.made == [*keys, keys[0], keys[0]]


def test_nothing_is_prepared_outside_a_block() -> None:
    runtime, maker = ForwardRuntime(), Maker()
    assert runtime.prepared("fold", "layer.0.output", "f1", lambda: maker("f1")) is None
    assert maker.made == []
