"""What a hunt for bad inputs at the HTTP boundary found, each now refused naming the field and the fix: bodies were
described in Python's type names ('not NoneType', "'inputs' is a str"), an empty body was 'Expecting value: line 1
column 1', NaN and Infinity (not JSON) passed as numbers and were refused later in Python's terms, an adapter named
in 'fusion' (or a fusion in 'adapter') got a bare 404, a blank 'source' and a piece whose config holds a bad setting
got 'the reason is in the server's log', every 401 said the same whatever was wrong with the key, and an
allowed_hosts entry of '*' started a server that refused every request."""

from __future__ import annotations

import json
import logging
import socket
import time
from typing import Any

import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

from serve_helpers import TEXTS, running, tiny_served_model  # noqa: E402

import adapterfusion as af  # noqa: E402
from adapterfusion import cli  # noqa: E402
from adapterfusion.serving import ServeConfig, server  # noqa: E402
from adapterfusion.serving.app import create_app, load_piece  # noqa: E402
from adapterfusion.serving.catalog import Catalog  # noqa: E402
from adapterfusion.serving.contract import parse_piece, parse_predict  # noqa: E402
from adapterfusion.serving.request_body import read_body  # noqa: E402
from adapterfusion.serving.request_errors import RequestError  # noqa: E402

KEY = "secret-key-123"


@pytest.mark.parametrize(
    "body, status, words",
    [
        (b"null", 422, "must be a JSON object, not null"),
        (b"[1, 2]", 422, "must be a JSON object, not an array"),
        (b'"x"', 422, "must be a JSON object, not a string"),
        (b"", 400, "the request body is empty; send a JSON object"),
        (b"  \n", 400, "the request body is empty"),
        (b'{"inputs": ["x"], "head": NaN}', 400, "holds NaN, which is not JSON"),
        (b'{"block": {"average": ["a", "b"], "weights": [Infinity, 1]}}', 400, "holds Infinity, which is not JSON"),
        (b'{"top_p": -Infinity}', 400, "holds -Infinity"),
        ('{"inputs": ["café"]}'.encode("latin-1"), 400, "not UTF-8 (byte 0xe9 at offset 16); JSON is sent as UTF-8"),
        (b'{"temperature": 1e400}', 400, "holds the number '1e400', beyond what a 64-bit float holds"),
        (b'{"top_k": 1' + b"0" * 5000 + b"}", 400, "an integer of more than 4300 digits, the most this server reads"),
    ],
)
def test_a_body_is_described_in_json_terms(body, status, words):
    with pytest.raises(RequestError) as refused:
        read_body(body, ServeConfig())
    assert refused.value.status == status and words in refused.value.message, refused.value.message


def test_numbers_json_has_are_read_as_before():
    body = b'{"a": 1e308, "b": -0.5, "c": 1' + b"0" * 4299 + b', "d": -12}'
    assert read_body(body, ServeConfig()) == {"a": 1e308, "b": -0.5, "c": 10**4299, "d": -12}


def test_a_fusion_over_adapters_placed_otherwise_is_not_called_another_encoders(model, tokenizer, tmp_path):
    """It was told 'saved for another encoder than the one this server runs': the encoder was this one."""
    other = tiny_served_model(tokenizer)
    other.delete_fusion("f")
    for name in ("a", "b"):
        other.delete_adapter(name)
        other.add_adapter(name, af.AdapterConfig.houlsby())
    other.add_fusion("g", ["a", "b"])
    piece = parse_piece({"kind": "fusion", "source": str(other.save_fusion("g", tmp_path / "g"))})
    with pytest.raises(RequestError) as refused:
        load_piece(model, piece)
    assert "or over adapters of the names it fuses placed otherwise than those loaded here" in refused.value.message
    assert "load the adapters it was saved with first" in refused.value.message
    assert model.fusion_names == ["f"]


@pytest.mark.parametrize(
    "inputs, words", [({"a": 1}, "'inputs' is an object"), (3, "'inputs' is a number"), (True, "'inputs' is a boolean")]
)
def test_inputs_of_the_wrong_kind_are_named_in_json_terms(tokenizer, inputs, words):
    with pytest.raises(RequestError) as refused:
        parse_predict({"inputs": inputs, "head": "nli"}, Catalog.of(tiny_served_model(tokenizer)), ServeConfig())
    assert refused.value.message.startswith(words) and "a list of texts" in refused.value.message


