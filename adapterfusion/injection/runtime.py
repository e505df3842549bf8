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
from typing import Any, NamedTuple, Protocol, TypeVar, cast

import torch
from torch import nn
from torch._utils import _flatten_dense_tensors

from adapterfusion.errors import ConfigError
from adapterfusion.fusion.layer import FoldedFusion

Recorder = dict[tuple[int, str], torch.Tensor]


class LaneHolder(Protocol):
    """A site that keeps a lane of the running block (site.py)."""

    def forget_lane(self) -> None: ...


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
        # inside `extending`: the position the running generation step starts at (its cached length); None outside
        # one and before the first step (an encoder-decoder's encoder runs then), and the sites the steps recorded
        self._step_start: int | None = None
        self._stepped: set[tuple[int, str]] = set()
        # The sites holding a lane of the running block (site.py `_lane`), told to drop it when the block ends,
        # a recording begins or ends, or the pieces change.
        self._lane_holders: list[LaneHolder] = []

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
        self._forget_lanes()  # lanes record nothing: the general path runs while recording
        try:
            yield recorder
        finally:
            self._recorders = previous
            self._forget_lanes()

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
        self._forget_lanes()
        try:
            self._drop_stale(check_values)  # inside: an error here (out of memory, Ctrl-C) still ends the block
            yield
        finally:
            self._folded, self._check_values, self._placement = previous
            self._forget_lanes()

    def pieces_changed(self) -> None:
        """An adapter or fusion was added, replaced or removed: inside a caching block, what the block prepared so
        far is dropped (a new block object, so sites make their lanes again), since a replaced piece keeps its name
        and would otherwise run the old one's folds. Folds kept between blocks are checked by their weights'
        stamps, which a new module's tensors do not match."""
        if self._folded is not None:
            self._folded = {}
            self._forget_lanes()

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
        """Inside the block a recording grows along the positions instead of being replaced: a step that starts at
        position s (`starting_at`: its KV cache's length) keeps the recording's first s positions and adds its own,
        as the cache keeps its first s tokens (a step verifying candidate tokens, assisted decoding, runs positions
        the next step runs again once the rejected ones are cropped); one that starts at 0 (the prompt, or every
        step of uncached generation) replaces it. `ending_at` then cuts what the steps recorded to the cache's final
        length, so the block ends with the weights of every position once, of this generate() call alone."""
        previous = self._step_start, self._stepped
        self._step_start, self._stepped = None, set()
        try:
            yield
        finally:
            self._step_start, self._stepped = previous

    def starting_at(self, position: int) -> None:
        """The position the next forward's first token has (the cache's length), inside `extending`."""
        self._step_start = position

    def ending_at(self, length: int) -> None:
        """Inside `extending`, after the last step: keep the first `length` positions (the cache's final length) of
        what the steps recorded; a last step that verified candidate tokens ran rejected ones past it."""
        for recorder in self._recorders:
            for key in self._stepped:
                weights = recorder.get(key)
                if weights is not None and weights.shape[-2] > length:
                    recorder[key] = weights[..., :length, :]

    def holds_lane(self, site: LaneHolder) -> None:
        """`site` keeps a lane of the running block until `_forget_lanes`."""
        self._lane_holders.append(site)

    def _forget_lanes(self) -> None:
        holders, self._lane_holders = self._lane_holders, []
        for site in holders:
            site.forget_lane()

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

    def record(self, layer: int, position: str, weights: torch.Tensor, application: int = 0) -> None:
        """Keep the fusion site (layer, position)'s softmax weights in every open recording block. `application`: how
        often the site ran before in this forward, where its layer runs several times (ALBERT): the recording is then
        the mean over the applications, each weighing the same."""
        if application > 0:
            for recorder in self._recorders:
                earlier = recorder.get((layer, position))
                if earlier is not None and earlier.shape == weights.shape:
                    recorder[(layer, position)] = earlier + (weights - earlier) / (application + 1)
            return
        start = self._step_start or 0
        if self._step_start is not None:
            self._stepped.add((layer, position))
        for recorder in self._recorders:
            earlier = recorder.get((layer, position)) if start > 0 else None
            if earlier is not None and earlier.shape[:-2] == weights.shape[:-2] and earlier.shape[-2] >= start:
                recorder[(layer, position)] = torch.cat([earlier[..., :start, :], weights], dim=-2)
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
                values = contents_hashes(tensors) if self._check_values and tensors else ()
                earlier = Kept.of(tensors, values, make())
            kept[key] = earlier  # now the most recent
            while len(kept) > KEPT_PER_SITE:
                del kept[next(iter(kept))]
            self._folded[entry] = earlier.made
        return self._folded[entry]

    def _drop_stale(self, check_values: bool) -> None:
        """Forget every kept fold, lane or stack whose weights are gone (a piece deleted or replaced: the kept one
        holds them only weakly, so they are freed) or moved (cast, moved or reloaded since: `made_from` would make it
        again anyway, and dropping it now frees the storages it holds) and, with `check_values`, every one whose
        weights' values changed since it was made (a write through `p.data`, which changes neither a tensor's
        identity nor its version) or were never hashed (made in a check_values=False block). All kept ones are
        hashed at once, on the block's entry, each tensor once (a site's fold and lane share theirs), in a few
        operations over the whole list and one host read per device: a read per site, while the forward's kernels
        are queued, would make the host wait on each, and operations per tensor cost the host more than the device's
        work (thousands for a fused decoder: tens of milliseconds a block on a GPU)."""
        stale: list[tuple[tuple[str, str], str]] = []
        checked: list[tuple[tuple[str, str], str, tuple[torch.Tensor, ...], tuple[float, ...]]] = []
        for place, kept in self._kept.items():
            for key, one in kept.items():
                tensors = one.tensors()
                if (
                    tensors is None
                    or weights_state(tensors) != one.state
                    or (check_values and tensors and not one.values)
                ):
                    stale.append((place, key))
                elif check_values and tensors:
                    checked.append((place, key, tensors, one.values))
        if checked:
            unique = {id(t): t for *_, tensors, _ in checked for t in tensors}
            now = dict(zip(unique, contents_hashes(list(unique.values())), strict=True))
            for place, key, tensors, then in checked:
                if tuple(now[id(t)] for t in tensors) != then:
                    stale.append((place, key))
        for place, key in stale:
            del self._kept[place][key]


