"""ForwardRuntime: what forwards record and reuse besides what runs, with one owner.

ActiveState (injection/state.py) says what runs. This says what the forwards inside a block collect (each fusion
site's softmax weights) and reuse (each fusion site's folded weights, fusion/layer.py `fold_fusion`). An
AdaptedModel holds one and hands the same reference to each AdapterSite it injects; nothing else writes it, and only
its two context managers switch each part on and off (behind `AdaptedModel.recording_fusion_attentions` and
`AdaptedModel.inference_cache`).
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple, TypeVar, cast

import torch
from torch import nn

from adapterfusion.errors import ConfigError
from adapterfusion.fusion.layer import FoldedFusion

Recorder = dict[tuple[int, str], torch.Tensor]
Prepared = TypeVar("Prepared")


class ForwardRuntime:
    """Off until a block switches a part on: `recording()` collects fusion attention, `caching()` keeps folds."""

    def __init__(self) -> None:
        # One dict per open recording block, outermost first: each forward inside records into all of them, so a
        # forward's own recording (output_fusion_attentions=True) never hides its weights from a block around it.
        self._recorders: tuple[Recorder, ...] = ()
        self._folded: dict[tuple[str, str, str], Any] | None = None
        self._check_values = True  # the current caching block's: hash weight values (see `prepared`)
        self._placement: tuple[torch.dtype, torch.device] | None = None  # the model's when the caching block began
        # The last KEPT_PER_SITE folds (lanes, stacks) of each site and kind, kept between blocks with the weights each
        # was made from: a later block (the next generate(), evaluation call or served batch) reuses one while those
        # weights are unchanged (see `prepared`). (kind, site) -> key -> Kept, oldest use first.
        self._kept: dict[tuple[str, str], dict[str, Kept]] = {}
        # inside `extending`: the position the running forward starts at (its cached length); 0 outside it
        self._step_start = 0

    def __getstate__(self) -> dict[str, Any]:
        """A copy (copy.deepcopy, pickle, torch.save of the model) starts outside every block with nothing kept: the
        blocks belong to the original's `with` statements, and a copy that kept the original's folds would run them
        for good, whatever its weights became."""
        return ForwardRuntime().__dict__

    @contextlib.contextmanager
    def recording(self, enabled: bool = True) -> Iterator[Recorder | None]:
        """Inside the block `record` fills the yielded dict and those of the recording blocks around it. With
        enabled=False the block records nothing of its own and yields None, and the blocks around it go on
        recording: a forward opens one with its output_fusion_attentions, which must not switch off its caller's."""
        if not enabled:
            yield None
            return
        recorder: Recorder = {}
        previous, self._recorders = self._recorders, (*self._recorders, recorder)
        try:
            yield recorder
        finally:
            self._recorders = previous

    @contextlib.contextmanager
    def caching(
        self, check_values: bool = True, placement: tuple[torch.dtype, torch.device] | None = None
    ) -> Iterator[None]:
        """Inside the block `folded` folds each fusion site's weights once; the folds are dropped on exit.
        check_values=False: a fold kept from an earlier block is trusted on the tensors' identity and version
        alone (no hash of their values; see `prepared`). `placement`: the model's dtype and device now, which
        `check_placement` holds each forward of the block to."""
        previous = self._folded, self._check_values, self._placement
        self._folded, self._check_values, self._placement = {}, check_values, placement
        try:
            self._drop_stale(check_values)  # inside: an error here (out of memory, Ctrl-C) still ends the block
            yield
        finally:
            self._folded, self._check_values, self._placement = previous

    def pieces_changed(self) -> None:
        """An adapter or fusion was added, replaced or removed: inside a caching block, what the block prepared so
        far is dropped (a new block object, so sites make their lanes again), since a replaced piece keeps its name
        and would otherwise run the old one's folds. Folds kept between blocks are checked by their weights'
        stamps, which a new module's tensors do not match."""
        if self._folded is not None:
            self._folded = {}

    def check_placement(self, placement: tuple[torch.dtype, torch.device]) -> None:
        """Refuse a forward inside a caching block after the model was cast or moved (`model.to(...)` inside it):
        the folds and lanes the block made are of the old dtype and device, and would fail deep in torch (or, cast
        back, silently run the old weights)."""
        if self._folded is not None and self._placement is not None and placement != self._placement:
            (dtype, device), (now_dtype, now_device) = self._placement, placement
            raise ConfigError(
                f"the model was cast or moved inside inference_cache() (from {dtype} on {device} to {now_dtype} on "
                f"{now_device}); what the block prepared is of the old weights. Call model.to(...) outside the block "
                "and enter a new one: `with model.inference_cache(): ...`"
            )

    @contextlib.contextmanager
    def extending(self) -> Iterator[None]:
        """Inside the block a recording grows along the positions instead of being replaced: a forward that starts
        where the recording ends (`starting_at`: a generation step on the KV cache) adds its positions; one that
        starts at 0 (the prompt, or every step of uncached generation, which runs the whole sequence again) replaces
        it, so the block ends with the weights of every position once, of this generate() call alone."""
        previous, self._step_start = self._step_start, 0
        try:
            yield
        finally:
            self._step_start = previous

    def starting_at(self, position: int) -> None:
        """The position the next forward's first token has (the cache's length), inside `extending`."""
        self._step_start = position

    @property
    def is_recording(self) -> bool:
        return bool(self._recorders)

    @property
    def is_caching(self) -> bool:
        return self._folded is not None

    @property
    def block(self) -> object | None:
        """The running `caching()` block, an object no other block shares (None outside one): what a site may
        remember its lane for."""
        return self._folded

    def record(self, layer: int, position: str, weights: torch.Tensor) -> None:
        """Keep the fusion site (layer, position)'s softmax weights in every open recording block."""
        for recorder in self._recorders:
            earlier = recorder.get((layer, position)) if self._step_start > 0 else None
            if (
                earlier is not None
                and earlier.shape[:-2] == weights.shape[:-2]
                and earlier.shape[-2] == self._step_start
            ):
                recorder[(layer, position)] = torch.cat([earlier, weights], dim=-2)
            else:
                recorder[(layer, position)] = weights

    def folded(
        self,
        site: str,
        key: str,
        fold: Callable[[], FoldedFusion],
        weights: Callable[[], Iterable[torch.Tensor]] = tuple,
    ) -> FoldedFusion | None:
        """The folds for `key` at site `site` (made by `fold` on first use inside the block); None outside one.
        See `prepared`."""
        return self.prepared("fold", site, key, fold, weights)

    def prepared(
        self,
        kind: str,
        site: str,
        key: str,
        make: Callable[[], Prepared],
        weights: Callable[[], Iterable[torch.Tensor]] = tuple,
    ) -> Prepared | None:
        """What `make` prepares of kind `kind` (a fold, a lane: injection/lanes.py) for `key` at site `site`, made on
        first use inside the block; None outside one. `weights()`: the tensors it is made from (asked for on a
        block's first use only). The site's last KEPT_PER_SITE of each kind (by key: one per fusion a server
        alternates between) are kept after the block and reused by a later one while every one of those tensors is
        the same tensor, unmodified (same storage, same version counter, same contents: `p.data` writes bump no
        version), so repeated short calls (generation, serving) prepare once; any change of the weights makes it
        again. Identity and version are compared here; contents are hashed for all kept ones at once when a block
        opens (`_drop_stale`), not here, where the host would wait for the forward's queued kernels."""
        if self._folded is None:
            return None
        entry = (kind, site, key)
        if entry not in self._folded:
            tensors = tuple(weights())
            kept = self._kept.setdefault((kind, site), {})
            earlier = kept.pop(key, None)
            if earlier is None or not earlier.made_from(tensors):  # values: checked for every kept one on entry
                values = (contents_hash(tensors).item(),) if self._check_values and tensors else ()
                earlier = Kept.of(tensors, values, make())
            kept[key] = earlier  # now the most recent
            while len(kept) > KEPT_PER_SITE:
                del kept[next(iter(kept))]
            self._folded[entry] = earlier.made
        return self._folded[entry]

    def _drop_stale(self, check_values: bool) -> None:
        """Forget every kept fold, lane or stack whose weights are gone (a piece deleted or replaced: the kept one
        holds them only weakly, so they are freed) and, with `check_values`, every one whose weights' values changed
        since it was made (a write through `p.data`, which changes neither a tensor's identity nor its version) or
        were never hashed (made in a check_values=False block). All kept ones are hashed at once, on the block's
        entry, with one host read per device: a read per site, while the forward's kernels are queued, would make the
        host wait on each."""
        stale: list[tuple[tuple[str, str], str]] = []
        pending: dict[torch.device, list[tuple[tuple[str, str], str, float, torch.Tensor]]] = {}
        for place, kept in self._kept.items():
            for key, one in kept.items():
                tensors = one.tensors()
                if tensors is None or (check_values and tensors and not one.values):
                    stale.append((place, key))
                elif check_values and tensors:
                    now = contents_hash(tensors)
                    pending.setdefault(now.device, []).append((place, key, one.values[0], now))
        for checks in pending.values():
            hashes = torch.stack([now for *_, now in checks]).tolist()
            stale.extend((place, key) for (place, key, then, _), now in zip(checks, hashes, strict=True) if now != then)
        for place, key in stale:
            del self._kept[place][key]