@pytest.mark.parametrize(
    "weights, words",
    [
        ([True, 1], "'block.weights[0]' is true; give a number, e.g. [0.5, 0.5]"),
        (["1", 1], "'block.weights[0]' is \"1\"; give a number"),
        ([1, 2, 3], "'block.weights' lists 3 weight(s) for 2 adapters; give one per adapter"),
        ([1, -1], "'block.weights' [1, -1] sum to 0, and an average scales them to sum to 1"),
    ],
)
def test_average_weights_are_refused_in_json_terms(tokenizer, weights, words):
    """They were refused in the Python constructor's terms: "Average(weights=[True, 1]) for 2 adapters"."""
    body = {"inputs": ["x"], "block": {"average": ["a", "b"], "weights": weights}, "head": "nli"}
    with pytest.raises(RequestError) as refused:
        parse_predict(body, Catalog.of(tiny_served_model(tokenizer)), ServeConfig())
    assert refused.value.status == 422 and refused.value.message.startswith(words), refused.value.message
    assert "Average(" not in refused.value.message


@pytest.mark.parametrize(
    "field, name, words",
    [
        ("adapter", "f", "'adapter' names 'f', which is a loaded fusion, not an adapter; send it as 'fusion'"),
        ("fusion", "a", "'fusion' names 'a', which is a loaded adapter, not a fusion; send it as 'adapter'"),
    ],
)
def test_a_piece_sent_in_the_other_kinds_field_is_told_which_field(tokenizer, field, name, words):
    catalog = Catalog.of(tiny_served_model(tokenizer))
    with pytest.raises(RequestError) as refused:
        parse_predict({"inputs": ["x"], field: name, "head": "nli"}, catalog, ServeConfig())
    assert refused.value.status == 422 and refused.value.message == words


@pytest.mark.parametrize("source", [" ", "\t\n"])
def test_a_blank_source_is_refused_before_the_model_thread(source):
    with pytest.raises(RequestError) as refused:
        parse_piece({"kind": "adapter", "source": source})
    assert refused.value.status == 422 and "give a piece's folder on the server" in refused.value.message


@pytest.mark.parametrize("entry", ["*", "*.example.com", "bücher.de", "local host"])
def test_an_allowed_host_no_host_header_could_match_is_refused(entry):
    with pytest.raises(af.ConfigError, match="is not a host name") as refused:
        ServeConfig(allowed_hosts=("localhost", entry))
    if entry.startswith("*"):
        assert "wildcards such as '*' are not read" in str(refused.value)


def test_names_with_digits_dots_dashes_and_ipv6_are_allowed_hosts():
    hosts = ("my-box.example", "127.0.0.1", "[::1]", "fe80::1%eth0", "under_score")
    assert ServeConfig(allowed_hosts=hosts).allowed_hosts == (
        "my-box.example",
        "127.0.0.1",
        "::1",
        "fe80::1%eth0",
        "under_score",
    )


def test_401s_say_what_is_wrong_with_the_key_and_bad_piece_settings_are_named(model, tokenizer, tmp_path):
    """Every 401 said 'needs the server's API key'; a piece whose config holds a bad value, 'the reason is in the
    server's log'. The server answers the next good request after each."""
    saved = model.save_adapter("a", tmp_path / "a")
    config_file = saved / "adapter_config.json"
    document = json.loads(config_file.read_text())
    document["config"]["non_linearity"] = "nope"
    config_file.write_text(json.dumps(document))
    good = {"inputs": [TEXTS[0]], "adapter": "a", "head": "nli"}
    load = {"kind": "adapter", "source": str(saved), "name": "n"}
    with running(create_app(model, tokenizer, ServeConfig(max_wait_ms=0, api_key=KEY))) as url:
        with httpx.Client(base_url=url, timeout=30) as client:
            expected = client.post("/v1/predict", json=good).json()
            for headers, query, words in (
                ({}, "", "the request sent no API key; send 'Authorization: Bearer KEY'"),
                ({}, f"?api_key={KEY}", "a key in the URL is not read"),
                ({"Authorization": "Bearer wrong-key-456"}, "", "the API key sent is not this server's"),
                ({"Authorization": "Bearer"}, "", "holds no key after 'Bearer'"),
                ({"Authorization": f"Token {KEY}"}, "", "not of the Bearer scheme ('Token' ...)"),
            ):
                message = _refused(client, "/v1/pieces" + query, 401, json=load, headers=headers)
                assert words in message and KEY not in message, message
                assert client.post("/v1/predict", json=good).json() == expected
            message = _refused(client, "/v1/pieces", 422, json=load, headers={"Authorization": f"Bearer {KEY}"})
            assert "refused for a setting in its adapter_config.json (non_linearity='nope' is not allowed" in message
            assert "save the adapter again" in message and str(tmp_path) not in message.replace(str(saved), "")
            assert client.get("/v1/pieces").json()["adapters"] == ["a", "b", "c"]
            assert client.post("/v1/predict", json=good).json() == expected


