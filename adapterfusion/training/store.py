"""`AdapterStore`: stage-1 adapters and their heads, keyed by (encoder, task, setup, seed), in a fixed layout

    <root>/<encoder>/<task>/<setup>/seed-<seed>/adapter/   (adapter.safetensors + adapter_config.json)
                                                head/      (head.safetensors + head_config.json)
                                                entry.json (where it came from, which encoder)

so stage 2 (fusion) finds the adapters of stage 1. The folder name says which encoder only by its last two path
parts, so entry.json records the encoder's identity (sizes and a digest of its weights, encoders.encoder_identity)
and loading refuses a model whose encoder has other weights. An entry is found by its folder, so entry.json also
records what it was stored for (encoder folder, task, setup, seed) and the sha256 of its adapter and head files, and
loading refuses an entry copied, renamed or overwritten by hand; entries written before those records (the shipped
zoo) are matched by the folder name alone. Two encoders whose paths end alike (/a/models/bert, /b/models/bert) share a
folder name: an entry is never replaced by another encoder's adapter, even with overwrite (check_entry_encoder).
Each entry is written into a temporary folder beside its final place and renamed into it, so a crash never leaves
half an entry, and adding a task never touches others.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from adapterfusion._validation import check_bool, check_int, check_piece_name, naming_file, require_wrapped, short_repr
from adapterfusion.defaults import (
    DEFAULT_ENCODER_HUB_ID,
    MANIFEST_FILE,
    STORE_DIR,
    ZOO_DIR,
    default_encoder_path,
    zoo_manifest,
)
from adapterfusion.encoder_identity import check_same_encoder, encoder_identity
from adapterfusion.encoders import encoder_key
from adapterfusion.errors import (
    AdapterFusionError,
    ConfigError,
    PieceExistsError,
    RunFileError,
    SerializationError,
    ZooError,
)
from adapterfusion.io.atomic import atomic_write_json, recover_replaced, replace_folder
from adapterfusion.io.hub_ids import hub_ref
from adapterfusion.io.paths import (
    as_path,
    check_readable_file,
    check_readable_folder,
    check_replaceable,
    check_writable_folder,
    check_writable_tree,
    describe,
    out_of_reach,
    path_part,
    permission_denied,
)
from adapterfusion.run_layout import CONFIG_FILE, ENTRY_FILE, SEED_PREFIX, seed_folder
from adapterfusion.serialization.formats import read_piece
from adapterfusion.serialization.model_pieces import layout
from adapterfusion.serialization.pieces import config_path, piece_digest, weights_path
from adapterfusion.serialization.setup_load import piece_source
from adapterfusion.tasks.spec import GENERATION
from adapterfusion.training.config import MAX_SEED, SEED_RANGE_REASON
from adapterfusion.training.errors import TrainingError
from adapterfusion.training.run_files import LOCK_FILE, read_json
from adapterfusion.training.run_lock import lock_holder

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel
    from adapterfusion.piece import Piece

SHIPPED = "shipped"  # how experiment files and setup options name the shipped zoo
ZOO_SETUP = "st-a"  # the setup of a zoo's adapters
MT_A = "mt-a"  # the multi-task setup (training/setups.py): its entries come from train_multitask, not train
IDENTITY_KEY = "identity"  # where the zoo manifest's `encoder` records encoders.encoder_identity of its encoder


def _piece_files(kind: str) -> tuple[str, str]:
    """The two files save_<kind> writes (serialization/pieces.py): all of a run's piece that a store entry holds."""
    return weights_path(Path(), kind).name, config_path(Path(), kind).name


def _copy_piece(source: Path, folder: Path, kind: str) -> Path:
    """Copy a run's piece into a new entry folder: its own files only, so a file the user keeps beside them in the
    run folder stays there, and never becomes an entry's file that no later put() may replace."""
    folder.mkdir()
    for name in _piece_files(kind):
        shutil.copy2(source / name, folder / name)
    return folder


