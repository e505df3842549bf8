"""Encoder arguments: a Hub id stays a Hub id (with or without an org, with a revision) and is looked up once and
fast, a string that can only be a path must exist, a folder must hold a model and a working tokenizer
(adapterfusion/encoders.py, adapterfusion/io/hub.py)."""

import json
import re
import shutil
import time
from pathlib import Path

import huggingface_hub
import pytest
from huggingface_hub.utils import httpx

from adapterfusion.encoder_loading import Encoder
from adapterfusion.encoders import check_encoder, default_pooling, looks_like_path, resolve_encoder
from adapterfusion.errors import ConfigError, HubError
from adapterfusion.io.hub import OFFLINE_VARIABLES, PROBE_SECONDS, HubRef, hub_ref, id_problem
from adapterfusion.training import train
from tiny_models import tiny_encoder


@pytest.mark.parametrize("value", ["bert-base-uncased", "sentence-transformers/all-MiniLM-L6-v2", "org/name"])
def test_hub_ids_are_left_to_the_hub(tmp_path, value):
    assert not looks_like_path(value, tmp_path)
    assert check_encoder(value, tmp_path) is None


@pytest.mark.parametrize(
    "value", ["./enc", "../enc", "/nowhere/enc", "~/enc-that-is-not-there", "a/b/c", "models\\enc", "C:/models/enc"]
)
def test_path_like_strings_that_do_not_exist_are_refused(tmp_path, value):
    assert looks_like_path(value, tmp_path)
    with pytest.raises(ConfigError, match="looks like a local path.*does not exist"):
        check_encoder(value, tmp_path)


def test_org_name_is_a_path_when_its_org_folder_exists_locally(tmp_path):
    (tmp_path / "models").mkdir()
    assert looks_like_path("models/enc", tmp_path)
    with pytest.raises(ConfigError, match=r"'models/enc' looks like a local path"):
        check_encoder("models/enc", tmp_path)


def test_an_existing_folder_must_hold_a_model(tmp_path, tiny_encoder_dir):
    (tmp_path / "enc").mkdir()
    (tmp_path / "enc" / "vocab.txt").write_text("[PAD]\n")
    with pytest.raises(ConfigError, match=r"holds no config.json \(it holds \['vocab.txt'\]\)"):
        check_encoder("enc", tmp_path)
    shutil.rmtree(tmp_path / "enc")
    shutil.copytree(tiny_encoder_dir, tmp_path / "enc")
    assert check_encoder("enc", tmp_path) == tmp_path / "enc"
    assert check_encoder(tmp_path / "enc") == tmp_path / "enc"
    with pytest.raises(ConfigError, match="is a file"):
        check_encoder("enc/config.json", tmp_path)
    (tmp_path / "model.Q4_1.gguf").write_bytes(b"GGUF")
    with pytest.raises(ConfigError, match=r"is a GGUF file .*gguf_file='model\.Q4_1\.gguf'.*'default-decoder'"):
        check_encoder("model.Q4_1.gguf", tmp_path)


# ---- Hub ids: parsed in one place (io/hub.py), looked up once, fast ------------------------------------------------


@pytest.mark.parametrize(
    "value, ref",
    [
        ("bert-base-uncased", HubRef("bert-base-uncased")),  # a canonical id has no org and is a Hub id all the same
        ("bert-base-uncased@v1", HubRef("bert-base-uncased", revision="v1")),
        ("org/name@0123abc", HubRef("org/name", revision="0123abc")),
        ("org/name/sub/dir", HubRef("org/name", "sub/dir")),
    ],
)
def test_hub_ids_parse_with_or_without_an_org(value, ref):
    assert hub_ref(value) == ref


@pytest.mark.parametrize(
    "value",
    ["org--x/name", "a..b", "-name", "org/name@", "org/name@/x", "x" * 97, "", "org/name@..", "org/name@a..b"]
    + ["org/name@v1/", "org/name@.hidden", "org/name@x.lock", "org/name@a:b", "org/name@a~1", "org/name@a\x00"],
)
def test_strings_the_hub_refuses_are_no_hub_ids(value):
    assert hub_ref(value) is None


