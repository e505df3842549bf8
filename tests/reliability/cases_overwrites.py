"""Bad-input cases at one boundary, paths already taken where we write: the default decoder's converted folder in the
cache held by a user's file or folder (a raw OSError from the rename after a conversion of 40 s), and an AdapterHub
export to, or import from, a path the OS cannot open (a raw ValueError: the export looked into the folder before the
path was judged, the import read a file under it); a save onto a full disk; and a save beside the temp folder
another writer of the same path is still filling, which it removed as a killed writer's.
The conversion is never run: it is replaced by one that fails the case, so a case shows the refusal comes first."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path
from typing import Any
from unittest import mock

import adapterfusion as af
from adapterfusion import defaults
from adapterfusion.interop import export_adapterhub, load_adapterhub
from adapterfusion.io import atomic
from catalogue import Action, BadInput, a_file
from tiny_models import tiny_encoder

B = BadInput


def _never_converted(gguf: Path, staging: Path) -> Any:
    raise AssertionError("the decoder was converted before the cache path was checked")


def _decoder_cache_taken(occupant: str) -> Any:
    """default_decoder_path() with the cache in the case folder, where `occupant` ('file' or 'folder', the user's)
    holds the converted decoder's path; the shipped GGUF file is a stand-in of 4 bytes."""

    def prepare(folder: Path) -> Action:
        gguf = folder / "package" / defaults.DEFAULT_DECODER_FILE
        gguf.parent.mkdir()
        gguf.write_bytes(b"GGUF")
        target = folder / "cache" / f"smollm2-135m-instruct-{gguf.stat().st_size}"
        target.parent.mkdir()
        if occupant == "file":
            a_file(target.parent, target.name)
        else:
            target.mkdir()
            a_file(target, "notes.txt")

        def run() -> Any:
            with (
                mock.patch.dict("os.environ", {defaults.CACHE_ENV: str(folder / "cache")}),
                mock.patch.object(defaults, "default_decoder_gguf", lambda: gguf),
                mock.patch.object(defaults, "_convert_decoder", _never_converted),
            ):
                return af.default_decoder_path()

        return run

    return prepare


def _export_to_nul_path(folder: Path) -> Action:
    model = af.wrap(tiny_encoder("bert"))
    model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4))
    return lambda: export_adapterhub(model, "adapter", "a", f"{folder}/a\0b")


def _import_from_nul_path(folder: Path) -> Action:
    model = af.wrap(tiny_encoder("bert"))
    return lambda: load_adapterhub(model, "adapter", f"{folder}/a\0b")


def _beside_a_running_writer(folder: Path) -> Action:
    """save_pretrained(<dir>/setup) while `.setup.<8>.tmp`, the folder another writer (this process, running) fills,
    is beside it; the saved setup is removed again, so the runner's check sees whether that folder was touched."""
    model = af.wrap(tiny_encoder("bert"))
    model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4))
    filling = folder / ".setup.k2j_x9q0.tmp"
    filling.mkdir()
    (filling / "adapter.safetensors").write_text("half written")
    (filling / atomic.WRITING_MARKER).write_text(json.dumps(atomic._writer()))

    def run() -> str:
        saved = model.save_pretrained(folder / "setup")
        files = sorted(os.listdir(saved))
        shutil.rmtree(saved)
        return f"saved {files}; the other writer's folder kept: {filling.is_dir()}"

    return run


def _export_over_save_beside_users_weights(kind: str) -> Any:
    """A user's own AdapterHub-named weights file (`kind` adapter: pytorch_adapter.bin; head: model_head.safetensors),
    then save_<kind> into that folder, then export_adapterhub(overwrite=True) there: the user's file was removed as
    the replaced piece's leftover weights. The adapter's export succeeds, so it runs in a folder beside the case's
    (whose files must stay as they were); the head's is refused, in the case's folder."""

    def prepare(case_folder: Path) -> Action:
        folder = case_folder.with_name(f"{case_folder.name}-export") if kind == "adapter" else case_folder
        folder.mkdir(exist_ok=True)
        model = af.wrap(tiny_encoder("bert"))
        model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4))
        model.add_head("a", af.ClassificationHead(num_labels=2))
        mine = folder / ("pytorch_adapter.bin" if kind == "adapter" else "model_head.safetensors")
        mine.write_bytes(b"my own weights")
        getattr(model, f"save_{kind}")("a", folder)

        def run() -> str:
            export_adapterhub(model, kind, "a", folder, use_safetensors=kind == "adapter", overwrite=True)
            return f"exported {sorted(os.listdir(folder))}; {mine.name} kept: {mine.read_bytes() == b'my own weights'}"

        return run

    return prepare