class Kept(NamedTuple):
    """A prepared thing kept between blocks: weak references to the tensors it was made from (a deleted piece's
    weights are freed, not kept alive here), their storage, version and dtype then, the hash of their values (where
    hashed) and what was made."""

    refs: tuple[weakref.ref[torch.Tensor], ...]
    state: tuple[tuple[int, int, torch.dtype], ...]
    values: tuple[float, ...]
    made: Any

    @classmethod
    def of(cls, tensors: Sequence[torch.Tensor], values: tuple[float, ...], made: Any) -> Kept:
        return cls(tuple(weakref.ref(t) for t in tensors), weights_state(tensors), values, made)

    def tensors(self) -> tuple[torch.Tensor, ...] | None:
        """The tensors it was made from, or None where one of them is gone."""
        tensors = tuple(ref() for ref in self.refs)
        return None if any(t is None for t in tensors) else cast(tuple[torch.Tensor, ...], tensors)

    def made_from(self, tensors: Sequence[torch.Tensor]) -> bool:
        """Whether `tensors` are the very tensors it was made from, in the same state (storage, version, dtype)."""
        return (
            len(tensors) == len(self.refs)
            and all(ref() is t for ref, t in zip(self.refs, tensors, strict=True))
            and weights_state(tensors) == self.state
        )


