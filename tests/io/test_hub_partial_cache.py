"""Loading by Hub id with no network: offline mode (HF_HUB_OFFLINE) or a connection that fails. Offline,
snapshot_download hands back whatever an earlier download cached of a repo, and loading a piece fetches in two steps
(the JSON files, then the piece's folder), so a connection lost between them leaves a cache with the JSON files only.
Such a cache must be named for what it is (with the two ways out: the network, or a local folder), not reported as an
incompletely saved piece or a wrong path; an id that is not cached at all, or malformed, fails at once; and a failed
load changes neither the model nor the cache."""

from __future__ import annotations

import hashlib
from pathlib import Path

import huggingface_hub
import pytest
from huggingface_hub.utils import httpx

import adapterfusion as af
from hub_cache import cached_repo
from tiny_models import tiny_encoder


def _saved(tmp_path: Path) -> Path:
    """A saved setup with one adapter 'a' (adapters/a/adapter_config.json + adapter.safetensors)."""
    model = af.wrap(tiny_encoder("bert"))
    model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4))
    return model.save_pretrained(tmp_path / "saved")


def _snapshot(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file()
    }


@pytest.fixture
def cache(tmp_path: Path, monkeypatch) -> Path:
    """An empty cache that both huggingface_hub and adapterfusion read, offline mode on."""
    root = tmp_path / "hf-cache"
    root.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    return root


def _refused_unchanged(cache: Path, load, *words: str) -> None:
    model = af.wrap(tiny_encoder("bert"))
    before = _snapshot(cache)
    with pytest.raises(af.HubError) as refused:
        load(model)
    for word in words:
        assert word in str(refused.value), refused.value
    assert model.adapter_names == [] and _snapshot(cache) == before


def test_a_piece_whose_weights_were_never_fetched_is_named_partly_cached(tmp_path, cache):
    """Before: 'adapter.safetensors is missing; the adapter was not saved completely' (a cache path)."""
    saved = _saved(tmp_path) / "adapters" / "a"
    cached_repo(cache, "org/adapter", {"adapter_config.json": saved / "adapter_config.json"})
    words = ("adapter org/adapter is only partly in the local Hugging Face cache", "adapter.safetensors or")
    _refused_unchanged(cache, lambda model: model.load_adapter("org/adapter"), *words, "unset HF_HUB_OFFLINE")


def test_a_setup_whose_piece_folder_was_never_fetched_is_named_partly_cached(tmp_path, cache):
    """Before: from_pretrained said the cached folder '.../adapters/a' 'is not a directory ... check the path', and
    load_adapter of the setup that the Hub repository 'has no folder'."""
    saved = _saved(tmp_path)
    cached_repo(cache, "org/setup", {"adapterfusion_setup.json": saved / "adapterfusion_setup.json"})
    for load in (
        lambda model: af.AdaptedModel.from_pretrained(tiny_encoder("bert"), "org/setup"),
        lambda model: model.load_adapter("org/setup"),
    ):
        _refused_unchanged(cache, load, "adapter org/setup/adapters/a is only partly", "local folder")


def test_a_cache_with_another_repos_files_only_is_named_partly_cached(tmp_path, cache):
    """A snapshot of the repo with neither an index nor a piece config (an earlier download of other files)."""
    cached_repo(cache, "org/setup", {"README.md": _saved(tmp_path) / "adapterfusion_setup.json"})
    _refused_unchanged(
        cache, lambda model: af.AdaptedModel.from_pretrained(tiny_encoder("bert"), "org/setup"), "saved setup org/setup"
    )
    _refused_unchanged(cache, lambda model: model.load_head("org/setup"), "head folder org/setup is only partly")


def test_what_is_fully_cached_loads_offline(tmp_path, cache):
    saved = _saved(tmp_path)
    files = {str(p.relative_to(saved)): p for p in saved.rglob("*") if p.is_file()}
    cached_repo(cache, "org/setup", files)
    assert af.AdaptedModel.from_pretrained(tiny_encoder("bert"), "org/setup").adapter_names == ["a"]
    assert af.wrap(tiny_encoder("bert")).load_adapter("org/setup/adapters/a") == "a"


def test_an_id_not_cached_at_all_fails_at_once_offline(cache, monkeypatch):
    _refused_unchanged(cache, lambda model: model.load_adapter("org/nothing"), "downloading org/nothing", "local")


def test_a_connection_lost_between_the_two_steps_then_offline(tmp_path, cache, monkeypatch):
    """Online, the JSON files came and the piece's download failed (ConnectError): a HubError naming the network and
    a local folder; the next load offline finds the cache as that left it and says it is partly there."""
    saved = _saved(tmp_path) / "adapters" / "a"
    snapshot = cached_repo(cache, "org/adapter", {"adapter_config.json": saved / "adapter_config.json"})
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)

    def snapshot_download(repo_id, *, allow_patterns=None, **kwargs):
        if allow_patterns == ["*.json"]:
            return str(snapshot)
        raise httpx.ConnectError("[Errno 101] Network is unreachable")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    _refused_unchanged(
        cache, lambda model: model.load_adapter("org/adapter"), "ConnectError", "check the network", "local folder"
    )
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    _refused_unchanged(cache, lambda model: model.load_adapter("org/adapter"), "only partly")


@pytest.mark.parametrize("source", ["org//name", "org/na me", "-org/name", "org/name@", "a/b/../c", "org/name--x"])
def test_a_malformed_id_never_reaches_the_hub(source, cache, monkeypatch):
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda *a, **k: pytest.fail("the Hub was asked"))
    model = af.wrap(tiny_encoder("bert"))
    with pytest.raises(af.SerializationError, match="nor a Hub id of the form 'org/name'"):
        model.load_adapter(source)
    assert model.adapter_names == []