# Every file an entry holds (relative, '/'-separated): what replacing an entry may delete, and nothing else.
ENTRY_FILES = frozenset(
    {ENTRY_FILE, *(f"{kind}/{name}" for kind in ("adapter", "head") for name in _piece_files(kind))}
)


def check_entry_replaceable(entry: Path, error: type[AdapterFusionError] = ConfigError) -> None:
    """Refuse to replace the store entry `entry` while it holds a file we did not write (one of the user's)."""
    check_replaceable(entry, "the store entry", lambda name: name in ENTRY_FILES, error)


def _place(encoder: str) -> str | None:
    """Where `encoder` is, as far as its text says: an absolute path resolved, a Hub id (no such local path) as it is,
    None for a relative local path (relative to a working dir that was not recorded)."""
    if os.path.isabs(encoder):
        return os.path.realpath(encoder)
    return None if os.path.exists(encoder) else encoder


def _entry_record(entry: Path) -> dict[str, Any]:
    """The store entry's entry.json; {} where there is none, or it is damaged (check_entry_replaceable judges that)."""
    try:
        recorded = read_json(entry / ENTRY_FILE, "")
    except RunFileError:
        return {}
    return recorded if isinstance(recorded, dict) else {}


def entry_encoder(entry: Path) -> str | None:
    """The encoder the store entry `entry` recorded (None where no readable entry.json names one)."""
    encoder = _entry_record(entry).get("encoder")
    return encoder if isinstance(encoder, str) else None


def check_entry_encoder(
    entry: Path, encoder: str, identity: Mapping[str, Any] | None, run_dir: Path | None = None
) -> None:
    """Refuse (TrainingError), even with overwrite, to put an adapter of `encoder` into the entry `entry` that holds
    another encoder's: the folder name keeps only the last two parts of an encoder's path (encoder_key), so
    /a/models/bert and /b/models/bert share it. It is the same encoder at the same place (retrained there: its new
    adapter replaces the old) or with the same weights (moved); else, or where neither is known, it is another, whose
    entry is replaced only as the store entry of the run folder `run_dir` that put() copied it from (train() with
    overwrite replaces a run and its entry, as the experiment runner re-runs a job whose encoder changed)."""
    recorded = _entry_record(entry)
    earlier = recorded.get("encoder")
    if not isinstance(earlier, str):
        return
    then, now = _place(earlier), _place(str(encoder))
    saved = recorded.get("encoder_identity")
    saved_digest = saved.get("weights_sha256") if isinstance(saved, Mapping) else None
    digest = identity.get("weights_sha256") if identity else None
    source = recorded.get("source")
    same_run = (
        run_dir is not None
        and isinstance(source, str)
        and os.path.isabs(source)
        and os.path.realpath(source) == os.path.realpath(run_dir)
    )
    if (then is not None and then == now) or (saved_digest is not None and saved_digest == digest) or same_run:
        return
    raise TrainingError(
        f"the store entry {entry} holds the adapter of another encoder, {earlier!r}"
        + (f" (weights sha256 {str(saved_digest)[:12]})" if saved_digest else "")
        + f": the store names an encoder's folder by the last two parts of its path ({encoder_key(encoder)!r}), "
        f"which {str(encoder)!r} shares, and an entry is never replaced by another encoder's adapter, even with "
        "overwrite=True. Give this encoder's runs a store of their own (store=..., CLI: --store), or, if that "
        "adapter is no longer needed, move the entry out of the store yourself"
    )


