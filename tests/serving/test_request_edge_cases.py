"""Requests at the edges of the contract, over HTTP: a piece name the library refuses, a JSON key given twice, a text
that makes no tokens, requests still running when the drain time of a stopping server runs out; and `serve` options
refused before the setup loads (a port in use, a host that resolves to nothing, an empty API key)."""

from __future__ import annotations

import socket
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")
uvicorn = pytest.importorskip("uvicorn")

from serve_helpers import running, served, tiny_served_model  # noqa: E402

import adapterfusion as af  # noqa: E402
from adapterfusion import cli  # noqa: E402
from adapterfusion.serving import ServeConfig, server  # noqa: E402
from adapterfusion.serving.app import create_app  # noqa: E402


@pytest.fixture(scope="module")
def url(tokenizer):
    with running(create_app(tiny_served_model(tokenizer), tokenizer)) as base:
        yield base


def _post(url: str, path: str, body: bytes) -> httpx.Response:
    return httpx.post(url + path, content=body, headers={"Content-Type": "application/json"}, timeout=30)


@pytest.mark.parametrize("name", ["../x", "training", "a b", "ü"])
def test_an_invalid_piece_name_is_refused_naming_it_and_the_rule(url, name, tmp_path):
    body = {"kind": "adapter", "source": str(tmp_path / "secret-folder"), "name": name}
    response = httpx.post(url + "/v1/pieces", json=body, timeout=30)
    message = response.json()["error"]["message"]
    assert response.status_code == 422, message
    assert f"invalid adapter name {name!r}" in message and "'name'" in message
    assert "secret-folder" not in message and "saved setup" not in message


@pytest.mark.parametrize(
    "path, body, key",
    [
        ("/v1/predict", b'{"inputs": ["hello"], "adapter": "a", "head": "a", "adapter": "b"}', '"adapter"'),
        ("/v1/predict", b'{"inputs": ["hello"], "inputs": ["bye", "x"], "adapter": "a"}', '"inputs"'),
        ("/v1/predict", b'{"inputs": ["x"], "block": {"fuse": ["a", "b"], "fuse": ["a"]}, "head": "a"}', '"fuse"'),
        ("/v1/pieces", b'{"kind": "adapter", "source": "org/x", "name": "n1", "name": "n2"}', '"name"'),
    ],
)
def test_a_key_given_twice_is_refused_naming_it(url, path, body, key):
    response = _post(url, path, body)
    message = response.json()["error"]["message"]
    assert response.status_code == 400, message
    assert key in message and "more than once" in message


def test_a_fuse_block_no_loaded_fusion_matches_gets_http_advice(url):
    body = {"inputs": ["x"], "block": {"fuse": ["b", "a"]}, "head": "nli"}
    message = httpx.post(url + "/v1/predict", json=body, timeout=30).json()["error"]["message"]
    assert "POST /v1/pieces" in message and "add_fusion" not in message and "Fuse(" not in message


class _NoSpecialTokens:
    """A tokenizer that adds no special tokens of its own, as GPT-2's, Llama's and BART's decoders: "" -> []."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._tokenizer(*args, add_special_tokens=False, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tokenizer, name)

    def __len__(self) -> int:
        return len(self._tokenizer)


# A pair with a blank side (["", ""]) is refused before tokenising, naming that side (test_serve_contract.py).
@pytest.mark.parametrize("inputs, index", [(["Hello there", "", "x"], 1), ([""], 0)])
def test_a_text_of_no_tokens_is_refused_naming_the_input(tokenizer, inputs, index):
    plain = _NoSpecialTokens(tokenizer)
    with running(create_app(tiny_served_model(tokenizer), plain)) as base:
        response = httpx.post(base + "/v1/predict", json={"inputs": inputs, "adapter": "a", "head": "a"}, timeout=30)
        message = response.json()["error"]["message"]
        assert response.status_code == 422, message
        assert message == (
            f"inputs[{index}] is 0 characters that make no tokens of text (none but the tokenizer's own); send text"
        )
        ok = httpx.post(base + "/v1/predict", json={"inputs": ["Hello"], "adapter": "a", "head": "a"}, timeout=30)
        assert ok.status_code == 200, ok.text


def test_requests_running_when_the_drain_ends_get_503_with_retry_after(tokenizer, caplog):
    """A forward slower than the drain time: its requests, and one queued behind it, are answered 503 JSON with
    Retry-After when the drain ends, not cancelled by uvicorn (a plain-text 500 and a traceback each)."""
    model = tiny_served_model(tokenizer)
    model.register_forward_pre_hook(lambda *_: time.sleep(4))
    app = create_app(model, tokenizer, ServeConfig(max_batch_size=2, max_inputs=2, max_wait_ms=0))
    config = uvicorn.Config(app, log_level="info", timeout_graceful_shutdown=1 + server.STOP_GRACE_SECONDS)
    stoppable = server.draining_server(config, drain_seconds=1)
    body = {"inputs": ["x", "y"], "adapter": "a", "head": "a"}
    with served(stoppable) as base, ThreadPoolExecutor(3) as pool:
        answers = [pool.submit(httpx.post, base + "/v1/predict", json=body, timeout=30) for _ in range(3)]
        _wait_for_in_flight(base, 3)  # one forward running, two requests queued behind it (not a fixed sleep: a
        stoppable.should_exit = True  # loaded machine may take longer to connect); then what SIGTERM does
        responses = [answer.result() for answer in answers]
    for response in responses:
        assert response.status_code == 503, response.text
        assert response.headers["retry-after"] == "5"
        assert "drain time" in response.json()["error"]["message"]
    assert "Traceback" not in caplog.text and "CancelledError" not in caplog.text
    assert "Cancel" not in caplog.text  # uvicorn cancelled nothing


def _wait_for_in_flight(base: str, requests: int, seconds: float = 20.0) -> None:
    """Until the server handles `requests` HTTP requests (its /metrics `in_flight` gauge, which counts the
    /metrics request asking too), at most `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        text = httpx.get(base + "/metrics", timeout=10).text
        gauge = next(line for line in text.splitlines() if line.startswith("adapterfusion_serve_in_flight "))
        if float(gauge.split()[-1]) >= requests + 1:
            return
        time.sleep(0.05)
    pytest.fail(f"the server did not get {requests} requests within {seconds} s")


def _occupied_port() -> tuple[socket.socket, int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock, sock.getsockname()[1]


def test_a_port_in_use_and_a_host_of_no_address_are_refused_before_the_setup_loads(monkeypatch, tmp_path):
    monkeypatch.setattr(server, "load_setup", lambda *args: pytest.fail("the setup was loaded"))
    holder, port = _occupied_port()
    with holder:
        with pytest.raises(af.ConfigError, match=f"cannot listen on 127.0.0.1:{port}.*another --port"):
            server.serve(tmp_path / "setup", port=port)
    with pytest.raises(af.ConfigError, match="'no-such-host.invalid' is no address"):
        server.serve(tmp_path / "setup", host="no-such-host.invalid", port=0)


@pytest.mark.parametrize(
    "flags, words",
    [
        (
            ["--max-batch-tokens", "-1"],
            "--max-batch-tokens -1 must be a whole number of tokens >= 1, or 0 for no limit",
        ),
        (["--api-key", ""], "--api-key is empty"),
    ],
)
def test_serve_flags_are_refused_with_an_error_line_and_exit_2(flags, words, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(server, "load_setup", lambda *args: pytest.fail("the setup was loaded"))
    assert cli.main(["serve", str(tmp_path / "setup"), "--port", "0", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and words in err
