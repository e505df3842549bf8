"""Bad-input cases at one boundary, saving to odd places and publishing: every save_* / save_pretrained / export /
push_to_hub destination and argument (special or unwritable paths, files where folders go, Hub arguments of the wrong
type), and the store's lookup of saved entries."""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

import httpx
import huggingface_hub
from huggingface_hub.errors import RevisionNotFoundError

import adapterfusion as af
from adapterfusion.errors import ConfigError, HubError
from adapterfusion.interop import export_adapterhub
from adapterfusion.training import AdapterStore, TrainingError
from adapterfusion.zoo import load_zoo_adapter
from catalogue import Action, BadInput, edit_json, in_hub
from tiny_models import tiny_encoder

B = BadInput
GROUP = "save targets"


# ---- helpers -------------------------------------------------------------------------------------------------------
def _model() -> af.AdaptedModel:
    """A tiny BERT with Pfeiffer adapters a and b (reduction factor 4), their fusion f and a two-class head h."""
    model = af.wrap(tiny_encoder("bert"))
    for name in ("a", "b"):
        model.add_adapter(name, af.AdapterConfig.pfeiffer(reduction_factor=4))
    model.add_fusion("f", ["a", "b"])
    model.add_head("h", af.ClassificationHead(num_labels=2))
    return model


def _saving(save: Callable[[af.AdaptedModel], Any]) -> Callable[[Path], Action]:
    """`save(model)` of the tiny model of _model(): a save into a place no file can be created in."""

    def prepare(folder: Path) -> Action:
        model = _model()
        return lambda: save(model)

    return prepare