class AdapterStore:
    def __init__(self, root: str | os.PathLike) -> None:
        self.root = as_path(root, "AdapterStore folder")
        if describe(self.root) not in ("a folder", "nothing"):
            raise ConfigError(
                f"AdapterStore folder {str(self.root)!r} is {describe(self.root)}, not a folder; give the store's "
                "folder (or a new path for a new store)"
            )

    def path(self, encoder: str, task: str, setup: str, seed: int) -> Path:
        """The entry's folder (whether or not it exists). `encoder` is a path or Hub id, or an encoder_key. `task`
        and `setup` may come from a run's config.json, so each must be one plain folder name; `seed` a run's seed,
        an integer (seed_folder would make 1.5 and True seed-1: another run's adapter)."""
        check_int(seed, "seed", minimum=0, maximum=MAX_SEED, why_maximum=SEED_RANGE_REASON)
        return (
            self.root
            / encoder_key(_check_encoder(self.encoder_for(encoder)))
            / path_part(task, "store entry task")
            / path_part(setup, "store entry setup")
            / seed_folder(seed)
        )

    def encoder_for(self, encoder: str) -> str:
        """The encoder whose folder keys `encoder`'s entries here: `encoder` itself (ShippedZoo knows another name
        of its encoder)."""
        return encoder

    def has(self, encoder: str, task: str, setup: str, seed: int) -> bool:
        return os.path.isfile(self.path(encoder, task, setup, seed) / ENTRY_FILE)

    def adapter_record(self, encoder: str, task: str, setup: str, seed: int) -> dict[str, str]:
        """Which stored adapter this is, exactly: its entry folder and the sha256 of its files (piece_digest)."""
        entry = self.path(encoder, task, setup, seed)
        return {"entry": str(entry.resolve()), "sha256": piece_digest(entry / "adapter")}

    def entries(self) -> list[dict[str, Any]]:
        """Every complete entry's entry.json content."""
        return [
            _read_entry(p)
            for p in sorted(self.root.glob(f"*/*/*/{SEED_PREFIX}*/{ENTRY_FILE}"))
            if _entry_seed(p.parent.name) is not None
        ]

    def put(self, run_dir: str | os.PathLike, overwrite: bool = False) -> Path:
        """Copy the adapter and head a `train()` run saved in `run_dir` into the store (a generation task's run has
        no head: its adapter alone)."""
        run_dir = as_path(run_dir, "the run folder", TrainingError)
        config_file = run_dir / CONFIG_FILE
        if os.path.lexists(run_dir) or out_of_reach(run_dir):  # one this user may not read is said as such
            check_readable_folder(run_dir, f"the run folder {str(run_dir)!r}", TrainingError)
        if not config_file.is_file():
            raise TrainingError(f"{run_dir} has no config.json; put() takes the run folder that train() wrote")
        _check_not_training(run_dir)
        run = read_json(config_file, "put() takes the run folder that train() wrote")
        absent = [key for key in ("encoder", "task", "setup", "seed") if not isinstance(run, dict) or key not in run]
        if absent:
            raise SerializationError(f"{config_file} lacks {absent}; put() takes the run folder that train() wrote")
        with naming_file(config_file):  # its task and setup become folder names in the store
            self.path(run["encoder"], run["task"], run["setup"], run["seed"])
        identity = run.get("encoder_identity")
        pieces = {kind: run_dir / kind for kind in ("adapter", "head")}
        task_spec = run.get("task_spec")
        if not pieces["head"].is_dir() and isinstance(task_spec, dict) and task_spec.get("kind") == GENERATION:
            del pieces["head"]  # a generation task's adapter works with the language model's own head
        missing = [str(p) for p in pieces.values() if not p.is_dir()]
        if missing:
            raise TrainingError(
                f"run {run_dir} saved no {missing}; only adapter setups (st-a, st-a-houlsby) go into a store"
            )
        for kind, piece in pieces.items():  # copied into the store: each file must be one this user may read
            check_readable_folder(piece, error=TrainingError)
            for name in _piece_files(kind):
                check_readable_file(
                    piece / name,
                    "put() copies it into the store",
                    error=TrainingError,
                    missing=f"the run saved no {kind} there (it was cut short, or the file was moved): train it again",
                )
        return self._commit(
            run["encoder"],
            run["task"],
            run["setup"],
            run["seed"],
            overwrite,
            lambda tmp: [_copy_piece(src, tmp / kind, kind) for kind, src in pieces.items()],
            run_dir=run_dir,
            identity=identity if isinstance(identity, Mapping) else None,
        )

    def put_model(
        self,
        model: AdaptedModel,
        adapter: str,
        head: str | None,
        encoder: str,
        task: str,
        setup: str,
        seed: int,
        overwrite: bool = False,
    ) -> Path:
        """Save adapter `adapter` (and head `head`) of a live model into the store."""
        require_wrapped(model, "AdapterStore.put_model")

        def write(tmp: Path) -> None:
            model.save_adapter(adapter, tmp / "adapter")
            if head is not None:
                model.save_head(head, tmp / "head")

        return self._commit(
            encoder, task, setup, seed, overwrite, write, run_dir=None, identity=encoder_identity(model)
        )

    def _commit(
        self,
        encoder: str,
        task: str,
        setup: str,
        seed: int,
        overwrite: bool,
        write,
        run_dir: Path | None,
        identity: Mapping[str, Any] | None,
    ) -> Path:
        """Write the entry (`write` fills its temp folder) of a run folder `run_dir`'s pieces, or of a live model's."""
        check_bool(overwrite, "overwrite")  # "no" would replace a stored adapter: a str is truthy
        final = self.path(encoder, task, setup, seed)
        recover_replaced(final)  # an entry a writer killed while replacing it had moved aside: back in place
        check_entry_encoder(final, encoder, identity, run_dir)  # before "pass overwrite=True", not the fix here
        if final.exists() and not overwrite:
            raise TrainingError(f"the store already holds {final}; pass overwrite=True to replace it")
        check_entry_replaceable(final)  # no user file is lost
        self._check_writable(final)

        def write_entry(tmp: Path) -> None:
            write(tmp)
            atomic_write_json(
                tmp / ENTRY_FILE,
                {
                    "encoder": str(encoder),
                    "encoder_key": encoder_key(encoder),
                    "task": task,
                    "setup": setup,
                    "seed": int(seed),
                    # absolute: which run folder it came from, whatever the working dir (check_entry_encoder)
                    "source": "model" if run_dir is None else str(Path(run_dir).absolute()),
                    # what _check_entry_pieces compares the entry's files with when it is loaded
                    **{
                        _digest_key(kind): piece_digest(tmp / kind)
                        for kind in ("adapter", "head")
                        if (tmp / kind).is_dir()
                    },
                    **({"encoder_identity": dict(identity)} if identity else {}),
                },
            )

        try:
            return replace_folder(final, write_entry, replace=overwrite)
        except FileNotFoundError as error:  # another writer of this entry removed this one's temp folder
            if not final.parent.exists():
                raise
            raise TrainingError(
                f"storing {final} failed ({error.strerror}: {error.filename}): another run is storing the same entry "
                "into this store at the same time; an entry is replaced only with overwrite=True, and this run's own "
                "results stay in its run folder"
            ) from None
        except FileExistsError:  # checked above, so another run stored this entry while this one ran
            raise TrainingError(
                f"the store already holds {final}: another run stored that entry while this one ran (both were "
                "started before either finished), and an entry is replaced only with overwrite=True; this run's "
                "own results stay in its run folder"
            ) from None

    def _check_writable(self, entry: Path) -> None:
        """Refuse, before anything is written, an entry this user could not write: the store (the entry is built in
        a temp folder beside it) or, when the entry is replaced, the old entry's folders (removed afterwards)."""
        check_writable_folder(self.root, "store")  # as train() checks its store
        fix = "choose a store you can write in, or change its permissions"
        check_writable_folder(entry.parent, "the store's folder", fix=fix)
        check_writable_folder(entry, "the store entry", fix=fix, built_aside=True)
        if entry.is_dir():
            check_writable_tree(entry, f"replacing the store entry {str(entry)!r} removes the old one", fix)

    def _held_for_other_encoders(self, entry: Path) -> str:
        """The part of a 'no stored adapter' message naming the encoder folders that hold an entry of the same task,
        setup and seed: an encoder spelt otherwise than when it was stored (a relative path, 'bert' for
        '/models/bert') has another folder, and 'train it first' would train it again."""
        relative = entry.relative_to(entry.parents[2])
        try:
            folders = sorted(self.root.iterdir())
        except OSError:  # no store yet, or one this user may not list: nothing to add
            return ""
        held = [
            folder.name
            for folder in folders
            if folder != entry.parents[2] and (folder / relative / ENTRY_FILE).is_file()
        ]
        if not held:
            return ""
        return (
            f". The store holds that entry for the encoder folder(s) {held}: if the encoder is one of those, spelt "
            "otherwise when the adapter was stored, pass encoder= as it was spelt then (its entry.json says)"
        )

    def load_into(
        self,
        model: AdaptedModel,
        task: str,
        setup: str,
        seed: int,
        encoder: str | None = None,
        name: str | None = None,
        head: bool = False,
        overwrite: bool = False,
        labels: Sequence[str] | None = None,
    ) -> str:
        """Load the stored adapter (as `name`, default the task) and, with head=True, its head under the same name.
        `encoder` defaults to the path the model was loaded from; with `labels` (the task's label names) a head
        saved for another label set is refused, as in AdaptedModel.load_head."""
        require_wrapped(model, "AdapterStore.load_into")
        check_bool(head, "head")
        check_bool(overwrite, "overwrite")
        if name is not None:  # '' (or 0) is refused as a name, not read as "none given" and replaced by the task's
            check_piece_name(name, "adapter")
        encoder = self.encoder_for(encoder if encoder is not None else model_encoder(model))
        entry = self.path(encoder, task, setup, seed)
        with contextlib.suppress(OSError):  # a store this user may not write: read as it is
            recover_replaced(entry)
        if out_of_reach(entry / ENTRY_FILE):
            raise permission_denied(entry / ENTRY_FILE, error=TrainingError)
        if not (entry / ENTRY_FILE).is_file():
            how = (
                f"train_multitask([{task!r}, <its other tasks>], seed={seed}, store=...)"  # train() refuses mt-a
                if setup == MT_A
                else f"train({task!r}, {setup!r}, seed={seed}, store=...)"
            )
            raise TrainingError(
                f"no stored adapter for task={task!r}, setup={setup!r}, seed={seed} "
                f"and encoder {encoder_key(encoder)!r} (looked in {entry}); train it first: {how}"
                + self._held_for_other_encoders(entry)
            )
        name = task if name is None else name
        pieces = _read_entry_pieces(model, entry, {"task": task, "setup": setup, "seed": seed}, head)
        if head and name in model.head_names and not overwrite:  # before the adapter loads, not after
            raise PieceExistsError(
                f"the model already has a head {name!r}; pass name= another name, or overwrite=True to replace its "
                "adapter and head",
                name,
            )
        replaced = model.export_piece("adapter", name) if head and name in model.adapter_names else None
        loaded = model.install_piece(pieces["adapter"].renamed(name), overwrite)
        if head:
            try:
                model.install_piece(pieces["head"].renamed(loaded), overwrite, labels)
            except BaseException:  # all or nothing: the adapter alone would stay loaded, and block a retry
                if replaced is not None:
                    model.install_piece(replaced, True)
                else:
                    model.delete_adapter(loaded)
                raise
        return loaded