class Kept(NamedTuple):
    """A prepared thing kept between blocks: weak references to the tensors it was made from (a deleted piece's
    tensors are freed, not kept alive here), their storage, version and dtype then, the hash of their values (where
    hashed) and what was made. It holds their storages while it is kept, so that no later tensor can take the
    address of one (a CUDA caching allocator hands a freed block of the same size straight back:
    `model.half().float()` would give the weights their old addresses with the same version and dtype, and new
    values, which check_values=False would not see); `_drop_stale` lets them go on the next block's entry."""

    refs: tuple[weakref.ref[torch.Tensor], ...]
    state: tuple[tuple[int, int, torch.dtype], ...]
    values: tuple[float, ...]
    made: Any
    storages: tuple[torch.UntypedStorage, ...]

    @classmethod
    def of(cls, tensors: Sequence[torch.Tensor], values: tuple[float, ...], made: Any) -> Kept:
        storages = tuple(t.untyped_storage() for t in tensors)
        return cls(tuple(weakref.ref(t) for t in tensors), weights_state(tensors), values, made, storages)

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
    """Storage, in-place version and dtype of each tensor. Values are hashed apart (`contents_hashes`), since a write
    through `p.data` (the EMA / weight-averaging idiom) changes them and nothing else."""
    return tuple((w.data_ptr(), w._version, w.dtype) for w in weights)