def _save_over_setup_refused_by_the_os(folder: Path) -> Action:
    """save_pretrained over a setup saved before, where the OS refuses to create any file in it although every check
    passed (an immutable folder, a security module, permissions changed since: os.open is made to answer EPERM)."""
    model = _model()
    setup = model.save_pretrained(folder / "setup")
    real_open = os.open

    def refusing(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & os.O_CREAT and Path(os.fsdecode(path)).is_relative_to(setup):
            raise PermissionError(errno.EPERM, "Operation not permitted", os.fsdecode(path))
        return real_open(path, flags, *args, **kwargs)

    def save() -> Any:
        with mock.patch("os.open", refusing):
            return model.save_pretrained(setup)

    return save


def _pushing(**arguments: Any) -> Callable[[Path], Action]:
    """model.push_to_hub('org/name', **arguments), offline; the Hub is never reached."""

    def prepare(folder: Path) -> Action:
        model = _model()
        return in_hub(lambda: model.push_to_hub("org/name", **arguments), folder)

    return prepare


def _push_to_missing_branch(folder: Path) -> Action:
    """push_to_hub('org/name@dev') where the Hub answers that org/name has no revision dev (a stand-in of the Hub's
    404; the network is never used)."""
    url = "https://huggingface.co/api/models/org/name/revision/dev"
    missing = RevisionNotFoundError(
        f"404 Client Error: Revision Not Found for url {url}",
        response=httpx.Response(404, request=httpx.Request("GET", url)),
    )

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise missing

    model = _model()

    def push() -> Any:
        with mock.patch.object(huggingface_hub, "snapshot_download", refuse):
            return model.push_to_hub("org/name@dev")

    return in_hub(push, folder, offline=False)


def _pushing_onto(files: dict[str, str], **arguments: Any) -> Callable[[Path], Action]:
    """model.push_to_hub('org/name', **arguments) where the Hub (stand-ins of its calls; the network is never used)
    holds org/name already, public, with `files` ({name: text}); an upload fails the case."""

    def prepare(folder: Path) -> Action:
        snapshot = folder / "snapshot"
        snapshot.mkdir()
        for name, text in files.items():
            (snapshot / name).write_text(text, encoding="utf-8")
        model = _model()

        def never(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError("the files were uploaded")

        def push() -> Any:
            with (
                mock.patch.object(huggingface_hub, "snapshot_download", lambda *args, **kwargs: str(snapshot)),
                mock.patch.object(huggingface_hub, "create_repo", lambda *args, **kwargs: "https://hf.co/org/name"),
                mock.patch.object(huggingface_hub.HfApi, "upload_folder", never),
            ):
                return model.push_to_hub("org/name", **arguments)

        return in_hub(push, folder, offline=False, model_info=lambda *args, **kwargs: SimpleNamespace(private=False))

    return prepare


def _store(folder: Path) -> AdapterStore:
    """A store holding, for encoder 'org/enc', setup st-a and seed 1, adapter a and head h as task rte's entry and
    adapter b and head g as cb's."""
    model = _model()
    model.add_head("g", af.ClassificationHead(num_labels=2))
    store = AdapterStore(folder / "store")
    store.put_model(model, "a", "h", "org/enc", "rte", "st-a", 1)
    store.put_model(model, "b", "g", "org/enc", "cb", "st-a", 1)
    return store


def _entry_copied(task: str, seed: int, encoder: str = "org/enc", old: bool = False) -> Callable[[Path], Action]:
    """The rte entry copied by hand to the entry folder of (encoder, task, st-a, seed), then that entry loaded; `old`:
    the copy's entry.json without the encoder's identity (as entries stored before it was recorded)."""

    def prepare(folder: Path) -> Action:
        store = _store(folder)
        copy = store.path(encoder, task, "st-a", seed)
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(store.path("org/enc", "rte", "st-a", 1), copy)
        if old:
            edit_json(copy / "entry.json", lambda entry: entry.pop("encoder_identity"))
        model = af.wrap(tiny_encoder("bert"))
        return lambda: store.load_into(model, task, "st-a", seed, encoder=encoder)

    return prepare


def _files_replaced(kind: str) -> Callable[[Path], Action]:
    """The cb entry's `kind` folder copied by hand over the rte entry's, then rte loaded: an adapter from the store as
    a zoo, a head with load_into(head=True)."""

    def prepare(folder: Path) -> Action:
        store = _store(folder)
        rte = store.path("org/enc", "rte", "st-a", 1)
        shutil.rmtree(rte / kind)
        shutil.copytree(store.path("org/enc", "cb", "st-a", 1) / kind, rte / kind)
        model = af.wrap(tiny_encoder("bert"))
        if kind == "adapter":
            return lambda: load_zoo_adapter(model, "rte", zoo=store.root, encoder="org/enc")
        return lambda: store.load_into(model, "rte", "st-a", 1, encoder="org/enc", head=True)

    return prepare


def _encoder_spelt_otherwise(folder: Path) -> Action:
    """An adapter stored for the encoder '/a/models/bert', looked for as encoder 'bert'."""
    model = _model()
    store = AdapterStore(folder / "store")
    store.put_model(model, "a", None, "/a/models/bert", "rte", "st-a", 1)
    return lambda: store.load_into(af.wrap(tiny_encoder("bert")), "rte", "st-a", 1, encoder="bert")


def _zoo_as_store(folder: Path) -> Action:
    """load_zoo_adapter with the AdapterStore object a run put its adapters into, not its folder."""
    store = _store(folder)
    model = af.wrap(tiny_encoder("bert"))
    return lambda: f"loaded as {load_zoo_adapter(model, 'rte', zoo=store, encoder='org/enc')!r}"


CASES: tuple[BadInput, ...] = (
    # destinations no file can be created in: os.access said yes (for root, always; /proc's root is mode 555, but
    # refuses any new entry to root too), and the save failed half-way with a raw OSError
    B(
        "save-adapter-into-proc",
        GROUP,
        "model.save_adapter('a', '/proc/af-x'): /proc takes no new folder, to root neither (a raw FileNotFoundError "
        "from mkdir)",
        ConfigError,
        ("save_adapter: the adapter folder '/proc/af-x'", "'/proc'"),
        _saving(lambda model: model.save_adapter("a", "/proc/af-x")),
    ),
    B(
        "save-pretrained-into-proc",
        GROUP,
        "model.save_pretrained('/proc/af-x') (a raw FileNotFoundError naming a temp folder '/proc/.af-x.<random>.tmp')",
        ConfigError,
        ("save_pretrained: the folder '/proc/af-x'", "'/proc'"),
        _saving(lambda model: model.save_pretrained("/proc/af-x")),
    ),
    B(
        "save-fusion-under-proc",
        GROUP,
        "model.save_fusion('f', '/proc/af-x/fusions/f') (a raw FileNotFoundError from mkdir)",
        ConfigError,
        ("save_fusion: the fusion folder '/proc/af-x/fusions/f'", "'/proc'"),
        _saving(lambda model: model.save_fusion("f", "/proc/af-x/fusions/f")),
    ),
    B(
        "save-head-into-proc-subfolder",
        GROUP,
        "model.save_head('h', '/proc/af-x/heads/h') (a raw FileNotFoundError from mkdir)",
        ConfigError,
        ("save_head: the head folder '/proc/af-x/heads/h'", "'/proc'"),
        _saving(lambda model: model.save_head("h", "/proc/af-x/heads/h")),
    ),
    B(
        "export-adapterhub-into-proc",
        GROUP,
        "export_adapterhub(model, 'fusion', 'f', '/proc/af-x') (a raw FileNotFoundError from mkdir)",
        ConfigError,
        ("export_adapterhub: the fusion folder '/proc/af-x'", "'/proc'"),
        _saving(lambda model: export_adapterhub(model, "fusion", "f", "/proc/af-x")),
    ),
    B(
        "store-put-model-under-proc",
        GROUP,
        "AdapterStore('/proc/af-store').put_model(model, 'a', 'h', 'org/enc', 'rte', 'st-a', 1) (a raw "
        "FileNotFoundError from mkdir)",
        ConfigError,
        ("store '/proc/af-store'", "'/proc'"),
        _saving(lambda model: AdapterStore("/proc/af-store").put_model(model, "a", "h", "org/enc", "rte", "st-a", 1)),
    ),
    B(
        "save-pretrained-over-setup-os-refuses",
        GROUP,
        "model.save_pretrained(<its setup saved before>) where the OS refuses to create files although every check "
        "passed (immutable folder, security module; was: a raw PermissionError naming a temp file)",
        ConfigError,
        ("/setup/adapters/a/adapter_config.json' failed", "EPERM", "nothing there was changed"),
        _save_over_setup_refused_by_the_os,
    ),
    # push_to_hub's arguments for huggingface_hub: checked before the save and before the Hub is asked
    B(
        "push-token-int",
        GROUP,
        "model.push_to_hub('org/name', token=123), offline (was: 'reading before pushing failed'; online the token "
        "reached huggingface_hub)",
        ConfigError,
        ("push_to_hub(token) has type int", "access token as a string", "saved login"),
        _pushing(token=123),
    ),
    B(
        "push-token-with-newline",
        GROUP,
        "model.push_to_hub('org/name', token='hf_abc\\n') (read from a file; online: an invalid HTTP header)",
        ConfigError,
        ("push_to_hub(token)", "a newline around it", "stripped"),
        _pushing(token="hf_abc\n"),
    ),
    B(
        "push-commit-message-number",
        GROUP,
        "model.push_to_hub('org/name', commit_message=5)",
        ConfigError,
        ("push_to_hub(commit_message)=5 (int)", "non-empty string"),
        _pushing(commit_message=5),
    ),
    B(
        "push-commit-message-blank",
        GROUP,
        "model.push_to_hub('org/name', commit_message=' ') (was: replaced by the generated one without a word, or "
        "sent as is)",
        ConfigError,
        ("push_to_hub(commit_message)=' ' (str)", "no commit message"),
        _pushing(commit_message=" "),
    ),
    B(
        "push-to-missing-branch",
        GROUP,
        "model.push_to_hub('org/name@dev'), a branch org/name lacks (was: 'the Hub has no such repository or revision "
        "that you may read ... and no local folder has that name')",
        HubError,
        ("has no branch 'dev'", "a push does not create one", "create_branch('org/name', branch='dev')"),
        _push_to_missing_branch,
    ),
    B(
        "push-private-to-public-repo",
        GROUP,
        "model.push_to_hub('org/name', private=True) where org/name exists and is public (was: published to everyone: "
        "create_repo applies private= only to a repository it creates)",
        ConfigError,
        ("push_to_hub(private=True)", "already exists and is public", "nothing was pushed", "update_repo_settings"),
        _pushing_onto({}, private=True),
    ),
    B(
        "push-over-unreadable-remote-setup",
        GROUP,
        "model.push_to_hub('org/name') where org/name holds an adapterfusion_setup.json that is not JSON (was: a "
        "SerializationError naming its copy in the local Hugging Face cache)",
        ConfigError,
        ("the Hub folder org/name holds an adapterfusion_setup.json", "not valid JSON", "overwrite=True"),
        _pushing_onto({"adapterfusion_setup.json": "not json"}),
    ),
    # the store finds an entry by its folder: one copied or renamed by hand was handed back as the one asked for
    B(
        "store-entry-copied-to-another-seed",
        GROUP,
        "AdapterStore.load_into(model, 'rte', 'st-a', 2) of seed-1's entry copied by hand to seed-2 (was: seed 1's "
        "adapter loaded as seed 2's)",
        TrainingError,
        ("records seed=1", "stands for seed=2", "copied, renamed or edited by hand"),
        _entry_copied("rte", 2),
    ),
    B(
        "store-entry-copied-to-another-task",
        GROUP,
        "AdapterStore.load_into(model, 'cb', 'st-a', 1) of the rte entry copied by hand over cb's (was: rte's "
        "adapter loaded as cb's)",
        TrainingError,
        ("records task='rte'", "stands for task='cb'", "another adapter than the one asked for"),
        _entry_copied("cb", 1),
    ),
    B(
        "store-entry-of-no-identity-under-another-encoder",
        GROUP,
        "AdapterStore.load_into(..., encoder='org/other') of an entry without the encoder's digest, copied by hand "
        "from org/enc's folder (was: loaded, matched by the folder name alone)",
        TrainingError,
        ("records encoder_key='org--enc'", "stands for encoder_key='org--other'"),
        _entry_copied("rte", 1, encoder="org/other", old=True),
    ),
    B(
        "store-entry-adapter-files-replaced",
        GROUP,
        "load_zoo_adapter(model, 'rte', zoo=<store whose rte adapter/ was replaced by hand with cb's>) (was: cb's "
        "adapter loaded as rte's)",
        TrainingError,
        ("adapter files", "not those this store entry was stored with", "adapter_sha256"),
        _files_replaced("adapter"),
    ),
    B(
        "store-entry-head-files-replaced",
        GROUP,
        "AdapterStore.load_into(model, 'rte', 'st-a', 1, head=True) of an entry whose head/ was replaced by hand with "
        "cb's (was: cb's head loaded as rte's)",
        TrainingError,
        ("head files", "not those this store entry was stored with", "head_sha256"),
        _files_replaced("head"),
    ),
    B(
        "zoo-given-as-adapter-store",
        GROUP,
        "load_zoo_adapter(model, 'rte', zoo=<an AdapterStore>, encoder='org/enc') (was refused: 'zoo <AdapterStore "
        "object at 0x...> is not a path')",
        None,
        ("loaded as 'rte'",),
        _zoo_as_store,
    ),
    B(
        "store-load-encoder-spelt-otherwise",
        GROUP,
        "AdapterStore.load_into(model, 'rte', 'st-a', 1, encoder='bert') of an adapter stored for '/a/models/bert' "
        "(was told only to 'train it first')",
        TrainingError,
        ("no stored adapter", "holds that entry for the encoder folder(s) ['models--bert']", "spelt otherwise"),
        _encoder_spelt_otherwise,
    ),
)