_READ_TRIES = 5  # reads of an entry another process keeps replacing, before giving up


def _read_entry_pieces(model: AdaptedModel, entry: Path, asked: Mapping[str, Any], head: bool) -> dict[str, Piece]:
    """The entry's adapter (and, with `head`, head), checked against its entry.json and read from one version of the
    entry. put(overwrite=True) in another process replaces the entry folder whole: a load that read entry.json, the
    adapter and the head one after the other across that moment paired pieces of two trainings, or refused them as
    'replaced by hand'. So the entry is read again while its folder changed under the read."""
    for _ in range(_READ_TRIES):
        seen = _folder_id(entry)
        try:
            pieces = _read_entry_pieces_once(model, entry, asked, head)
        except (AdapterFusionError, OSError):
            if _folder_id(entry) == seen:
                raise
            continue
        if seen is not None and _folder_id(entry) == seen:
            return pieces
    raise TrainingError(
        f"the store entry {entry} was replaced {_READ_TRIES} times while it was read: another process keeps storing "
        "it (put with overwrite=True); load it once that process is done"
    )


def _read_entry_pieces_once(model: AdaptedModel, entry: Path, asked: Mapping[str, Any], head: bool) -> dict[str, Piece]:
    recorded = _read_entry(entry / ENTRY_FILE)
    _check_entry_matches(entry, recorded, asked)
    check_same_encoder(model, _encoder_identity(entry, recorded), entry)
    kinds = ("adapter", "head") if head else ("adapter",)
    _check_entry_pieces(entry, recorded, kinds)
    if head and not (entry / "head").is_dir():  # said as the entry's, not as a head folder (or Hub id) not found
        raise TrainingError(
            f"the store entry {entry} holds no head (stored without one: put_model(head=None), or a generation "
            "task's adapter); load its adapter alone (head=False), or store it again with its head"
        )
    return {kind: read_piece(piece_source(entry / kind, kind), kind, layout(model)) for kind in kinds}


