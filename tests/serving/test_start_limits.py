"""What `adapterfusion serve` refuses at start for a model that generates: a prompt and its new tokens share the
server's max_length (else the model's positions), so a --max-new-tokens that leaves no room for a one-token prompt
would have every request asking for it refused with 413. It is refused when the app is made and, for a local setup,
before the weights load, as --max-length is; the default fits the model, and models with no position limit start."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import transformers

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

from serve_helpers import load_tokenizer, running, tiny_served_model  # noqa: E402

import adapterfusion as af  # noqa: E402
from adapterfusion import cli  # noqa: E402
from adapterfusion.serving import ServeConfig, server  # noqa: E402
from adapterfusion.serving.app import create_app  # noqa: E402
from adapterfusion.serving.config import DEFAULT_MAX_NEW_TOKENS  # noqa: E402
from adapterfusion.serving.generator import new_tokens_limit  # noqa: E402
from tiny_decoders import tiny_decoder  # noqa: E402
from tiny_models import tiny_encoder  # noqa: E402


def _llama(tokenizer: Any, positions: int = 64) -> af.AdaptedModel:
    return af.wrap(tiny_decoder("llama", vocab_size=len(tokenizer), max_position_embeddings=positions))


@pytest.mark.parametrize(
    "options, words",
    [
        (
            dict(max_new_tokens=64),
            ["max_new_tokens=64 leaves no room", "at most 64 tokens", "max_position_embeddings=64"],
        ),
        (dict(max_new_tokens=10_000), ["--max-new-tokens 63 or less"]),
        (  # --max-length is the whole sequence: 32 tokens hold no 40 new ones after a prompt
            dict(max_length=32, max_new_tokens=40),
            ["at most 32 tokens", "--max-length 32, ServeConfig.max_length", "--max-new-tokens 31 or less"]
            + ["raise --max-length up to the model's 64"],
        ),
        (dict(max_length=32, max_new_tokens=32), ["max_new_tokens=32 leaves no room"]),
    ],
)
def test_new_tokens_that_leave_no_room_for_a_prompt_are_refused_when_the_app_is_made(tokenizer, options, words):
    with pytest.raises(af.ConfigError) as refused:
        create_app(_llama(tokenizer), tokenizer, ServeConfig(**options))
    for word in words:
        assert word in str(refused.value)


def test_the_most_that_fits_starts_and_requests_above_it_get_413(tokenizer):
    """63 new tokens after a one-token prompt fill the 64 positions; by default the server takes at most that."""
    create_app(_llama(tokenizer), tokenizer, ServeConfig(max_new_tokens=63))
    create_app(_llama(tokenizer), tokenizer, ServeConfig(max_length=32, max_new_tokens=31))
    with running(create_app(_llama(tokenizer), tokenizer)) as url, httpx.Client(base_url=url, timeout=30) as client:
        response = client.post("/v1/generate", json={"inputs": ["x"], "max_new_tokens": 64})
        assert response.status_code == 413, response.text
        assert "over this server's limit of 63" in response.json()["error"]["message"]


def test_the_default_fits_what_the_model_states():
    """None: DEFAULT_MAX_NEW_TOKENS, cut to leave one position for a prompt."""
    long_config = transformers.LlamaConfig(max_position_embeddings=131_072)
    short_config = transformers.LlamaConfig(max_position_embeddings=100)
    no_limit: Any = type("Tokenizer", (), {"model_max_length": int(1e30)})()
    assert new_tokens_limit(None, None, long_config, no_limit) == DEFAULT_MAX_NEW_TOKENS
    assert new_tokens_limit(None, None, short_config, no_limit) == 99
    assert new_tokens_limit(None, 8, long_config, no_limit) == 7
    assert new_tokens_limit(5_000, None, long_config, no_limit) == 5_000  # a rotary model's long context


def test_models_with_no_position_limit_still_start(tokenizer):
    """A rotary decoder with a huge max_position_embeddings starts with the default and with long generations; one
    whose config and tokenizer state no limit (T5: relative positions) is held to the server's 512 unless
    --max-length says more."""
    huge = _llama(tokenizer, positions=131_072)
    unlimited = load_tokenizer()
    unlimited.model_max_length = int(1e30)  # what transformers sets when a tokenizer names no limit
    create_app(huge, unlimited)
    create_app(huge, unlimited, ServeConfig(max_new_tokens=4_000))
    stated_nothing = af.wrap(tiny_decoder("t5", vocab_size=len(unlimited)))
    create_app(stated_nothing, unlimited)
    with pytest.raises(af.ConfigError, match="states a limit, so the server keeps 512.*give --max-length"):
        create_app(stated_nothing, unlimited, ServeConfig(max_new_tokens=600))
    create_app(stated_nothing, unlimited, ServeConfig(max_length=2_000, max_new_tokens=600))


def test_a_model_that_cannot_generate_ignores_max_new_tokens(tokenizer):
    """An encoder has no /v1/generate, so the option cannot be wrong for it."""
    create_app(tiny_served_model(tokenizer), tokenizer, ServeConfig(max_new_tokens=10_000))


def test_serve_refuses_them_before_the_weights_load(tmp_path: Path, tokenizer, monkeypatch, capsys):
    """`serve SETUP --max-new-tokens N` for a setup saved on a decoder: `error: ...`, exit 2, no weights loaded."""
    base = tiny_decoder("llama", vocab_size=len(tokenizer), max_position_embeddings=64)
    base.save_pretrained(tmp_path / "base")
    tokenizer.save_pretrained(tmp_path / "base")
    af.wrap(base).save_pretrained(tmp_path / "setup")
    capsys.readouterr()  # transformers' progress bars while saving
    loads = []

    def from_pretrained(*args, **kwargs):
        loads.append(args)
        raise af.ConfigError("the weights began to load")

    monkeypatch.setattr(af.AdaptedModel, "from_pretrained", from_pretrained)
    command = ["serve", str(tmp_path / "setup"), "--base", str(tmp_path / "base")]
    for options in (["--max-new-tokens", "64"], ["--max-length", "16", "--max-new-tokens", "16"]):
        assert cli.main([*command, *options]) == 2
        error = capsys.readouterr().err
        assert error.startswith(f"error: max_new_tokens={options[-1]} leaves no room for a prompt"), error
        assert error.count("\n") == 1 and not loads
    assert cli.main([*command, "--max-new-tokens", "63"]) == 2
    assert "the weights began to load" in capsys.readouterr().err and len(loads) == 1


@pytest.mark.parametrize("device", ["xpu", "hpu:0", "xla", "lazy"])
def test_a_device_type_this_torch_cannot_use_is_refused_before_the_setup_loads(device, monkeypatch, tmp_path):
    """torch.device accepts every type torch knows of; a backend this build lacks failed in model.to() after the
    minutes of loading (AssertionError 'Torch not compiled with XPU enabled', ModuleNotFoundError 'torch.hpu')."""
    monkeypatch.setattr(server, "load_setup", lambda *args: pytest.fail("the setup was loaded"))
    with pytest.raises(af.ConfigError, match=f"device '{device}': this machine's torch cannot place tensors"):
        server.serve(tmp_path / "setup", device=device)


@pytest.mark.parametrize("max_length", [2, 3, 4])
def test_a_max_length_that_leaves_no_room_for_a_text_pair_is_refused_when_the_app_is_made(tokenizer, max_length):
    """MiniLM's tokenizer adds 3 tokens of its own to a pair ([CLS] a [SEP] b [SEP]). At --max-length 4 it cut the
    first text away (a prediction of the second alone), at 3 every pair was refused as 'no tokens of text', and at 2
    it cut nothing (inputs over max_length), each without a word at start."""
    words = f"max_length={max_length} tokens leaves no room for text: this tokenizer adds 3 tokens of its own"
    with pytest.raises(af.ConfigError, match=words) as refused:
        create_app(tiny_served_model(tokenizer), tokenizer, ServeConfig(max_length=max_length))
    assert "--max-length 5 or more" in str(refused.value)
    create_app(tiny_served_model(tokenizer), tokenizer, ServeConfig(max_length=5))


def test_a_tokenizer_whose_words_the_model_cannot_embed_is_refused_when_the_app_is_made(tokenizer):
    """A model of 1000 embeddings served with MiniLM's 30522-word tokenizer answered some texts and refused others
    422, 'was the tokenizer made for this model?', to clients who could do nothing about it."""
    small = af.wrap(tiny_encoder(vocab_size=1000, max_position_embeddings=128))
    with pytest.raises(af.ConfigError, match="the tokenizer has 30522 tokens and the model's embedding table 1000"):
        create_app(small, tokenizer)
    create_app(af.wrap(tiny_encoder(vocab_size=len(tokenizer) + 6, max_position_embeddings=128)), tokenizer)