@pytest.mark.parametrize("revision", ["main", "v1.0", "refs/pr/1", "a" * 40, "feature/x-y_z", "100%"])
def test_revisions_git_can_name_stay_hub_ids(revision):
    assert hub_ref(f"org/name@{revision}") == HubRef("org/name", "", revision)


@pytest.mark.parametrize(
    "url, suggested",
    [
        ("https://huggingface.co/org/name", "'org/name'"),
        ("huggingface.co/org/name/tree/v2/adapters/a", "'org/name/adapters/a@v2'"),
        ("https://hf.co/org/name/blob/main/adapters/a/adapter_config.json", "'org/name/adapters/a'"),
        ("hf://models/org/name", "'org/name'"),
        ("hf://datasets/org/name", "dataset repository"),
    ],
)
def test_a_web_address_of_a_repo_is_said_with_the_id_to_pass(url, suggested):
    problem = id_problem(url)
    assert problem is not None and suggested in problem
    with pytest.raises(ConfigError, match=re.escape(suggested)):
        resolve_encoder(url, reach_hub=False)


def test_a_revision_goes_to_from_pretrained_as_a_keyword_with_the_cache_checked(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "set-after-import"))
    encoder = resolve_encoder("org/name@v2", tmp_path, reach_hub=False)
    expected = {"subfolder": "", "revision": "v2", "cache_dir": str(tmp_path / "set-after-import")}
    assert encoder.pretrained() == ("org/name", expected)


@pytest.fixture
def offline(monkeypatch, tmp_path):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setattr(huggingface_hub, "model_info", _never_called)


def _never_called(*args, **kwargs):
    raise AssertionError("the Hub was asked")


def _cache(cache: Path, repo: str, files_from: Path, revision: str = "main") -> None:
    """`files_from` as the Hugging Face cache holds a downloaded snapshot of `repo` at `revision`."""
    folder = cache / f"models--{repo.replace('/', '--')}"
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / revision).write_text("0" * 40)
    shutil.copytree(files_from, folder / "snapshots" / ("0" * 40))


@pytest.mark.parametrize("value", ["some-org/uncached", "uncached-canonical", "org/name@v2"])
def test_an_uncached_hub_id_offline_fails_at_once_naming_the_cache_and_the_switch(offline, tmp_path, value):
    start = time.perf_counter()
    with pytest.raises(
        HubError, match=f"encoder {value} is not in the local Hugging Face cache .*hf-cache.*HF_HUB_OFF"
    ):
        resolve_encoder(value, tmp_path)
    assert time.perf_counter() - start < 1.0


def test_train_with_an_uncached_hub_id_offline_fails_at_once(offline, tmp_path):
    start = time.perf_counter()
    with pytest.raises(HubError, match="encoder org/name is not in the local Hugging Face cache"):
        train("rte", "head", encoder="org/name", output_dir=tmp_path / "runs")
    assert time.perf_counter() - start < 2.0
    assert not (tmp_path / "runs").exists()


def test_a_cached_hub_id_is_checked_as_a_folder_and_never_looked_up(offline, tmp_path, tiny_encoder_dir):
    _cache(tmp_path / "hf-cache", "org/cached", tiny_encoder_dir)
    assert resolve_encoder("org/cached", tmp_path) == Encoder("org/cached", hub=HubRef("org/cached"))
    _cache(tmp_path / "hf-cache", "org/no-tokenizer", tiny_encoder_dir)
    for file in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        (tmp_path / "hf-cache" / "models--org--no-tokenizer" / "snapshots" / ("0" * 40) / file).unlink(missing_ok=True)
    with pytest.raises(ConfigError, match="no usable tokenizer"):
        resolve_encoder("org/no-tokenizer", tmp_path)


def test_a_hub_id_cached_in_other_letter_case_is_found_offline(offline, tmp_path, tiny_encoder_dir):
    """The Hub's ids ignore case, the cache's folders do not: 'Org/Cased' cached as models--org--cased was said to
    be not cached. One other spelling is used; several are named in the error."""
    _cache(tmp_path / "hf-cache", "org/cased", tiny_encoder_dir)
    assert resolve_encoder("Org/Cased", tmp_path) == Encoder("Org/Cased", hub=HubRef("org/cased"))
    _cache(tmp_path / "hf-cache", "ORG/cased", tiny_encoder_dir)
    with pytest.raises(HubError, match="it holds it as 'ORG/cased' and as 'org/cased'"):
        resolve_encoder("Org/Cased", tmp_path)