def _encoder_identity(entry: Path, recorded: Mapping[str, Any]) -> Any:
    """The identity of the encoder the entry was trained on (encoders.encoder_identity), which entry.json records;
    for an entry of the shipped zoo, stored before entries recorded it, the one the zoo's manifest records of the
    encoder all its adapters were trained on (scripts/package_zoo.py): without it they loaded into any encoder of
    the same sizes, even a random one. None (not checked) where neither records one."""
    identity = recorded.get("encoder_identity")
    if identity or not entry.resolve().is_relative_to((ZOO_DIR / STORE_DIR).resolve()):
        return identity
    manifest = zoo_manifest()
    shipped = manifest.get("encoder") if isinstance(manifest, dict) else None
    identity = shipped.get(IDENTITY_KEY) if isinstance(shipped, dict) else None
    if identity is not None and not isinstance(identity, dict):
        raise ZooError(
            f"{ZOO_DIR / MANIFEST_FILE} records the zoo's encoder {IDENTITY_KEY!r} as {short_repr(identity)}, not an "
            "object: this install's adapter zoo is damaged; reinstall adapterfusion (or run scripts/package_zoo.py)"
        )
    return identity


def _folder_id(folder: Path) -> tuple[int, int] | None:
    """Which folder is at `folder` now (device and inode), None if none: a replaced entry is another folder."""
    try:
        stat = os.stat(folder)
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


