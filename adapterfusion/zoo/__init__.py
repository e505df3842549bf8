"""The shipped adapter zoo: stage-1 adapters trained on real task data for the shipped encoder (all-MiniLM-L6-v2),
inside the package, as AdapterHub users pull pretrained adapters.

The adapters live in an ordinary AdapterStore (`zoo_store()`), one ST-A (Pfeiffer, reduction factor 16) and its
head per task, made by `examples/zoo-minilm.yaml` and copied here by `scripts/package_zoo.py`; `zoo_manifest()` says
for each what it scored on its dev set and where it came from (data, carve-outs, training config, hardware, commit).

    import adapterfusion as af
    from adapterfusion.zoo import load_zoo_adapter
    model = af.wrap(AutoModel.from_pretrained(af.default_encoder_path()))
    load_zoo_adapter(model, "mnli", head=True)      # an MNLI adapter and its 3-way head, ready to predict

An experiment file fuses them with `zoo: shipped` (see adapterfusion/experiments/spec.py). Where the zoo is and its
manifest live in defaults.py, the stores it is read as (`zoo_store`, `resolve_zoo`, `zoo_seed`) in training/store.py,
which fusion setups resolve their sources with; they are re-exported here.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from adapterfusion._validation import check_piece_name, require_wrapped, short_repr
from adapterfusion.defaults import MANIFEST_FILE, STORE_DIR, ZOO_DIR, zoo_manifest
from adapterfusion.errors import ZooError
from adapterfusion.io.hub import id_problem
from adapterfusion.tasks.spec import TaskSpec, piece_name
from adapterfusion.training.store import SHIPPED, ZOO_SETUP, model_encoder, resolve_zoo, zoo_seed, zoo_store

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel

__all__ = [
    "MANIFEST_FILE",
    "SHIPPED",
    "STORE_DIR",
    "ZOO_DIR",
    "ZOO_SETUP",
    "ZooError",
    "load_zoo_adapter",
    "resolve_zoo",
    "zoo_manifest",
    "zoo_seed",
    "zoo_store",
    "zoo_tasks",
]


def zoo_tasks() -> list[str]:
    """The tasks the shipped zoo has an adapter for: the keys of its manifest's `tasks` object. A damaged manifest
    (a list, no `tasks`, `tasks` a string) failed with a KeyError or TypeError, or listed a string's letters."""
    manifest = zoo_manifest()
    tasks = manifest.get("tasks") if isinstance(manifest, dict) else None
    if not isinstance(tasks, dict) or not all(isinstance(task, str) for task in tasks):
        raise ZooError(
            f"{ZOO_DIR / MANIFEST_FILE} holds no 'tasks' object naming the zoo's tasks ({short_repr(manifest)}): this "
            "install's adapter zoo is damaged; reinstall adapterfusion (or run scripts/package_zoo.py)"
        )
    return sorted(tasks)


def load_zoo_adapter(
    model: AdaptedModel,
    task: str | TaskSpec,
    name: str | None = None,
    head: bool = False,
    zoo: str | os.PathLike = SHIPPED,
    encoder: str | None = None,
    overwrite: bool = False,
) -> str:
    """Load the zoo's adapter for `task` (its name, or its TaskSpec) into `model` (as `name`, default the task), with
    its head if `head`; `overwrite` replaces an adapter (and head) of that name already loaded."""
    require_wrapped(model, "load_zoo_adapter")
    if isinstance(task, TaskSpec):  # the zoo keys its adapters by the task's name
        task = task.name
    if not isinstance(task, str):  # 5 was 'store entry task 5 cannot be a folder name'
        raise ZooError(
            f"task={short_repr(task)} has type {type(task).__name__}; give the name of a task the zoo has an adapter "
            "for (a str, e.g. 'rte'; zoo_tasks() lists the shipped zoo's)"
        )
    if encoder is not None and not (isinstance(encoder, str) and encoder.strip()):  # 5 was read as encoder '5'
        raise ZooError(
            f"encoder={encoder!r} is not an encoder's name; give the path or Hub id the zoo's adapters were trained "
            "on (a str), or leave it out for the model's own"
        )
    problem = id_problem(encoder) if encoder is not None and not os.path.exists(encoder) else None
    if problem is not None:  # a web address was keyed by the last two parts of its path
        raise ZooError(f"encoder={encoder!r} {problem}")
    name = piece_name(task) if name is None else check_piece_name(name, "adapter")  # '' was taken as no name
    store = resolve_zoo(zoo)
    encoder = encoder if encoder is not None else model_encoder(model, ZooError)
    seed = zoo_seed(store, encoder, task)
    return store.load_into(model, task, ZOO_SETUP, seed, encoder=encoder, name=name, head=head, overwrite=overwrite)