def test_a_tokenizer_alone_needs_no_weights_and_is_called_a_tokenizer(offline, tmp_path, tiny_encoder_dir):
    """model=False (af.pipeline's tokenizer by name): a cache holding what AutoTokenizer.from_pretrained leaves (its
    files and the config, no weights) was refused offline as 'only partly cached ... not its weights'."""
    _cache(tmp_path / "hf-cache", "org/tok", tiny_encoder_dir)
    snapshot = tmp_path / "hf-cache" / "models--org--tok" / "snapshots" / ("0" * 40)
    (snapshot / "model.safetensors").unlink()
    with pytest.raises(HubError, match="encoder org/tok is only partly .* not its weights"):
        resolve_encoder("org/tok", tmp_path)
    assert resolve_encoder("org/tok", tmp_path, model=False).hub == HubRef("org/tok")
    for file in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        (snapshot / file).unlink(missing_ok=True)
    with pytest.raises(HubError, match="tokenizer org/tok is only partly .* not its tokenizer files"):
        resolve_encoder("org/tok", tmp_path, model=False)
    with pytest.raises(HubError, match="tokenizer org/none is not in the local Hugging Face cache"):
        resolve_encoder("org/none", tmp_path, model=False)


def test_adapterhub_old_names_are_named_as_such():
    for value in ("sentiment/sst-2@ukp", "nli/rte@ukp", "en/wiki@ukp", "@ukp/bert-base-uncased_nli_rte_pfeiffer"):
        assert "AdapterHub's old name" in (id_problem(value) or ""), value
    assert "'AdapterHub/bert-base-uncased-pf-sst2'" in (id_problem("sentiment/sst-2@ukp") or "")
    for value in ("org/name@v1", "nli-org/rte@ukp", "sentiment/sst-2", "sentiment/sst-2@main", "nli/rte@0123abcd"):
        assert id_problem(value) is None, value


def test_online_an_unreachable_hub_is_asked_once_with_a_short_timeout(monkeypatch, tmp_path):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    for name in OFFLINE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    calls = []

    def unreachable(repo_id, **kwargs):
        calls.append((repo_id, kwargs))
        raise httpx.ConnectError("[Errno -2] Name or service not known")

    monkeypatch.setattr(huggingface_hub, "model_info", unreachable)
    with pytest.raises(HubError, match="looking up encoder org/name@v1 failed \\(ConnectError.*hf-cache"):
        resolve_encoder("org/name@v1", tmp_path)
    assert calls == [("org/name", {"revision": "v1", "timeout": PROBE_SECONDS})]
    monkeypatch.setattr(huggingface_hub, "model_info", lambda repo_id, **kwargs: None)  # the Hub knows it
    assert resolve_encoder("bert-base-uncased", tmp_path).hub == HubRef("bert-base-uncased")


# ---- folders: what from_pretrained needs, checked before any work ------------------------------------------------


def test_a_home_relative_folder_is_expanded(monkeypatch, tmp_path, tiny_encoder_dir):
    shutil.copytree(tiny_encoder_dir, tmp_path / "models" / "enc")
    monkeypatch.setenv("HOME", str(tmp_path))
    encoder = resolve_encoder("~/models/enc")
    assert encoder.folder == tmp_path / "models" / "enc"
    assert encoder.pretrained() == (str(tmp_path / "models" / "enc"), {})


def test_a_folder_with_weights_but_no_tokenizer_is_usable_as_a_base_only(tmp_path):
    tiny_encoder("bert").save_pretrained(tmp_path / "enc")
    with pytest.raises(ConfigError, match="no usable tokenizer: it holds none of the tokenizer files"):
        resolve_encoder(tmp_path / "enc")
    assert resolve_encoder(tmp_path / "enc", tokenizer=False).folder == tmp_path / "enc"


