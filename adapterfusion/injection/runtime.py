"""ForwardRuntime: what forwards record and reuse besides what runs, with one owner.

ActiveState (injection/state.py) says what runs. This says what the forwards inside a block collect (each fusion
site's softmax weights) and reuse (each fusion site's folded weights, fusion/layer.py `fold_fusion`). An
AdaptedModel holds one and hands the same reference to each AdapterSite it injects; nothing else writes it, and only
its two context managers switch each part on and off (behind `AdaptedModel.recording_fusion_attentions` and
`AdaptedModel.inference_cache`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch

from adapterfusion.fusion.layer import FoldedFusion

Recorder = dict[tuple[int, str], torch.Tensor]


class ForwardRuntime:
    """Off until a block switches a part on: `recording()` collects fusion attention, `caching()` keeps folds."""

    def __init__(self) -> None:
        self._recorder: Recorder | None = None
        self._folded: dict[tuple[str, str], FoldedFusion] | None = None
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

    def folded(self, site: str, key: str, fold: Callable[[], FoldedFusion]) -> FoldedFusion | None:
        """The folds for `key` at site `site` (made by `fold` on first use inside the block); None outside one."""
        if self._folded is None:
            return None
        if (site, key) not in self._folded:
            self._folded[(site, key)] = fold()
        return self._folded[(site, key)]