def _refused(client: Any, path: str, status: int, **sent: Any) -> str:
    response = client.post(path, **sent)
    assert response.status_code == status, response.text[:300]
    return response.json()["error"]["message"]


@pytest.mark.parametrize("config", [{"max_batch_size": 8}, "fast"])
def test_a_config_that_is_no_serve_config_is_refused_naming_the_fix(model, tokenizer, config):
    """A dict of ServeConfig's fields failed as "'dict' object has no attribute 'max_length'"."""
    with pytest.raises(af.ConfigError, match="not a ServeConfig; pass ServeConfig"):
        create_app(model, tokenizer, config)


@pytest.mark.parametrize("host", [None, 8000])
def test_serve_refuses_a_host_that_is_no_string_before_the_setup_loads(host, tmp_path):
    """None listened on every interface (getaddrinfo's 'any'); a number was a TypeError from getaddrinfo."""
    with pytest.raises(af.ConfigError, match=f"host {host!r} is not an address"):
        server.serve(tmp_path / "missing", host=host)


def test_a_setup_served_on_another_base_is_told_to_give_the_base_it_was_saved_on(model, tmp_path):
    """The refusal ended 'load it into a matching model', which `serve` gives no way to do but --base."""
    model.save_pretrained(tmp_path / "setup")
    with pytest.raises(af.IncompatibleModelError) as refused:
        server.load_setup(tmp_path / "setup")
    assert "hidden_size=32" in str(refused.value)
    assert "it was loaded on the shipped encoder, as no --base was given; serve it with --base" in str(refused.value)


def test_a_default_head_the_server_cannot_predict_with_names_the_heads_it_can(model):
    """A multiple-choice head named like adapter c was chosen for {"adapter": "c"}: "head 'c' is a multiple_choice
    head", for a head the client never named, with no word of which heads would do."""
    model.add_head("c", af.MultipleChoiceHead())
    with pytest.raises(RequestError) as refused:
        parse_predict({"inputs": ["x"], "adapter": "c"}, Catalog.of(model), ServeConfig())
    assert refused.value.message == (
        "no 'head' given, and the default head 'c' is a multiple_choice head; the server predicts with classification "
        "or regression heads: give 'head', one of ['nli', 'a', 'score']"
    )


def test_a_short_api_key_from_the_environment_is_refused_naming_it(monkeypatch, capsys, tmp_path):
    """The refusal said 'the API key must have at least 8 characters' to a user who gave no --api-key."""
    monkeypatch.setenv("ADAPTERFUSION_API_KEY", "short")
    assert cli.main(["serve", str(tmp_path / "setup")]) == 2
    assert "check --api-key or $ADAPTERFUSION_API_KEY" in capsys.readouterr().err


def test_a_loopback_host_spelled_otherwise_still_answers_only_to_this_machines_names(monkeypatch):
    """serve --host LOCALHOST was taken for a public address: any Host header was answered (DNS rebinding open) and
    the log warned of a server open to anyone."""
    made: list[ServeConfig] = []
    monkeypatch.setattr(server, "load_setup", lambda *args: (object(), object()))
    monkeypatch.setattr(server, "create_app", lambda model, tokenizer, config, executor: made.append(config))
    monkeypatch.setattr(server, "draining_server", lambda *args: type("Idle", (), {"run": lambda self: None})())
    monkeypatch.setattr(server, "_check_can_listen", lambda host, port: None)
    server.serve("setup", host="LOCALHOST", port=0)
    assert made[0].allowed_hosts == ("127.0.0.1", "localhost", "::1")


def test_a_client_that_hangs_up_mid_body_is_counted_499_not_a_server_failure(model, tokenizer, caplog):
    """A body cut off by its client was a 500 in the metrics and 'Exception in ASGI application' with a traceback
    of starlette's ClientDisconnect in the log, on both POST endpoints."""
    with running(create_app(model, tokenizer, ServeConfig(max_wait_ms=0))) as url:
        port = int(url.rsplit(":", 1)[1])
        for path in ("/v1/predict", "/v1/pieces"):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
                head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                client.sendall(f'{head}Content-Length: 1000\r\n\r\n{{"inputs": ['.encode())
                time.sleep(0.2)  # the server reads what came before the client hangs up
        lines = ['endpoint="/v1/predict",status="499"} 1', 'endpoint="/v1/pieces",status="499"} 1']
        deadline = time.monotonic() + 20
        while not all(line in (metrics := httpx.get(url + "/metrics", timeout=10).text) for line in lines):
            assert time.monotonic() < deadline, metrics
            time.sleep(0.05)
        assert 'status="500"' not in metrics
        assert (
            httpx.post(url + "/v1/predict", json={"inputs": [TEXTS[0]], "head": "nli"}, timeout=30).status_code == 200
        )
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]