def _check_not_training(run_dir: Path) -> None:
    """Refuse a run folder another process trains right now (it holds its run.lock): its adapter and head are
    written one after the other at its end (or the folder holds an earlier attempt's), so a copy taken meanwhile may
    pair pieces of two trainings. train() itself puts its run while it holds the lock: this process, let through."""
    holder = lock_holder(run_dir / LOCK_FILE)
    if holder is not None and holder != os.getpid():
        raise TrainingError(
            f"{run_dir} is being trained right now by another process (pid {holder}); its adapter and head are "
            "written at its end, so put() would copy an unfinished run's. Wait for that run to finish (train(..., "
            "store=...) puts it into its store itself), then put it"
        )


def _digest_key(kind: str) -> str:
    return f"{kind}_sha256"


def _check_entry_matches(entry: Path, recorded: Mapping[str, Any], asked: Mapping[str, Any]) -> None:
    """Refuse an entry whose entry.json records another encoder, task, setup or seed than the folder it was found in
    (`asked`, and the encoder folder's name): the store finds an entry by its folder alone, so one copied or renamed
    by hand (seed-1 copied to seed-2, rte/ to cb/) handed back another adapter than the one asked for, without a
    word. A field an older entry does not record is not checked."""
    expected = {"encoder_key": entry.parents[2].name, **asked}
    differing = [key for key, value in expected.items() if key in recorded and recorded[key] != value]
    if differing:
        found = ", ".join(f"{key}={recorded[key]!r}" for key in differing)
        wanted = ", ".join(f"{key}={expected[key]!r}" for key in differing)
        raise TrainingError(
            f"the store entry {entry} is not the one its folder names: its {ENTRY_FILE} records {found}, where its "
            f"folder stands for {wanted}; it was copied, renamed or edited by hand, and loading it would hand back "
            "another adapter than the one asked for. Move it back to the folder of what it records, or store the "
            "right adapter there (put(run_folder, overwrite=True))"
        )


