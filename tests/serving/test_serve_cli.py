"""`adapterfusion serve SETUP --base BASE` as a user runs it: a saved setup served by a separate process, answers
equal to the offline predictions of the same setup, and SIGTERM lets every request in flight finish before the
process exits 0."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import transformers

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

from serve_helpers import TEXTS, choice_of, load_tokenizer, offline, tiny_served_model  # noqa: E402

import adapterfusion as af  # noqa: E402
from adapterfusion import cli  # noqa: E402
from adapterfusion.serving import ServeConfig, server  # noqa: E402
from tiny_models import tiny_encoder  # noqa: E402
from tolerances import assert_close  # noqa: E402


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _serving(folder: Path, *flags: str) -> tuple[subprocess.Popen[str], str]:
    """`adapterfusion serve` of serve_helpers' tiny setup (saved with its base encoder into `folder`) in its own
    process with `flags`, once it answers /healthz; the process and its base URL."""
    tokenizer = load_tokenizer()
    base = tiny_encoder(vocab_size=len(tokenizer), max_position_embeddings=128)  # the served model's encoder
    base.save_pretrained(folder / "base")
    tokenizer.save_pretrained(folder / "base")
    tiny_served_model(tokenizer).save_pretrained(folder / "setup")
    port = _free_port()
    command = [sys.executable, "-m", "adapterfusion.cli", "serve", str(folder / "setup")]
    command += ["--base", str(folder / "base"), "--port", str(port), *flags]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"the server did not start: {process.communicate()[0]}")
        try:
            if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                return process, url
        except httpx.TransportError:
            time.sleep(0.1)


@pytest.mark.slow
def test_serve_command_answers_and_drains_in_flight_requests_on_sigterm(tmp_path):
    tokenizer = load_tokenizer()
    process, url = _serving(tmp_path, "--dtype", "float64", "--max-wait-ms", "3000")
    reference = af.AdaptedModel.from_pretrained(str(tmp_path / "base"), tmp_path / "setup").double().eval()
    try:
        bodies = [
            {"inputs": [TEXTS[i]], **choice}
            for i, choice in enumerate(
                [{"adapter": "a", "head": "nli"}, {"fusion": "f", "head": "a"}, {"adapter": "c", "head": "score"}]
                + [{"head": "nli"}, {"adapter": "b", "head": "nli"}]
            )
        ]
        with ThreadPoolExecutor(len(bodies)) as pool:
            sent = [pool.submit(httpx.post, url + "/v1/predict", json=body, timeout=30) for body in bodies]
            time.sleep(1.5)  # the requests wait in the batcher (max wait 3 s) when the signal comes
            process.send_signal(signal.SIGTERM)
            responses = [future.result() for future in sent]
        # after the drain uvicorn raises the signal again, so the exit status says SIGTERM stopped it, as it should
        assert process.wait(timeout=30) == -signal.SIGTERM
    finally:
        if process.poll() is None:
            process.kill()
    output = process.stdout.read() if process.stdout else ""
    assert "Application shutdown complete" in output
    for body, response in zip(bodies, responses, strict=True):
        assert response.status_code == 200, (response.text, output)
        (got,) = response.json()["predictions"]
        expected = offline(reference, tokenizer, body["inputs"][0], **choice_of(body))
        assert got.get("label") == expected.get("label")
        assert_close(got["scores"], expected["scores"], dtype=reference.dtype)


@pytest.mark.parametrize(
    "options, words",
    [
        (dict(port=70000), "is not a TCP port"),
        (dict(port=-1), "is not a TCP port"),
        (dict(drain_seconds=-1), "drain_seconds=-1"),
        (dict(drain_seconds=0), "drain_seconds=0"),
        (dict(device="banana"), "is not a torch device"),
        (dict(device="cuda:99"), "cuda:99"),
    ],
)
def test_serve_options_are_refused_before_the_setup_loads(options, words, monkeypatch, tmp_path):
    """A port uvicorn cannot bind, a drain time that cancels requests in flight, or a device this machine lacks
    is a clear error before the minutes of loading, not a traceback after them."""
    monkeypatch.setattr(server, "load_setup", lambda *args: pytest.fail("the setup was loaded"))
    with pytest.raises(af.ConfigError, match=words):
        server.serve(tmp_path / "setup", **options)


def test_an_api_key_no_header_can_carry_is_refused():
    with pytest.raises(af.ConfigError, match="printable ASCII"):
        ServeConfig(api_key="ключ-секрет-123")


@pytest.mark.parametrize("limit, most", [("positions", 128), ("tokenizer", 64)])
def test_a_max_length_over_what_the_base_takes_is_refused_before_the_weights_load(
    limit, most, tiny_encoder_dir, tmp_path, monkeypatch, capsys
):
    """`serve --max-length N` over what the base takes (its 128 positions, or less where its tokenizer says so) is
    refused with `error: ...` and exit 2 once its config and tokenizer are read, before the weights load; N at the
    limit goes on to load them."""
    base = tiny_encoder_dir
    if limit == "tokenizer":
        base = tmp_path / "base"
        shutil.copytree(tiny_encoder_dir, base)
        tokenizer = transformers.AutoTokenizer.from_pretrained(base)
        tokenizer.model_max_length = 64
        tokenizer.save_pretrained(base)
    loads = []

    def from_pretrained(*args, **kwargs):
        loads.append(args)
        raise af.ConfigError("the weights began to load")

    monkeypatch.setattr(af.AdaptedModel, "from_pretrained", from_pretrained)
    command = ["serve", str(tmp_path / "setup"), "--base", str(base), "--max-length"]
    assert cli.main([*command, str(most + 1)]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"error: max_length={most + 1} is more tokens than this model takes: {most} "), error
    reason = "tokenizer's model_max_length=64" if limit == "tokenizer" else "config's max_position_embeddings=128"
    assert reason in error and f"serve with --max-length {most} or less" in error and not loads
    assert cli.main([*command, str(most)]) == 2
    assert "the weights began to load" in capsys.readouterr().err and len(loads) == 1


@pytest.mark.slow
def test_a_second_interrupt_answers_the_requests_still_waiting_with_a_json_503(tmp_path):
    """Ctrl-C twice during the drain: uvicorn's forced exit cancelled the requests still waiting, and each client got
    a plain-text 500. Now the app answers them its 503 (JSON, Retry-After) before the exit is forced."""
    process, url = _serving(tmp_path, "--max-wait-ms", "5000", "--drain-seconds", "30")
    try:
        body = {"inputs": [TEXTS[0]], "adapter": "a", "head": "nli"}
        with ThreadPoolExecutor(3) as pool:
            sent = [pool.submit(httpx.post, url + "/v1/predict", json=body, timeout=30) for _ in range(3)]
            time.sleep(1.0)  # the requests wait for their batch to fill (5 s) when the signals come
            process.send_signal(signal.SIGINT)
            time.sleep(0.5)
            process.send_signal(signal.SIGINT)
            responses = [future.result() for future in sent]
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    output = process.stdout.read() if process.stdout else ""
    for response in responses:
        assert response.status_code == 503, (response.text, output)
        assert response.json()["error"]["status"] == 503 and response.headers["retry-after"] == "5"
    assert "forced shutdown: requests still unanswered were answered 503" in output
