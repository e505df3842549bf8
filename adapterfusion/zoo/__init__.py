"""The shipped adapter zoo: stage-1 adapters trained on real task data for the shipped encoder (all-MiniLM-L6-v2),
inside the package, as AdapterHub users pull pretrained adapters.

The adapters live in an ordinary AdapterStore (`zoo_store()`), one ST-A (Pfeiffer, reduction factor 16) and its
head per task, made by `examples/zoo-minilm.yaml` and copied here by `scripts/package_zoo.py`; `zoo_manifest()` says
for each what it scored on its dev set and where it came from (data, carve-outs, training config, hardware, commit).

    import adapterfusion as af
    from adapterfusion.zoo import load_zoo_adapter
    model = af.wrap(AutoModel.from_pretrained(af.default_encoder_path()))
    load_zoo_adapter(model, "mnli", head=True)      # an MNLI adapter and its 3-way head, ready to predict

An experiment file fuses them with `zoo: shipped` (see adapterfusion/experiments/spec.py).
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from adapterfusion.encoders import require_wrapped
from adapterfusion.errors import AdapterFusionError
from adapterfusion.tasks.spec import piece_name
from adapterfusion.training.run_files import read_json
from adapterfusion.training.store import ENTRY_FILE, AdapterStore, encoder_key

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel

ZOO_DIR = Path(__file__).resolve().parent
STORE_DIR = "store"
MANIFEST_FILE = "manifest.json"
SHIPPED = "shipped"  # how experiment files and setup options name this zoo
ZOO_SETUP = "st-a"


class ZooError(AdapterFusionError, LookupError):
    """A zoo lacks the adapter asked for, or a zoo path is not an AdapterStore."""


def zoo_store() -> AdapterStore:
    """The shipped zoo as an AdapterStore (keyed like any other: encoder, task, setup, seed)."""
    return AdapterStore(ZOO_DIR / STORE_DIR)


@lru_cache(maxsize=1)
def zoo_manifest() -> dict[str, Any]:
    """Provenance and dev metrics of every shipped adapter (see scripts/package_zoo.py)."""
    path = ZOO_DIR / MANIFEST_FILE
    if not path.is_file():
        raise ZooError(f"{path} is missing: this install has no adapter zoo (run scripts/package_zoo.py)")
    return read_json(
        path, "this install's adapter zoo is damaged; reinstall adapterfusion (or run scripts/package_zoo.py)"
    )


def zoo_tasks() -> list[str]:
    """The tasks the shipped zoo has an adapter for."""
    return sorted(zoo_manifest()["tasks"])


def resolve_zoo(zoo: str | os.PathLike) -> AdapterStore:
    """`shipped` (this package's zoo) or the folder of an AdapterStore (e.g. `<experiment>/adapters/st-a-rf16`)."""
    if str(zoo) == SHIPPED:
        return zoo_store()
    root = Path(zoo)
    if not root.is_dir():
        raise ZooError(f"zoo {str(zoo)!r} is neither {SHIPPED!r} nor an existing AdapterStore folder")
    return AdapterStore(root)


def zoo_seed(store: AdapterStore, encoder: str, task: str, setup: str = ZOO_SETUP) -> int:
    """The seed of the zoo's one adapter for (encoder, task, setup); a zoo with several seeds of it is ambiguous."""
    folder = store.path(encoder, task, setup, 0).parent
    seeds = sorted(int(p.parent.name.removeprefix("seed-")) for p in folder.glob(f"seed-*/{ENTRY_FILE}"))
    if len(seeds) == 1:
        return seeds[0]
    if not seeds:
        held = sorted({e["task"] for e in store.entries() if e.get("encoder_key") == encoder_key(encoder)})
        encoders = sorted({key for e in store.entries() if (key := e.get("encoder_key")) is not None})
        where = (
            f"it has {held} for this encoder"
            if held
            else f"it has no adapters for encoder {encoder_key(encoder)!r} (only for {encoders})"
        )
        raise ZooError(f"the zoo {store.root} has no {setup} adapter for task {task!r}: {where}")
    raise ZooError(
        f"the zoo {store.root} holds {setup} adapters of {task!r} for seeds {seeds}; a zoo source must be one"
    )


def load_zoo_adapter(
    model: AdaptedModel,
    task: str,
    name: str | None = None,
    head: bool = False,
    zoo: str | os.PathLike = SHIPPED,
    encoder: str | None = None,
) -> str:
    """Load the zoo's adapter for `task` into `model` (as `name`, default the task), with its head if `head`."""
    require_wrapped(model, "load_zoo_adapter")
    store = resolve_zoo(zoo)
    encoder = encoder if encoder is not None else model.fingerprint.name_or_path
    seed = zoo_seed(store, encoder, task)
    return store.load_into(model, task, ZOO_SETUP, seed, encoder=encoder, name=name or piece_name(task), head=head)