# A weight's hash. On a CPU: the sum of its values, each weighted by a fixed pseudo-random number in (0, 1) by
# position, in float64 (a product per tensor, each copied into one reused buffer: cheaper than an allocation each). Any
# change of one value moves it by about change·weight, relative to that value (a float32 weight's change of a unit in
# its last place is seen, whatever the tensor's size), and a sign flip, abs_() or permutation moves it too.
# On a GPU, where each operation costs the host more than the device's work: the weight's bit patterns as integers,
# each times a pseudo-random odd int64 by position, summed per tensor modulo 2**64 (torch's integer arithmetic wraps).
# Exact, so a tensor's sum is the same whatever the order of summation or the rest of the list, and a change of any one
# value always moves it (a nonzero change of a 32-bit word times an odd number is never 0 modulo 2**64). All of a
# dtype's tensors go through one flattened buffer per chunk of HASH_CHUNK numbers, a dozen operators whatever their
# count: the _foreach form before it returned a tensor per tensor and operator to Python, 17 ms of host time a block for
# a fused 30-layer decoder's ~1,100 kept tensors on an H100 (benchmarks/README.md, the fifth lease).
HASH_CHUNK = 1 << 22  # numbers: a GPU's chunk takes about 40 bytes each at once (its int64 sums)
HASHED_ONE_BY_ONE = {"cpu"}  # device types whose tensors are hashed a tensor at a time (the rest: in chunks)


@functools.lru_cache(maxsize=256)
def _noise(shape: torch.Size, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """The same pseudo-random weights in (0, 1) for every tensor of this shape, aligned with no pattern weights have."""
    angles = torch.arange(1, shape.numel() + 1, dtype=torch.float64, device=device) * 12.9898 + 0.25
    return (torch.sin(angles) * 0.5 + 0.5001).to(dtype).view(shape)


def _hashable(weight: torch.Tensor) -> torch.Tensor:
    """A weight as real floating-point numbers (a complex one as its real and imaginary parts). No detach: the hash runs
    under no_grad, and an operation per tensor is what it avoids on a GPU."""
    if weight.is_complex():
        return torch.view_as_real(weight)
    return weight if weight.is_floating_point() else weight.to(torch.float64)


def contents_hashes(weights: Sequence[torch.Tensor]) -> tuple[float, ...]:
    """One number per tensor of `weights`, in order, that moves with its values (see HASH_CHUNK): one host read per
    device, computed without autocast (the same inside a forward under autocast as on a block's entry). Each tensor's
    hash is its own, whatever else the list holds."""
    real = [_hashable(w) for w in weights]
    by_device: dict[torch.device, list[int]] = {}
    for i, w in enumerate(real):
        by_device.setdefault(w.device, []).append(i)
    hashes = [0.0] * len(real)
    with torch.no_grad():
        for device, members in by_device.items():
            with _without_autocast(device.type):
                order, sums = _hashes_on(device, [(i, real[i]) for i in members])
            for i, value in zip(order, sums.tolist(), strict=True):
                hashes[i] = value
    return tuple(hashes)


def _hashes_on(device: torch.device, members: list[tuple[int, torch.Tensor]]) -> tuple[list[int], torch.Tensor]:
    """The hashes of one device's tensors, as (their indices, a tensor of their hashes in that order)."""
    if device.type in HASHED_ONE_BY_ONE:
        return _one_by_one(members)
    try:
        return _batched(device, members)
    except (RuntimeError, NotImplementedError, TypeError):  # a backend without int64 cumsum or float64 (MPS)
        return _one_by_one(members)


def _one_by_one(members: list[tuple[int, torch.Tensor]]) -> tuple[list[int], torch.Tensor]:
    """On the CPU, a tensor at a time: each tensor's float64 copy into one buffer (a fresh allocation per tensor costs
    more than the product), then its product with the noise."""
    buffer = torch.empty(max(w.numel() for _, w in members), dtype=torch.float64)
    cpu = buffer.device
    sums = []
    for _, w in members:
        part = buffer[: w.numel()]
        part.view(w.shape).copy_(w)
        sums.append(torch.dot(part, _noise(part.shape, cpu, torch.float64)))
    return [i for i, _ in members], torch.stack(sums)


def _batched(device: torch.device, members: list[tuple[int, torch.Tensor]]) -> tuple[list[int], torch.Tensor]:
    """On a GPU, each dtype's tensors in chunks through one flattened buffer (see HASH_CHUNK)."""
    groups: dict[torch.dtype, list[tuple[int, torch.Tensor]]] = {}
    for i, w in members:
        groups.setdefault(w.dtype, []).append((i, w))
    order: list[int] = []
    parts: list[torch.Tensor] = []
    for group in groups.values():
        for chunk in _chunks(group):
            parts.append(_bit_sums(device, [w for _, w in chunk]))
            order.extend(i for i, _ in chunk)
    return order, torch.cat(parts)


# Each number's bits as integers of at most 32 bits (a float64 as two): a change of a whole 64-bit word, such as a sign
# flip of every float64 (2**63 each), would cancel modulo 2**64 over an even count.
_WORDS_AS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int32}
_POSITION_MIX = (-7046029254386353131, 1442695040888963407)  # odd multiplier and increment of a 64-bit LCG step