def _check_entry_pieces(entry: Path, recorded: Mapping[str, Any], kinds: Sequence[str]) -> None:
    """Refuse an entry whose adapter or head files are not those it was stored with (the sha256 its entry.json
    records): copied over by hand from another entry or run, they loaded as the entry's own. Entries stored before
    the digest was recorded (the shipped zoo) are not checked."""
    for kind in kinds:
        saved = recorded.get(_digest_key(kind))
        if saved is not None and not isinstance(saved, str):
            raise RunFileError(
                f"{entry / ENTRY_FILE}: {_digest_key(kind)}={short_repr(saved)} is not a sha256; the store entry is "
                "damaged: put its adapter into the store again"
            )
        if saved is None or not (entry / kind).is_dir():  # a missing folder: said by the loader
            continue
        found = piece_digest(entry / kind)
        if found != saved:
            raise TrainingError(
                f"the {kind} files in {entry / kind} are not those this store entry was stored with (their sha256 "
                f"{found[:12]} differs from the {_digest_key(kind)} {saved[:12]} its {ENTRY_FILE} records): they "
                f"were replaced or copied there by hand, and are another {kind} than the one asked for. Store the "
                "right one again (put(run_folder, overwrite=True)), or remove the entry"
            )


def _check_encoder(encoder: object) -> str | os.PathLike:
    """`encoder` if it can name a store entry's encoder folder: a non-empty path or Hub id. None, 5 or '' were
    filed under folders named 'None', '5' and 'encoder', where no load of that encoder's adapters looks."""
    if isinstance(encoder, os.PathLike) or (isinstance(encoder, str) and encoder.strip()):
        return encoder
    raise ConfigError(
        f"store entry encoder {short_repr(encoder)} ({type(encoder).__name__}) names no encoder; give the path or Hub "
        "id the adapter was trained on (a non-empty str), as the model was loaded from"
    )


def model_encoder(model: AdaptedModel, error: type[AdapterFusionError] = ConfigError) -> str:
    """The path or Hub id `model` was loaded from, which keys its adapters in a store; a model built from a config
    (or whose name_or_path was cleared) names none, and its adapters were looked for under a folder 'encoder'."""
    name = model.fingerprint.name_or_path
    if not name.strip():
        raise error(
            "the model does not say which encoder it was loaded from (it was built from a config, or its "
            "config.name_or_path is empty), and the store keys adapters by it; pass encoder= the path or Hub id the "
            "adapters were trained on"
        )
    return name


def _read_entry(path: Path) -> dict[str, Any]:
    """A store entry's entry.json, which must be a JSON object (a list, or a number, is a damaged entry)."""
    fix = "the store entry is damaged; put its adapter into the store again"
    recorded = read_json(path, fix)
    if not isinstance(recorded, dict):
        raise RunFileError(f"{path} holds a JSON {type(recorded).__name__}, not an object; {fix}")
    return recorded


def as_store(store: AdapterStore | str | os.PathLike | None) -> AdapterStore | None:
    """An AdapterStore for a store folder given as a path; an AdapterStore or None as it is."""
    return AdapterStore(store) if store is not None and not isinstance(store, AdapterStore) else store


# ---- zoos: AdapterStores that fusion setups and experiment files take stage-1 adapters from ----------------