def _save_onto_a_full_disk(folder: Path) -> Action:
    """save_pretrained over an earlier save while the disk is full: every fsync fails with ENOSPC, as the kernel
    reports delayed allocation running out of room after the write itself passed."""
    model = af.wrap(tiny_encoder("bert"))
    model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4))
    model.save_pretrained(folder / "setup")
    model.add_adapter("b", af.AdapterConfig.pfeiffer(reduction_factor=4))

    def no_room(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def run() -> Any:
        with mock.patch.object(os, "fsync", no_room):
            return model.save_pretrained(folder / "setup")

    return run


CASES: tuple[BadInput, ...] = (
    B(
        "default-decoder-cache-taken-by-file",
        "overwrites",
        "default_decoder_path() where the converted folder goes in the cache is a user's file (a raw "
        "NotADirectoryError from the rename, after the 40 s conversion)",
        af.DefaultModelMissingError,
        ("a file is in its place", "not ours to replace", "nothing was changed", defaults.CACHE_ENV),
        _decoder_cache_taken("file"),
    ),
    B(
        "default-decoder-cache-taken-by-folder",
        "overwrites",
        "default_decoder_path() where the converted folder goes in the cache is a user's folder holding notes.txt "
        "(a raw OSError 'Directory not empty' from the rename, after the 40 s conversion)",
        af.DefaultModelMissingError,
        ("'notes.txt'", "no config.json", "not ours to replace", defaults.CACHE_ENV),
        _decoder_cache_taken("folder"),
    ),
    B(
        "export-adapterhub-path-with-nul",
        "overwrites",
        "export_adapterhub(model, 'adapter', 'a', '<dir>/a\\x00b'), a path with a NUL character (a raw ValueError "
        "from os.scandir while looking for a model's files there)",
        af.ConfigError,
        ("export_adapterhub: the adapter folder", "NUL character", "choose another folder path"),
        _export_to_nul_path,
    ),
    B(
        "load-adapterhub-path-with-nul",
        "overwrites",
        "load_adapterhub(model, 'adapter', '<dir>/a\\x00b'), a path with a NUL character (a raw ValueError 'embedded "
        "null byte' from reading adapter_config.json)",
        af.SerializationError,
        ("a\\x00b/adapter_config.json", "NUL character"),
        _import_from_nul_path,
    ),
    B(
        "save-beside-a-running-writers-temp-folder",
        "overwrites",
        "save_pretrained(<dir>/setup) while another process saving the same path fills its temp folder "
        "<dir>/.setup.k2j_x9q0.tmp (not an error; was removed as a killed writer's, and that writer failed with a raw "
        "FileNotFoundError)",
        None,
        ("the other writer's folder kept: True",),
        _beside_a_running_writer,
    ),
    B(
        "export-over-save-beside-users-bin",
        "overwrites",
        "a user's own pytorch_adapter.bin, save_adapter into that folder, then export_adapterhub(..., "
        "overwrite=True) there (not an error; the .bin was deleted as the replaced adapter's leftover weights)",
        None,
        ("pytorch_adapter.bin kept: True",),
        _export_over_save_beside_users_weights("adapter"),
    ),
    B(
        "export-bin-over-save-beside-users-safetensors",
        "overwrites",
        "a user's own model_head.safetensors, save_head into that folder, then export_adapterhub(..., "
        "use_safetensors=False, overwrite=True) there (the user's file was deleted as the replaced head's leftover)",
        af.ConfigError,
        ("holds model_head.safetensors", "not part of the head being replaced", "use_safetensors=True"),
        _export_over_save_beside_users_weights("head"),
    ),
    B(
        "save-pretrained-onto-a-full-disk",
        "overwrites",
        "save_pretrained(<dir>/setup) over an earlier save while the disk is full (a raw OSError '[Errno 28] No space "
        "left on device' naming a temp file of ours, and not saying the earlier save was kept)",
        af.StorageFullError,
        (
            "/setup/adapters/a/adapter_config.json' failed",
            "No space left on device",
            "nothing there was changed",
            "Free space",
        ),
        _save_onto_a_full_disk,
    ),
)