def _bit_sums(device: torch.device, tensors: list[torch.Tensor]) -> torch.Tensor:
    """int64 per tensor of one dtype: Σ word_k · c_k modulo 2**64 over its numbers' bits as words (_WORDS_AS), with c_k
    odd and pseudo-random by position k in its own tensor (values in logical order, as a contiguous copy holds them)."""
    flat = _flatten_dense_tensors(tensors)
    words = flat.view(_WORDS_AS[flat.element_size()])
    per_number = words.numel() // max(flat.numel(), 1)
    bits = words.to(torch.int64)
    lengths = torch.tensor([w.numel() * per_number for w in tensors], device=device)
    ends = lengths.cumsum(0)
    starts = ends - lengths
    own_start = torch.repeat_interleave(starts, lengths, output_size=bits.numel())
    position = torch.arange(bits.numel(), device=device).sub_(own_start)
    mixed = position.mul_(_POSITION_MIX[0]).add_(_POSITION_MIX[1])
    multipliers = mixed.bitwise_xor_(mixed >> 29).bitwise_or_(1)
    running = torch.cat([bits.new_zeros(1), bits.mul_(multipliers).cumsum(0)])  # wraps: differences stay exact
    return running[ends] - running[starts]


def _chunks(members: list[tuple[int, torch.Tensor]]) -> Iterator[list[tuple[int, torch.Tensor]]]:
    """`members` in runs of at most HASH_CHUNK numbers together (a larger tensor alone): the sums' memory."""
    run: list[tuple[int, torch.Tensor]] = []
    total = 0
    for member in members:
        size = member[1].numel()
        if run and total + size > HASH_CHUNK:
            yield run
            run, total = [], 0
        run.append(member)
        total += size
    if run:
        yield run


def _without_autocast(device_type: str) -> contextlib.AbstractContextManager[Any]:
    if torch.amp.is_autocast_available(device_type):
        return torch.autocast(device_type, enabled=False)
    return contextlib.nullcontext()


def parameters_of(modules: Sequence[nn.Module]) -> list[torch.Tensor]:
    """Every parameter of `modules` and their submodules (a shared one may come twice): what a prepared fold or
    lane is stamped with (weights_state, contents_hashes) on each inference_cache block's first use, walked directly
    because Module.parameters() costs tens of microseconds per module in its de-duplicating generators."""
    found: list[torch.Tensor] = []
    pending = list(modules)
    while pending:
        module = pending.pop()
        found.extend(p for p in module._parameters.values() if p is not None)
        pending.extend(child for child in module._modules.values() if child is not None)
    return found
