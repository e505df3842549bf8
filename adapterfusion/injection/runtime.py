"""ForwardRuntime: what forwards record and reuse besides what runs, with one owner.

ActiveState (injection/state.py) says what runs. This says what the forwards inside a block collect (each fusion
site's softmax weights) and reuse (each fusion site's folded weights, fusion/layer.py `fold_fusion`). An
AdaptedModel holds one and hands the same reference to each AdapterSite it injects; nothing else writes it, and only
its two context managers switch each part on and off (behind `AdaptedModel.recording_fusion_attentions` and
`AdaptedModel.inference_cache`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator

import torch

from adapterfusion.fusion.layer import FoldedFusion

Recorder = dict[tuple[int, str], torch.Tensor]


class ForwardRuntime:
    """Off until a block switches a part on: `recording()` collects fusion attention, `caching()` keeps folds."""

    def __init__(self) -> None:
        self._recorder: Recorder | None = None
        self._folded: dict[tuple[str, str], FoldedFusion] | None = None
        # The last fold of each site, kept between blocks with the weights it was made from: a later block (the
        # next generate() or evaluation call) reuses it while those weights are unchanged (see `folded`).
        self._kept: dict[str, tuple[str, WeightsStamp, FoldedFusion]] = {}
        self._extending = False

    @contextlib.contextmanager
    def recording(self, enabled: bool = True) -> Iterator[Recorder | None]:
        """Inside the block `record` fills the yielded dict (None, and nothing recorded, with enabled=False)."""
        previous, self._recorder = self._recorder, {} if enabled else None
        try:
            yield self._recorder
        finally:
            self._recorder = previous

    @contextlib.contextmanager
    def caching(self) -> Iterator[None]:
        """Inside the block `folded` folds each fusion site's weights once; the folds are dropped on exit."""
        previous, self._folded = self._folded, {}
        try:
            yield
        finally:
            self._folded = previous

    @contextlib.contextmanager
    def extending(self) -> Iterator[None]:
        """Inside the block a recording grows along the positions instead of being replaced: generation's steps
        (one new position each, with the KV cache) add up to the weights of every position the model ran."""
        previous, self._extending = self._extending, True
        try:
            yield
        finally:
            self._extending = previous

    @property
    def is_recording(self) -> bool:
        return self._recorder is not None

    @property
    def is_caching(self) -> bool:
        return self._folded is not None

    def record(self, layer: int, position: str, weights: torch.Tensor) -> None:
        """Keep the fusion site (layer, position)'s softmax weights, if recording."""
        if self._recorder is None:
            return
        earlier = self._recorder.get((layer, position)) if self._extending else None
        if earlier is not None and earlier.shape[:-2] == weights.shape[:-2]:
            weights = torch.cat([earlier, weights], dim=-2)
        self._recorder[(layer, position)] = weights

    def folded(
        self,
        site: str,
        key: str,
        fold: Callable[[], FoldedFusion],
        weights: Callable[[], Iterable[torch.Tensor]] = tuple,
    ) -> FoldedFusion | None:
        """The folds for `key` at site `site` (made by `fold` on first use inside the block); None outside one.
        `weights()`: the tensors the fold is made from (asked for on a block's first use only). The site's last
        fold is kept after the block and reused by a later one while every one of them is the same tensor,
        unmodified (same storage, same version counter), so repeated short calls (generation, serving) fold once;
        an optimizer step or `.to()` makes a new fold."""
        if self._folded is None:
            return None
        if (site, key) not in self._folded:
            stamp = weights_stamp(weights())
            kept = self._kept.get(site)
            if kept is not None and kept[0] == key and kept[1] == stamp:
                self._folded[(site, key)] = kept[2]
            else:
                self._folded[(site, key)] = fold()
                self._kept[site] = (key, stamp, self._folded[(site, key)])
        return self._folded[(site, key)]


WeightsStamp = tuple[tuple[int, int, int, torch.dtype], ...]


def weights_stamp(weights: Iterable[torch.Tensor]) -> WeightsStamp:
    """Which tensors, in which state: object, storage, in-place version and dtype of each."""
    return tuple((id(w), w.data_ptr(), w._version, w.dtype) for w in weights)
