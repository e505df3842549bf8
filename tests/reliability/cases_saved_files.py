"""Bad-input cases at one boundary, saved files and the folders that hold them: flags of the store and AdapterHub
calls given as strings, weights in a dtype nothing is computed in, pieces, setups and stores this user may not read
or write, a new setup folder whose temp name would be too long, an AdapterHub fusion naming its adapters with
numbers. Permission cases chmod inside the action and restore the mode after it, so the runner's byte-for-byte check
can read every file; as root, which ignores permission bits, os.access answers as the kernel answers another user."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModel, AutoModelForSeq2SeqLM

import adapterfusion as af
from adapterfusion.interop import export_adapterhub
from adapterfusion.io.paths import TEMP_NAME_EXTRA, name_max
from adapterfusion.serialization import setup_save as saved_setups
from adapterfusion.training.store import AdapterStore
from catalogue import Action, BadInput, a_file, cli, edit_json, load_into, read_only, saved_piece
from tiny_decoders import randomise_pieces, tiny_decoder
from tiny_models import tiny_encoder

B = BadInput
HUB = Path(__file__).resolve().parents[1] / "fixtures" / "adapterhub" / "bert"


# ---- helpers -------------------------------------------------------------------------------------------------------
def _model(*adapters: str, head: str | None = None) -> af.AdaptedModel:
    """A tiny BERT with Pfeiffer adapters `adapters` (reduction factor 4) and a two-class head `head`."""
    model = af.wrap(tiny_encoder("bert"))
    for name in adapters:
        model.add_adapter(name, af.AdapterConfig.pfeiffer(reduction_factor=4))
    if head is not None:
        model.add_head(head, af.ClassificationHead(num_labels=2))
    return model


@contextlib.contextmanager
def unreadable(path: Path, mode: int = 0o000) -> Iterator[None]:
    """`path` given `mode` (000: nothing; 0311 for a folder: it cannot be listed). Root ignores permission bits, so
    for root os.access answers for `path`, and for what is inside it, as the kernel answers its owner."""
    previous = stat.S_IMODE(path.stat().st_mode)
    target = path.resolve()
    owner = (mode >> 6) & 0o7  # os.R_OK, W_OK, X_OK are the owner's bits 4, 2, 1
    real_access = os.access

    def access(where: Any, wanted: int, *args: Any, **kwargs: Any) -> bool:
        place = Path(where).resolve()
        if place == target and wanted & ~owner:
            return False
        if place.is_relative_to(target) and place != target and wanted and not owner & os.X_OK:
            return False
        return real_access(where, wanted, *args, **kwargs)

    path.chmod(mode)
    try:
        with mock.patch("os.access", access) if os.geteuid() == 0 else contextlib.nullcontext():
            yield
    finally:
        path.chmod(previous)


def _while_unreadable(path: Callable[[Path], Path], action: Callable[[], Any], mode: int = 0o000) -> Callable:
    """The action run while `path(folder)` is unreadable; a message that blames the file itself is a failure."""

    def prepare(folder: Path) -> Action:
        def run() -> Any:
            with unreadable(path(folder), mode):
                try:
                    return action()
                except af.AdapterFusionError as error:
                    assert "corrupt" not in str(error) and "truncated" not in str(error), error
                    raise

        return run

    return prepare


def _unreadable_piece(part: str, mode: int = 0o000) -> Callable[[Path], Action]:
    """A saved adapter whose file or folder `part` ('' for the folder itself) this user may not read."""

    def prepare(folder: Path) -> Action:
        saved = saved_piece(folder)
        action = load_into(_model(), "adapter", saved)
        return _while_unreadable(lambda _: saved / part if part else saved, action, mode)(folder)

    return prepare


def _unreadable_setup_folder(folder: Path) -> Action:
    """A saved setup whose adapters/ folder this user may not open: from_pretrained."""
    _model("a").save_pretrained(folder / "s")
    action = lambda: af.AdaptedModel.from_pretrained(tiny_encoder("bert"), folder / "s")  # noqa: E731
    return _while_unreadable(lambda f: f / "s" / "adapters", action)(folder)


def _float8_weights(folder: Path) -> Action:
    """A saved adapter whose weights were rewritten in float8 (and its config's digest updated to match): torch's
    isfinite has no float8 kernel."""
    saved = saved_piece(folder)
    path = saved / "adapter.safetensors"
    save_file({k: v.to(torch.float8_e4m3fn) for k, v in load_file(path).items()}, path, metadata={"format": "pt"})
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    edit_json(saved / "adapter_config.json", lambda document: document.update(weights_sha256=digest))
    return load_into(_model(), "adapter", saved)


def _adapterhub_float8(folder: Path) -> Action:
    """AdapterHub's adapter 'pf_ln' (ln_before: its LayerNorm is stored twice and compared) in float8."""
    copy = folder / "pf_ln"
    shutil.copytree(HUB / "adapters" / "pf_ln", copy)
    path = copy / "pytorch_adapter.bin"
    tensors = torch.load(path, weights_only=True)
    torch.save({key: value.to(torch.float8_e5m2) for key, value in tensors.items()}, path)
    return load_into(af.wrap(AutoModel.from_pretrained(HUB / "base_model")), "adapter", copy)


def _store_put_model(overwrite: Any) -> Callable[[Path], Action]:
    """put_model over a stored adapter with a non-bool `overwrite`: it replaced the trained adapter."""

    def prepare(folder: Path) -> Action:
        store = AdapterStore(folder / "store")
        store.put_model(_model("a", head="h"), "a", "h", "enc", "rte", "st-a", 1)
        other = _model("a", head="h")
        return lambda: store.put_model(other, "a", "h", "enc", "rte", "st-a", 1, overwrite=overwrite)

    return prepare


def _store_load_head_string(folder: Path) -> Action:
    store = AdapterStore(folder / "store")
    store.put_model(_model("a", head="h"), "a", "h", "enc", "rte", "st-a", 1)
    return _load_into(store, head="no")


def _load_into(store: AdapterStore, **kwargs: Any) -> Action:
    model = _model()

    def action() -> Any:
        try:
            return store.load_into(model, "rte", "st-a", 1, encoder="enc", **kwargs)
        finally:
            assert model.adapter_names == [] and model.head_names == [], "the refused load changed the model"

    return action


def _export_use_safetensors(folder: Path) -> Action:
    model = _model("a")
    return lambda: export_adapterhub(model, "adapter", "a", folder / "hub", use_safetensors="no")


def _store_read_only(folder: Path) -> Action:
    (folder / "store").mkdir()
    model = _model("a", head="h")

    def action() -> Any:
        with read_only(folder / "store"):
            return AdapterStore(folder / "store").put_model(model, "a", "h", "enc", "rte", "st-a", 1)

    return action


def _store_entry_parent_read_only(folder: Path) -> Action:
    """overwrite=True onto an entry whose folder (<store>/enc/rte/st-a) is read-only: the new entry is built there."""
    store = AdapterStore(folder / "store")
    model = _model("a", head="h")
    entry = store.put_model(model, "a", "h", "enc", "rte", "st-a", 1)

    def action() -> Any:
        with read_only(entry.parent):
            return store.put_model(model, "a", "h", "enc", "rte", "st-a", 1, overwrite=True)

    return action


def _save_pretrained_dropping_read_only_piece(folder: Path) -> Action:
    """A setup of adapters a and b saved again with a alone (overwrite=True), b's folder read-only: the new index was
    written, then removing b's files failed."""
    _model("a", "b").save_pretrained(folder / "setup")
    model = _model("a")

    def action() -> Any:
        with read_only(folder / "setup" / "adapters" / "b"):
            return model.save_pretrained(folder / "setup", overwrite=True)

    return action


def _save_pretrained_leaving_out_pieces(folder: Path) -> Action:
    """A setup of adapters a and b saved again with a alone and no overwrite=True: b's files were deleted."""
    _model("a", "b").save_pretrained(folder / "setup")
    model = _model("a")
    return lambda: model.save_pretrained(folder / "setup", adapters="a")


def _save_pretrained_name_near_limit(folder: Path) -> Action:
    """A new setup folder whose name fits the file system, but not the temp folder it is built in first."""
    name = "s" * (name_max(folder) - TEMP_NAME_EXTRA + 1)
    model = _model("a")
    return lambda: model.save_pretrained(folder / name)


def _adapterhub_fusion_names(names: list) -> Callable[[Path], Action]:
    """An AdapterHub fusion folder (exported from a tiny BERT) whose adapter_names are `names`."""

    def prepare(folder: Path) -> Action:
        model = _model("a", "b")
        model.add_fusion("f", ["a", "b"])
        export_adapterhub(model, "fusion", "f", folder / "f")
        edit_json(folder / "f" / "adapter_fusion_config.json", lambda document: document.update(adapter_names=names))
        return load_into(_model("a", "b"), "fusion", folder / "f")

    return prepare


def _adapterhub_fusion_truncated(folder: Path) -> Action:
    """An AdapterHub fusion folder (exported from a tiny BERT) whose adapter_fusion_config.json was cut to '{'."""
    model = _model("a", "b")
    model.add_fusion("f", ["a", "b"])
    export_adapterhub(model, "fusion", "f", folder / "f")
    (folder / "f" / "adapter_fusion_config.json").write_text("{")
    return load_into(_model("a", "b"), "fusion", folder / "f")


# ---- what a later load would not find, and what appears while saving ---------------------------------------------
def _export_over_lone_weights(folder: Path) -> Action:
    """A folder holding only the user's own pytorch_adapter.bin (no config says whose it is), exported into with
    overwrite=True: it used to be called 'an adapter saved by save_adapter', and the export deleted it."""
    (folder / "x").mkdir()
    (folder / "x" / "pytorch_adapter.bin").write_bytes(b"the user's own weights, of no known piece")
    model = _model("a")
    return lambda: export_adapterhub(model, "adapter", "a", folder / "x", overwrite=True)


def _fusion_model() -> af.AdaptedModel:
    model = _model("a", "b")
    model.add_fusion("f", ["a", "b"])
    return model


def _save_fusion_beside_adapterhub_fusion(folder: Path) -> Action:
    """save_fusion into a folder holding an AdapterHub fusion: ours is fusion_config.json, theirs
    adapter_fusion_config.json, so both were written, and load_fusion of the folder read the AdapterHub one."""
    export_adapterhub(_fusion_model(), "fusion", "f", folder / "f")
    model = _fusion_model()
    return lambda: model.save_fusion("f", folder / "f")


def _export_fusion_beside_saved_fusion(folder: Path) -> Action:
    """export_adapterhub of a fusion into the folder of one saved by save_fusion, overwrite=True: written beside it,
    and load_fusion of the folder then read the export, hiding the saved fusion."""
    _fusion_model().save_fusion("f", folder / "f")
    model = _fusion_model()
    return lambda: export_adapterhub(model, "fusion", "f", folder / "f", overwrite=True)


def _save_pretrained_folder_appears(folder: Path) -> Action:
    """save_pretrained into a new folder, which the user moves their own folder to while the setup is written: the
    finished setup was renamed over it and the user's file deleted. The action moves the user's folder back once the
    save is refused, so the runner's snapshot finds it byte for byte where it was (or finds it gone)."""
    (folder / "incoming").mkdir()
    a_file(folder / "incoming", "thesis.tex")
    model, target = _model("a"), folder / "setup"
    real = saved_setups.atomic_write_files

    def racing(files: Any, *args: Any, **kwargs: Any) -> Any:
        if not target.exists():
            (folder / "incoming").rename(target)
        return real(files, *args, **kwargs)

    def action() -> Any:
        try:
            with mock.patch.object(saved_setups, "atomic_write_files", racing):
                return model.save_pretrained(target)
        finally:
            if (target / "thesis.tex").is_file() and not (folder / "incoming").exists():
                target.rename(folder / "incoming")

    return action


def _save_adapter_over_read_only(folder: Path) -> Action:
    """save_adapter again over its earlier save whose adapter.safetensors the user made read-only (mode 444): a
    rename replaces a file whatever its mode, so the protection was overridden."""
    _model("a").save_adapter("a", folder / "a")
    model = _model("a")
    randomise_pieces(model, seed=1)  # other weights: replacing the file changes its bytes
    save_again = _while_unreadable(
        lambda f: f / "a" / "adapter.safetensors", lambda: model.save_adapter("a", f"{folder}/a"), 0o444
    )
    return save_again(folder)


def _diverged_save_over_good_one(whole_setup: bool) -> Callable[[Path], Action]:
    """A model's adapter saved while good, then its weights went NaN (a diverged run) and it was saved again there:
    the good save was replaced by one that loading refuses as diverged."""

    def prepare(folder: Path) -> Action:
        model = _model("a")
        save = (
            (lambda: model.save_pretrained(folder / "s"))
            if whole_setup
            else (lambda: model.save_adapter("a", folder / "a"))
        )
        save()
        with torch.no_grad():
            model.sites_with_adapter("a")[-1].adapters["a"].up.weight[3, 0] = float("nan")
        return save

    return prepare


def _diverged_export_over_good_one(folder: Path) -> Action:
    """An adapter exported to AdapterHub's format while good, then its weights went NaN and it was exported there
    again with overwrite=True: the good export was replaced by weights that loading refuses."""
    model = _model("a")
    export_adapterhub(model, "adapter", "a", folder / "a")
    with torch.no_grad():
        model.sites_with_adapter("a")[-1].adapters["a"].up.weight[3, 0] = float("inf")
    return lambda: export_adapterhub(model, "adapter", "a", folder / "a", overwrite=True)


def _json_onto_saved(kind: str, command: str) -> Callable[[Path], Action]:
    """`adapterfusion <command> RUN --json <the config of a lone saved `kind`>` (checked before RUN is read)."""

    def prepare(folder: Path) -> Action:
        model = _model("a", head="h")
        name = {"adapter": "a", "head": "h"}[kind]
        getattr(model, f"save_{kind}")(name, folder / kind)
        extra = ("--keep", "1") if command == "prune" else ()
        return lambda: cli(command, str(folder / "run"), *extra, "--json", str(folder / kind / f"{kind}_config.json"))

    return prepare


def _json_onto_user_file(folder: Path) -> Action:
    """`adapterfusion evaluate RUN --json notes.json`, a JSON file of the user's (any file no --json of ours wrote)."""
    (folder / "notes.json").write_text('{"mine": true}\n')
    return lambda: cli("evaluate", str(folder / "run"), "--json", str(folder / "notes.json"))


def _setup_with_a_piece_at_its_root(folder: Path) -> Action:
    """A saved setup of adapter a, into whose root the adapter b was saved later: load_adapter(setup) loaded b, the
    root's, passing over the setup's only adapter without a word. (save_adapter into a setup is refused now: b's
    files are copied there, as an older version or a hand copy left them.)"""
    _model("a").save_pretrained(folder / "s")
    for file in _model("b").save_adapter("b", folder / "b").iterdir():
        shutil.copy(file, folder / "s" / file.name)
    return load_into(_model(), "adapter", folder / "s")


DECODER_HUB = Path(__file__).resolve().parents[1] / "fixtures" / "adapterhub" / "decoders"


def _hub_t5_emptied(kind: str) -> Callable[[Path], Action]:
    """AdapterHub's T5 `kind` (adapter pf_cross, or fusion pf_cross_dynamic over its adapters) copied with its
    weights file rewritten holding no tensor, loaded into the T5 it was saved from."""

    def prepare(folder: Path) -> Action:
        source = DECODER_HUB / "t5" / ("adapters/pf_cross" if kind == "adapter" else "fusions/pf_cross_dynamic")
        copy = Path(shutil.copytree(source, folder / kind))
        weights = "adapter.safetensors" if kind == "adapter" else "model_adapter_fusion.safetensors"
        save_file({}, copy / weights)
        model = af.wrap(AutoModelForSeq2SeqLM.from_pretrained(DECODER_HUB / "t5" / "base_model"))
        if kind == "fusion":
            for name in ("pf_cross", "pf_cross_tanh"):
                model.load_adapter(DECODER_HUB / "t5" / "adapters" / name)
        return load_into(model, kind, copy)

    return prepare


def _peft_folder(folder: Path) -> Action:
    """A PEFT LoRA's folder (adapter_config.json with peft_type, adapter_model.safetensors), loaded with
    load_adapter into a tiny GPT-2."""
    (folder / "adapter_config.json").write_text('{"peft_type": "LORA", "r": 8, "target_modules": ["c_attn"]}')
    save_file({"base_model.model.transformer.h.0.attn.c_attn.lora_A.weight": torch.zeros(8, 32)}, folder / "a.st")
    (folder / "a.st").rename(folder / "adapter_model.safetensors")
    return load_into(af.wrap(tiny_decoder("gpt2")), "adapter", folder)


CASES: tuple[BadInput, ...] = (
    # ---- flags given as strings: "no" is truthy -----------------------------------------------------------------
    B(
        "store-put-model-overwrite-string",
        "saved files",
        "AdapterStore.put_model(..., overwrite='no') onto a stored adapter (it replaced the trained adapter)",
        af.ConfigError,
        ("overwrite='no'", "has type str", "expected true or false"),
        _store_put_model("no"),
    ),
    B(
        "store-load-into-head-string",
        "saved files",
        "AdapterStore.load_into(..., head='no') (it loaded the head)",
        af.ConfigError,
        ("head='no'", "expected true or false"),
        _store_load_head_string,
    ),
    B(
        "export-adapterhub-use-safetensors-string",
        "saved files",
        "export_adapterhub(..., use_safetensors='no') (it wrote safetensors)",
        af.ConfigError,
        ("use_safetensors='no'", "expected true or false"),
        _export_use_safetensors,
    ),
    # ---- weights in a dtype nothing is computed in --------------------------------------------------------------
    B(
        "adapter-weights-float8",
        "saved files",
        "load_adapter of a saved adapter whose weights are float8_e4m3fn (torch: isfinite not implemented)",
        af.SerializationError,
        ("/a:", "tensor 'layer.", "float8_e4m3fn", "float32"),
        _float8_weights,
    ),
    B(
        "adapterhub-weights-float8",
        "saved files",
        "load_adapter of an AdapterHub adapter (ln_before) whose pytorch_adapter.bin holds float8_e5m2 tensors",
        af.SerializationError,
        ("pf_ln", "float8_e5m2", "float32"),
        _adapterhub_float8,
    ),
    # ---- what this user may not read ----------------------------------------------------------------------------
    B(
        "adapter-weights-unreadable",
        "saved files",
        "load_adapter of a saved adapter whose adapter.safetensors has mode 000",
        af.SerializationError,
        ("/a/adapter.safetensors", "cannot be read by this user", "permission denied", "chmod"),
        _unreadable_piece("adapter.safetensors"),
    ),
    B(
        "adapter-config-unreadable",
        "saved files",
        "load_adapter of a saved adapter whose adapter_config.json has mode 000 (it was called corrupt or truncated)",
        af.SerializationError,
        ("/a/adapter_config.json", "cannot be read by this user", "permission denied", "chmod"),
        _unreadable_piece("adapter_config.json"),
    ),
    B(
        "adapter-folder-unlistable",
        "saved files",
        "load_adapter of a saved adapter whose folder has mode 0311 (it cannot be listed)",
        af.SerializationError,
        ("/a", "cannot be read by this user", "permission denied", "chmod u+rx"),
        _unreadable_piece("", 0o311),
    ),
    B(
        "setup-adapters-folder-unreadable",
        "saved files",
        "from_pretrained of a saved setup whose adapters/ folder has mode 000",
        af.SerializationError,
        ("/s/adapters", "cannot be read by this user", "permission denied", "chmod u+rx"),
        _unreadable_setup_folder,
    ),
    # ---- what this user may not write ---------------------------------------------------------------------------
    B(
        "save-pretrained-drops-read-only-piece",
        "saved files",
        "save_pretrained(overwrite=True) of adapter a onto a setup of a and b whose adapters/b is read-only (mode 555)",
        af.ConfigError,
        ("/setup/adapters/b'", "adapter 'b'", "drops", "read-only for this user"),
        _save_pretrained_dropping_read_only_piece,
    ),
    B(
        "save-pretrained-leaves-out-pieces",
        "saved files",
        "save_pretrained(folder, adapters='a') onto a setup of adapters a and b (b's files went without a word)",
        af.ConfigError,
        ("holds the adapter 'b'", "leaves out", "overwrite=True", "adapters=[...]"),
        _save_pretrained_leaving_out_pieces,
    ),
    B(
        "store-put-model-read-only",
        "saved files",
        "AdapterStore.put_model into a store folder that is read-only (mode 555)",
        af.ConfigError,
        ("store '", "/store'", "read-only for this user"),
        _store_read_only,
    ),
    B(
        "store-overwrite-entry-folder-read-only",
        "saved files",
        "AdapterStore.put_model(..., overwrite=True) onto an entry whose folder <store>/enc/rte/st-a is read-only",
        af.ConfigError,
        ("/store/enc/rte/st-a'", "read-only for this user"),
        _store_entry_parent_read_only,
    ),
    # ---- names and documents ------------------------------------------------------------------------------------
    B(
        "save-pretrained-name-near-limit",
        "saved files",
        "save_pretrained into a new folder whose name is 242 bytes (its temp folder's would be 256)",
        af.ConfigError,
        ("bytes long", "a file or folder name may have at most", "temp name 14 bytes longer"),
        _save_pretrained_name_near_limit,
    ),
    B(
        "adapterhub-fusion-names-not-strings",
        "saved files",
        "load_fusion of an AdapterHub fusion whose adapter_fusion_config.json has adapter_names [1, 2]",
        af.SerializationError,
        ("adapter_fusion_config.json", "adapter_names", "[1, 2]", "list of strings"),
        _adapterhub_fusion_names([1, 2]),
    ),
    B(
        "adapterhub-fusion-config-truncated",
        "saved files",
        "load_fusion of an AdapterHub fusion whose adapter_fusion_config.json is cut to '{' (was told that "
        "fusion_config.json is missing)",
        af.SerializationError,
        ("adapter_fusion_config.json is not valid JSON", "corrupt or truncated"),
        _adapterhub_fusion_truncated,
    ),
    # ---- what a later load would not find, and what appears while saving ----------------------------------------
    B(
        "export-adapterhub-overwrite-lone-weights",
        "saved files",
        "export_adapterhub(..., overwrite=True) into a folder holding only the user's pytorch_adapter.bin, no config "
        "(it was called 'an adapter saved by save_adapter', then deleted)",
        af.ConfigError,
        ("pytorch_adapter.bin", "but no adapter_config.json", "nothing says", "even with overwrite=True"),
        _export_over_lone_weights,
    ),
    B(
        "save-fusion-beside-adapterhub-fusion",
        "saved files",
        "save_fusion('f', <a folder holding an AdapterHub fusion>) (saved beside it; load_fusion of the folder then "
        "loaded the AdapterHub fusion, not the one saved)",
        af.ConfigError,
        ("/f'", "holds an AdapterHub fusion", "adapter_fusion_config.json", "hidden", "another folder"),
        _save_fusion_beside_adapterhub_fusion,
    ),
    B(
        "export-adapterhub-fusion-beside-saved-fusion",
        "saved files",
        "export_adapterhub(model, 'fusion', 'f', <the folder of a fusion saved by save_fusion>, overwrite=True) "
        "(written beside it; load_fusion of the folder then read the export, hiding the saved fusion)",
        af.ConfigError,
        ("/f'", "saved by save_fusion", "fusion_config.json", "hide", "another folder"),
        _export_fusion_beside_saved_fusion,
    ),
    B(
        "save-pretrained-folder-appears-meanwhile",
        "saved files",
        "save_pretrained(<a new folder>) while the user moves their own folder (thesis.tex) to that path (the setup "
        "was renamed over it: thesis.tex deleted)",
        af.ConfigError,
        ("/setup'", "did not exist, or was empty, when the save began", "left as it is", "nothing was saved"),
        _save_pretrained_folder_appears,
    ),
    B(
        "save-adapter-over-read-only-file",
        "saved files",
        "save_adapter('a', <its earlier save, whose adapter.safetensors is read-only (mode 444)>) (replaced: a rename "
        "ignores the file's mode)",
        af.ConfigError,
        ("/a'", "'adapter.safetensors'", "read-only (write-protected)", "chmod u+w"),
        _save_adapter_over_read_only,
    ),
    B(
        "save-adapter-diverged-over-saved",
        "saved files",
        "save_adapter('a', <its earlier good save>) after its weights went NaN (the good adapter was replaced by one "
        "that load_adapter refuses as diverged)",
        af.ConfigError,
        ("adapter 'a'", "1 NaN or infinite value(s)", "'layer.1.output.up.weight'", "diverged", "nothing was written"),
        _diverged_save_over_good_one(whole_setup=False),
    ),
    B(
        "save-pretrained-diverged-over-saved",
        "saved files",
        "save_pretrained(<its earlier good setup>) after adapter a's weights went NaN (the setup then failed to load)",
        af.ConfigError,
        ("adapter 'a'", "NaN or infinite", "diverged", "cannot be loaded"),
        _diverged_save_over_good_one(whole_setup=True),
    ),
    B(
        "load-adapter-setup-with-root-adapter",
        "saved files",
        "load_adapter(<a saved setup of adapter a, into whose root adapter b was saved later>) (loaded b, passing over "
        "the setup's only adapter without a word)",
        af.ConfigError,
        ("/s is a saved setup holding 1 adapter(s)", "/s/adapters/a'", "another adapter", "cannot be told"),
        _setup_with_a_piece_at_its_root,
    ),
    B(
        "export-adapterhub-diverged-over-exported",
        "saved files",
        "export_adapterhub(..., overwrite=True) over its earlier good export after the adapter's weights went inf "
        "(the good export was replaced by weights that loading refuses)",
        af.ConfigError,
        ("adapter 'a'", "1 NaN or infinite value(s)", "export_adapterhub would write", "nothing was written"),
        _diverged_export_over_good_one,
    ),
    B(
        "evaluate-json-standalone-adapter-config",
        "saved files",
        "adapterfusion evaluate RUN --json <a lone saved adapter's adapter_config.json> (the adapter's config was "
        "replaced by the result: the adapter was lost)",
        af.ConfigError,
        ("--json", "adapter_config.json", "no adapterfusion evaluate or prune --json wrote", "new path"),
        _json_onto_saved("adapter", "evaluate"),
        cli=True,
    ),
    B(
        "prune-json-standalone-head-config",
        "saved files",
        "adapterfusion prune RUN --keep 1 --json <a lone saved head's head_config.json> (replaced by the result)",
        af.ConfigError,
        ("--json", "head_config.json", "no adapterfusion evaluate or prune --json wrote", "new path"),
        _json_onto_saved("head", "prune"),
        cli=True,
    ),
    B(
        "evaluate-json-user-file",
        "saved files",
        "adapterfusion evaluate RUN --json notes.json, a JSON file of the user's (replaced by the result)",
        af.ConfigError,
        ("--json", "notes.json", "never overwrite a file we did not write", "move that file away"),
        _json_onto_user_file,
        cli=True,
    ),
    B(
        "adapterhub-t5-adapter-weights-empty",
        "saved files",
        "AdapterHub's T5 cross adapter whose adapter.safetensors holds no tensor (was 'weights do not match the saved "
        "config (missing [...])', blaming the config)",
        af.SerializationError,
        ("/adapter: the adapter file", "holds no weights at all", "6 sites", "Save the adapter again"),
        _hub_t5_emptied("adapter"),
    ),
    B(
        "adapterhub-t5-fusion-weights-empty",
        "saved files",
        "AdapterHub's T5 fusion over cross adapters whose model_adapter_fusion.safetensors holds no tensor (was "
        "'weights do not match the saved config (missing [...])')",
        af.SerializationError,
        ("holds no weights at all", "6 sites", "Save the fusion again"),
        _hub_t5_emptied("fusion"),
    ),
    B(
        "load-adapter-peft-folder",
        "saved files",
        "load_adapter(<a PEFT LoRA's folder>) on a GPT-2 (was 'is not an adapterfusion adapter config (format/kind "
        "fields do not match)', which did not say whose file it is)",
        af.SerializationError,
        ("adapter_config.json", "PEFT adapter's config", "peft_type='LORA'", "PeftModel.from_pretrained"),
        _peft_folder,
    ),
)