# How many prepared things (folds, lanes, stacks) of one kind a site keeps between blocks. A fold costs about 3·M·d
# numbers per site (M the fused adapters' bottleneck units), as much as a fused adapter set's weights; a served mix of
# more fusions than this refolds the least recently used ones.
KEPT_PER_SITE = 4


def weights_state(weights: Sequence[torch.Tensor]) -> tuple[tuple[int, int, torch.dtype], ...]:
    """Storage, in-place version and dtype of each tensor. Values are hashed apart (`contents_hash`), since a write
    through `p.data` (the EMA / weight-averaging idiom) changes them and nothing else."""
    return tuple((w.data_ptr(), w._version, w.dtype) for w in weights)


def _real(weight: torch.Tensor) -> torch.Tensor:
    """A complex weight as its real and imaginary parts."""
    return torch.view_as_real(weight) if weight.is_complex() else weight


# A weight's hash: its values projected on pseudo-random weights, one per column of HASH_COLUMNS (a matrix-vector
# product in the weight's precision, float32 at least: one read of the weights, a fifth to a third of a fold's time on
# CPU; a one-forward block of a d=768 fused encoder measured +1 ms against +11 ms to refold) times one per row (in
# float64). Any change moves it by about change·weight; one below the rounding of a row's sum (float32: ~1e-6
# of the row's size) can go unseen, and is then as small as the rounding noise the fold itself adds. The hash kept
# is the one the fold was made from, so such changes cannot add up unseen over many blocks. (One product per weight
# instead of one over their concatenation copies nothing but took 0.37 ms a d=576 fusion site against 0.21-0.32: the
# 37 weights' operators cost more than copying them.)
HASH_COLUMNS = 1024


@functools.lru_cache(maxsize=16)
def _pseudo_random(count: int, salt: float, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """`count` weights in (0, 1), the same on every call, aligned with no pattern weights have."""
    angles = torch.arange(1, count + 1, dtype=torch.float64, device=device) * 12.9898 + salt
    return (torch.sin(angles) * 0.5 + 0.5001).to(dtype)


def contents_hash(weights: Sequence[torch.Tensor]) -> torch.Tensor:
    """A float64 0-d tensor that moves with the values of `weights` (computed without autocast: the same inside a
    forward under autocast as on a block's entry)."""
    with torch.no_grad():
        parts = [_real(w.detach()).reshape(-1) for w in weights]
        dtype = torch.float64 if any(w.dtype == torch.float64 for w in parts) else torch.float32
        flat = torch.cat([w.to(dtype) for w in parts])
        whole = flat.numel() - flat.numel() % HASH_COLUMNS
        columns = _pseudo_random(HASH_COLUMNS, 0.25, flat.device, flat.dtype)
        with _without_autocast(flat.device.type):
            sums = torch.cat(
                [flat[:whole].view(-1, HASH_COLUMNS) @ columns, flat[whole:] @ columns[: flat.numel() - whole, None]]
            )
            return sums.to(torch.float64) @ _pseudo_random(sums.numel(), 0.75, flat.device, torch.float64)


def _without_autocast(device_type: str) -> contextlib.AbstractContextManager[Any]:
    if torch.amp.is_autocast_available(device_type):
        return torch.autocast(device_type, enabled=False)
    return contextlib.nullcontext()


def parameters_of(modules: Sequence[nn.Module]) -> list[torch.Tensor]:
    """Every parameter of `modules` and their submodules (a shared one may come twice): what a prepared fold or
    lane is stamped with (weights_state, contents_hash) on each inference_cache block's first use, walked directly
    because Module.parameters() costs tens of microseconds per module in its de-duplicating generators."""
    found: list[torch.Tensor] = []
    pending = list(modules)
    while pending:
        module = pending.pop()
        found.extend(p for p in module._parameters.values() if p is not None)
        pending.extend(child for child in module._modules.values() if child is not None)
    return found