class ShippedZoo(AdapterStore):
    """The shipped zoo (adapterfusion/zoo/), an AdapterStore whose adapters are stored under the shipped MiniLM's
    folder. The Hub id its weights come from, 'sentence-transformers/all-MiniLM-L6-v2' (a model loaded from it, an
    experiment's `encoder:`), names the same encoder: its adapters were said to be for another one, by
    load_zoo_adapter and by a fusion run or experiment plan with `zoo: shipped` alike. Loading checks that the weights
    are the ones the adapters were trained on (check_same_encoder), so a revision with other weights is refused."""

    def encoder_for(self, encoder: str) -> str:
        ref = hub_ref(encoder) if isinstance(encoder, str) and not os.path.exists(encoder) else None
        if ref is not None and not ref.subfolder and ref.repo_id.lower() == DEFAULT_ENCODER_HUB_ID.lower():
            return os.fspath(default_encoder_path())
        return encoder


def zoo_store() -> AdapterStore:
    """The shipped zoo (adapterfusion/zoo/) as an AdapterStore (keyed like any other: encoder, task, setup, seed)."""
    return ShippedZoo(ZOO_DIR / STORE_DIR)


def resolve_zoo(zoo: AdapterStore | str | os.PathLike) -> AdapterStore:
    """`shipped` (this package's zoo), the folder of an AdapterStore (e.g. `<experiment>/adapters/st-a-rf16`), or an
    AdapterStore itself (the store a run put its adapters into: it was refused as 'not a path')."""
    zoo = zoo.root if isinstance(zoo, AdapterStore) else zoo
    if str(zoo) == SHIPPED:
        return zoo_store()
    root = as_path(zoo, "zoo", ZooError)
    if not root.is_dir():
        looks_like_hub_id = str(zoo).count("/") == 1 and not str(zoo).startswith((".", "/", "~"))
        hint = (
            "; if it is a Hub id: zoos are read from folders, never pulled from the Hub, so download it first "
            f"(hf download {zoo} --local-dir DIR) and pass DIR"
            if looks_like_hub_id
            else ""
        )
        raise ZooError(f"zoo {str(zoo)!r} is neither {SHIPPED!r} nor an existing AdapterStore folder{hint}")
    if root.resolve() == zoo_store().root.resolve():  # zoo_store() itself, or its folder: the shipped zoo still
        return zoo_store()
    store = AdapterStore(root)
    # an empty folder was told "no adapters for encoder X (only for [])", as though it were a store of others
    if not any(_entry_seed(p.parent.name) is not None for p in root.glob(f"*/*/*/{SEED_PREFIX}*/{ENTRY_FILE}")):
        raise ZooError(
            f"zoo {str(zoo)!r} holds no store entries (no <encoder>/<task>/<setup>/seed-<n>/{ENTRY_FILE}), so it is "
            f"not an AdapterStore with adapters in it; give {SHIPPED!r} or the folder a run put its adapters into "
            "(its store=)"
        )
    return store


def zoo_seed(store: AdapterStore, encoder: str, task: str, setup: str = ZOO_SETUP) -> int:
    """The seed of the zoo's one adapter for (encoder, task, setup); a zoo with several seeds of it is ambiguous."""
    encoder = store.encoder_for(encoder)
    folder = store.path(encoder, task, setup, 0).parent
    seeds = _entry_seeds(folder)
    if len(seeds) == 1:
        return seeds[0]
    if not seeds:
        held = sorted({str(e.get("task")) for e in store.entries() if e.get("encoder_key") == encoder_key(encoder)})
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


def _entry_seed(name: str) -> int | None:
    """The seed of a store entry's folder `name`, spelt as AdapterStore.path spells it ('seed-3'); None for any other
    name. A 'seed-old' or 'seed-01' folder of the user's is no entry, as no load looks there (int() failed on the one,
    and the other counted as a second seed 1)."""
    number = name.removeprefix(SEED_PREFIX)
    return int(number) if number.isdigit() and seed_folder(int(number)) == name else None


def _entry_seeds(folder: Path) -> list[int]:
    """The seeds of the entries in `folder` (one encoder, task and setup): its seed folders holding an entry.json."""
    found = (_entry_seed(path.parent.name) for path in folder.glob(f"{SEED_PREFIX}*/{ENTRY_FILE}") if path.is_file())
    return sorted(seed for seed in found if seed is not None)
