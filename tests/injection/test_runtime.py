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


def test_kept_values_are_checked_on_a_blocks_entry_in_one_read_and_never_inside(monkeypatch) -> None:
    """A host read per site while the forward's kernels are queued makes the host wait on each (on a GPU): every kept
    one is hashed when the block opens, in one call over all their tensors with one read, and a first use inside the
    block reads nothing but the hash of the one made again."""
    from adapterfusion.injection import runtime as runtime_module

    runtime, maker = ForwardRuntime(), Maker()
    weights = {f"layer.{i}": [torch.randn(5, 3), torch.randn(3)] for i in range(4)}
    for site, tensors in weights.items():
        _use(runtime, maker, "f", tensors, site)
    hashed: list[tuple[bool, int]] = []
    original = runtime_module.contents_hashes
    monkeypatch.setattr(
        runtime_module, "contents_hashes", lambda tensors: hashed.append((inside, len(tensors))) or original(tensors)
    )
    reads: list[int] = []
    original_tolist = torch.Tensor.tolist
    monkeypatch.setattr(torch.Tensor, "tolist", lambda self: reads.append(1) or original_tolist(self))
    inside = False
    weights["layer.2"][0].data[1, 1] += 1.0  # changes values only: no new identity or version
    with runtime.caching():
        inside = True
        for site, tensors in weights.items():
            runtime.prepared("fold", site, "f", lambda site=site: maker(site), lambda tensors=tensors: tensors)
    assert hashed[0] == (False, 8) and reads[0] == 1  # on entry: the four kept ones' eight tensors, one read
    assert hashed[1:] == [(True, 2)]  # inside: only the one made again is hashed (for the next block)
    assert maker.made == ["f"] * 4 + ["layer.2"]


def test_a_tensor_several_kept_ones_share_is_hashed_once_on_entry(monkeypatch) -> None:
    """A site's fold and lane are made from the same weights: hashing them once per block halves the work."""
    from adapterfusion.injection import runtime as runtime_module

    runtime, maker = ForwardRuntime(), Maker()
    shared, own = torch.randn(4, 4), torch.randn(4)
    with runtime.caching():
        runtime.prepared("fold", "s", "f", lambda: maker("fold"), lambda: [shared, own])
        runtime.prepared("lane", "s", "f", lambda: maker("lane"), lambda: [shared])
    counts: list[int] = []
    original = runtime_module.contents_hashes
    monkeypatch.setattr(
        runtime_module, "contents_hashes", lambda tensors: counts.append(len(tensors)) or original(tensors)
    )
    with runtime.caching():
        runtime.prepared("fold", "s", "f", lambda: maker("fold"), lambda: [shared, own])
        runtime.prepared("lane", "s", "f", lambda: maker("lane"), lambda: [shared])
    assert counts == [2] and maker.made == ["fold", "lane"]
    shared.data.mul_(-1.0)  # a sign flip through .data: both are made again
    with runtime.caching():
        runtime.prepared("fold", "s", "f", lambda: maker("fold"), lambda: [shared, own])
        runtime.prepared("lane", "s", "f", lambda: maker("lane"), lambda: [shared])
    assert maker.made == ["fold", "lane", "fold", "lane"]


def test_one_kept_from_a_block_without_the_value_check_is_made_again_by_a_block_with_it() -> None:
    """Its values were never hashed, so a `p.data` write since cannot be ruled out."""
    runtime, maker = ForwardRuntime(), Maker()
    weight = [torch.ones(3)]
    with runtime.caching(check_values=False):
        runtime.prepared("fold", "s", "f", lambda: maker("f"), lambda: weight)
    with runtime.caching(check_values=False):
        runtime.prepared("fold", "s", "f", lambda: maker("f"), lambda: weight)
    assert maker.made == ["f"]  # identity and version unchanged
    _use(runtime, maker, "f", weight, "s")
    _use(runtime, maker, "f", weight, "s")
    assert maker.made == ["f", "f"]  # made again once, then hashed and kept


def test_a_kept_one_does_not_keep_its_weights_alive_and_goes_once_they_are_gone() -> None:
    """Deleting a piece frees its weights: a kept fold holds them weakly, and the next block drops it."""
    import gc
    import weakref

    runtime, maker = ForwardRuntime(), Maker()
    weights = [torch.randn(64, 64)]
    _use(runtime, maker, "f", weights)
    alive = weakref.ref(weights[0])
    del weights
    gc.collect()
    assert alive() is None
    with runtime.caching():
        pass
    assert runtime._kept[("fold", "layer.0.output")] == {}


def test_a_failure_while_checking_kept_values_still_ends_the_block(monkeypatch) -> None:
    """An error on the block's entry (out of memory, Ctrl-C while waiting on the device) must not leave the runtime
    caching: later forwards, training ones included, would run stale folds."""
    import pytest

    from adapterfusion.injection import runtime as runtime_module

    runtime, maker = ForwardRuntime(), Maker()
    weights = [torch.ones(3)]
    _use(runtime, maker, "f", weights)

    def failing(tensors):
        raise MemoryError("simulated")

    monkeypatch.setattr(runtime_module, "contents_hashes", failing)
    with pytest.raises(MemoryError), runtime.caching():
        pass
    assert not runtime.is_caching


def test_a_kept_one_holds_its_weights_storages_so_no_later_tensor_takes_their_address() -> None:
    """A caching allocator gives a freed block of the same size to the next tensor that asks: a weight cast and cast
    back (`model.half().float()`) could then have its old address, version and dtype with new values, which a block
    without the value check would trust. While a fold is kept, the storages it was made from stay allocated; the next
    block's entry lets them go once the weights moved."""
    runtime, maker = ForwardRuntime(), Maker()
    weight = torch.nn.Parameter(torch.randn(64, 64))
    with runtime.caching(check_values=False):
        runtime.prepared("fold", "s", "f", lambda: maker("f"), lambda: [weight])
    address = weight.data_ptr()
    weight.data = weight.data.half()  # what nn.Module.half() does: the float32 storage is the parameter's no more
    weight.data = weight.data.float()
    (kept,) = runtime._kept[("fold", "s")].values()
    assert [storage.data_ptr() for storage in kept.storages] == [address] and weight.data_ptr() != address
    with runtime.caching(check_values=False):
        assert runtime._kept[("fold", "s")] == {}  # dropped on entry: its weights moved
        runtime.prepared("fold", "s", "f", lambda: maker("f"), lambda: [weight])
    assert maker.made == ["f", "f"]
    (kept,) = runtime._kept[("fold", "s")].values()
    assert [storage.data_ptr() for storage in kept.storages] == [weight.data_ptr()]