def test_a_cached_hub_decoder_defaults_to_last_token_pooling_without_the_hub(offline, tmp_path, tiny_encoder_dir):
    """Experiment specs spell the default pooling out before anything loads: a decoder's Hub id is read from the
    local cache (its config names a causal architecture), an uncached id falls back to the encoder default."""
    decoder = tmp_path / "decoder"
    decoder.mkdir()
    (decoder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    _cache(tmp_path / "hf-cache", "org/decoder", decoder)
    _cache(tmp_path / "hf-cache", "org/encoder", tiny_encoder_dir)
    assert default_pooling("org/decoder") == "last"
    assert default_pooling(decoder) == "last"
    assert default_pooling("org/encoder") == default_pooling(tiny_encoder_dir) == "cls"
    assert default_pooling("org/not-downloaded") == "cls"


def test_the_tokenizer_of_a_run_takes_no_more_tokens_than_the_model(tmp_path, tiny_encoder_dir):
    """A task's default max_length (128) on a model of 64 positions whose tokenizer states 512: encoding capped only
    at the tokenizer's limit, and the run failed at its first step telling a train() caller to truncate."""
    import transformers

    from adapterfusion.encoder_loading import load_tokenizer
    from tiny_decoders import tiny_decoder

    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_encoder_dir)
    tiny_decoder("llama", vocab_size=len(tokenizer), max_position_embeddings=64).save_pretrained(tmp_path / "short")
    tokenizer.save_pretrained(tmp_path / "short")
    assert tokenizer.model_max_length == 512
    assert load_tokenizer(resolve_encoder(str(tmp_path / "short"))).model_max_length == 64
    positions = transformers.AutoConfig.from_pretrained(tiny_encoder_dir).max_position_embeddings
    assert load_tokenizer(resolve_encoder(str(tiny_encoder_dir))).model_max_length == min(512, positions)


def test_a_tokenizer_that_cannot_pad_is_refused_with_the_folder_and_the_fix(tmp_path, tiny_encoder_dir):
    """No pad token and no eos token to pad with: refused when the folder is checked (an experiment's plan, train()'s
    start) naming it; it was a TaskError 'set tokenizer.pad_token before collating' at a run's first batch, after the
    data had loaded. With an eos token, that pads."""
    import transformers

    from adapterfusion.encoder_loading import load_tokenizer
    from tiny_decoders import tiny_decoder

    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_encoder_dir)
    tokenizer.pad_token = None
    folder = tmp_path / "no-pad"
    tiny_decoder("llama", vocab_size=len(tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    with pytest.raises(ConfigError, match=r"neither a pad token nor an eos token") as refused:
        check_encoder(folder)
    assert f"tok.pad_token = tok.unk_token; tok.save_pretrained({str(folder)!r})" in str(refused.value)
    tokenizer.eos_token = "[SEP]"
    tokenizer.save_pretrained(folder)
    assert load_tokenizer(resolve_encoder(folder)).pad_token == "[SEP]"


def test_weights_a_checkpoint_lacks_are_the_same_on_every_load_and_leave_the_callers_randomness(
    tmp_path, tiny_encoder_dir
):
    """roberta-base has no pooler weights: transformers drew a new pooler from the global generator on each load, so
    two loads of one checkpoint were other encoders to the weight digests (a run's evaluation refused it, a saved
    setup warned), and the draw shifted the caller's random stream. Our loaders draw such weights from a fixed seed
    in a forked generator."""
    import torch
    import transformers

    import adapterfusion as af
    from adapterfusion.encoder_identity import check_same_encoder, encoder_identity
    from adapterfusion.encoder_loading import load_encoder_model

    shutil.copytree(tiny_encoder_dir, tmp_path / "mlm")  # its tokenizer; the weights of a masked LM: no pooler
    masked_lm = transformers.BertForMaskedLM(transformers.AutoConfig.from_pretrained(tiny_encoder_dir))
    masked_lm.save_pretrained(tmp_path / "mlm")
    encoder = resolve_encoder(str(tmp_path / "mlm"))
    torch.manual_seed(7)
    state = torch.get_rng_state()
    first = af.wrap(load_encoder_model(encoder))
    assert torch.equal(torch.get_rng_state(), state)
    torch.manual_seed(8)  # another run's seed: the missing pooler must not follow it
    second = af.wrap(load_encoder_model(encoder))
    assert torch.equal(first.model.pooler.dense.weight, second.model.pooler.dense.weight)
    check_same_encoder(second, encoder_identity(first), tmp_path / "run")  # the same encoder: no error
