"""What an audit of the server as an operator and a hostile client found, each now refused or handled: a foreign
Host header (DNS rebinding), FastAPI's undocumented /docs and redirects, a block that runs thousands of adapters, a
client that leaves its request queued, piece-load answers that told existing paths from missing ones or hid which
adapters a fusion needs, an Authorization scheme in lower case, and texts that make no token of text."""

from __future__ import annotations

import re
import threading
import time

import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

from serve_helpers import TEXTS, running, tiny_served_model  # noqa: E402

import adapterfusion as af  # noqa: E402
from adapterfusion.serving import ServeConfig, server  # noqa: E402
from adapterfusion.serving.app import create_app, host_name, model_executor  # noqa: E402
from adapterfusion.serving.request_blocks import MAX_BLOCK_ADAPTER_RUNS  # noqa: E402

KEY = "test-key-0123456789"


def test_a_foreign_host_header_is_refused_before_any_endpoint_runs(model, tokenizer, tmp_path):
    """A page of attacker.example, its name rebound to 127.0.0.1, sends same-origin JSON with its own Host: it loaded
    pieces into a loopback server without a key (201) and read /v1/pieces."""
    model.save_adapter("a", tmp_path / "a")
    config = ServeConfig(max_wait_ms=0, allowed_hosts=("127.0.0.1", "localhost", "::1"))
    load = {"kind": "adapter", "source": str(tmp_path / "a"), "name": "rebound"}
    with running(create_app(model, tokenizer, config)) as url, httpx.Client(base_url=url, timeout=30) as client:
        port = url.rsplit(":", 1)[1]
        for path, method in (("/v1/pieces", "POST"), ("/v1/pieces", "GET"), ("/v1/predict", "POST")):
            refused = client.request(method, path, json=load, headers={"Host": f"attacker.example:{port}"})
            assert refused.status_code == 400, refused.text
            assert "Host header is 'attacker.example:" in refused.json()["error"]["message"]
        assert "rebound" not in model.adapter_names
        for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "LOCALHOST"):
            assert client.get("/healthz", headers={"Host": host}).status_code == 200, host
    assert [host_name(h) for h in ("a.b:80", "[::1]:8000", "::1", "Example.COM")] == [
        "a.b",
        "::1",
        "::1",
        "example.com",
    ]
    with pytest.raises(af.ConfigError, match="allowed_hosts"):
        ServeConfig(allowed_hosts="localhost")


@pytest.mark.parametrize(
    "entry, fix",
    [
        ("localhost:8000", "'localhost'"),
        ("http://my.box:8000/", "'my.box'"),
        ("[::1]:8000", "'::1'"),
        ("a b", "'localhost'"),
    ],
)
def test_an_allowed_host_with_a_port_scheme_or_path_is_refused(entry, fix):
    """A request's host name is compared without its port, so --allowed-host localhost:8000 refused every request,
    even one whose Host header was exactly 'localhost:8000', with a 400 that quoted the two as if they differed."""
    with pytest.raises(af.ConfigError, match=re.escape(f"allowed_hosts entry {entry!r} is not a host name")) as refused:
        ServeConfig(allowed_hosts=("localhost", entry))
    assert f"e.g. {fix}" in str(refused.value)
    assert ServeConfig(allowed_hosts=("[::1]", "Example.COM ", "fe80::1")).allowed_hosts == (
        "::1",
        "example.com",
        "fe80::1",
    )


@pytest.mark.parametrize(
    "options, words",
    [
        (dict(api_key=12345678), "the API key must be a string"),  # a TypeError: len() of an int
        (dict(api_key=b"secret-key"), "the API key must be a string"),  # an AttributeError: isprintable
        (dict(max_wait_ms=True), "max_wait_ms=True must be between"),  # taken as 1 ms
        # HTTP strips the spaces around a header's value: every POST /v1/pieces was refused 401
        (dict(api_key=" secret-key"), "the API key begins or ends with a space"),
        (dict(api_key="secret-key "), "no client could send it"),
    ],
)
def test_server_options_that_could_never_work_are_refused_naming_them(options, words):
    with pytest.raises(af.ConfigError, match=words) as refused:
        ServeConfig(**options)
    assert "secret-key" not in str(refused.value)  # a message never shows the key


def test_serve_on_a_loopback_address_answers_only_to_this_machines_names(monkeypatch):
    """serve() gives a loopback server the names a local client uses; another address keeps any Host (a public
    server's name is its operator's to list with --allowed-host)."""
    made: list[ServeConfig] = []
    monkeypatch.setattr(server, "load_setup", lambda *args: (object(), object()))
    monkeypatch.setattr(server, "create_app", lambda model, tokenizer, config, executor: made.append(config))
    monkeypatch.setattr(server, "draining_server", lambda *args: type("Idle", (), {"run": lambda self: None})())
    monkeypatch.setattr(server, "_check_can_listen", lambda host, port: None)
    server.serve("setup", host="127.0.0.1", port=0)
    server.serve("setup", host="0.0.0.0", port=0)
    server.serve("setup", host="127.0.0.1", port=0, config=ServeConfig(allowed_hosts=("my.box",)))
    assert [config.allowed_hosts for config in made] == [("127.0.0.1", "localhost", "::1"), None, ("my.box",)]


def test_no_undocumented_endpoints_and_no_redirects(model, tokenizer):
    """/docs, /redoc and /openapi.json answered 200; POST /v1/pieces/ was redirected (307) to a URL built from the
    request's Host header."""
    with running(create_app(model, tokenizer, ServeConfig(max_wait_ms=0))) as url:
        with httpx.Client(base_url=url, timeout=30, follow_redirects=False) as client:
            for path in ("/docs", "/redoc", "/openapi.json", "/docs/oauth2-redirect"):
                answer = client.get(path)
                assert answer.status_code == 404 and "the endpoints are" in answer.json()["error"]["message"], path
            slashed = client.post("/v1/pieces/", json={}, headers={"Host": "evil.example"})
            assert slashed.status_code == 404 and "location" not in slashed.headers


def test_the_api_key_scheme_is_case_insensitive_and_required(model, tokenizer, tmp_path):
    model.save_adapter("a", tmp_path / "a")
    config = ServeConfig(max_wait_ms=0, api_key=KEY)
    with running(create_app(model, tokenizer, config)) as url, httpx.Client(base_url=url, timeout=30) as client:
        for name, header, status in (
            ("lower", f"bearer {KEY}", 201),
            ("upper", f"BEARER  {KEY}", 201),
            ("bare", KEY, 401),  # a key without a scheme was taken
            ("basic", f"Basic {KEY}", 401),
        ):
            body = {"kind": "adapter", "source": str(tmp_path / "a"), "name": name}
            answer = client.post("/v1/pieces", json=body, headers={"Authorization": header})
            assert answer.status_code == status, (header, answer.text)


def test_a_block_that_runs_too_many_adapters_is_refused(model, tokenizer):
    """{"stack": [{"average": [...] * 32}] * 64} ran 4,096 adapters a site and held the model's thread for minutes;
    a loaded fusion's size counts, and so does a fusion named inside a block."""
    body = {"inputs": [TEXTS[0]], "head": "nli"}
    limit = MAX_BLOCK_ADAPTER_RUNS
    with running(create_app(model, tokenizer, ServeConfig(max_wait_ms=0))) as url:
        with httpx.Client(base_url=url, timeout=60) as client:
            assert client.post("/v1/predict", json={**body, "block": {"stack": ["a"] * limit}}).status_code == 200
            for block, runs in (
                ({"stack": ["a"] * (limit + 1)}, limit + 1),
                ({"stack": [{"average": ["a", "b"] * 32}] * 64}, 64 * 64),
                ({"stack": ["f"] * (limit // 2 + 1)}, 2 * (limit // 2 + 1)),  # f fuses 2 adapters
            ):
                refused = client.post("/v1/predict", json={**body, "block": block})
                assert refused.status_code == 413, refused.text
                assert (
                    f"'block' runs {runs} adapters at each site, over this server's limit of {limit}"
                    in (refused.json()["error"]["message"])
                )


def test_a_request_whose_client_left_is_taken_out_of_the_queue_unrun(model, tokenizer):
    """A client could queue forwards and hang up: they still ran, counted as answered (200)."""
    executor = model_executor()
    busy = threading.Event()
    app = create_app(model, tokenizer, ServeConfig(max_wait_ms=0), executor)
    with running(app) as url:
        executor.submit(busy.wait, 30)  # the model's thread is busy: the next request waits in the queue
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(url + "/v1/predict", json={"inputs": TEXTS[:3], "adapter": "a", "head": "nli"}, timeout=0.5)
        time.sleep(0.3)  # the server hears of the disconnect
        metrics = httpx.get(url + "/metrics", timeout=30).text
        assert "adapterfusion_serve_queue_waiting 0" in metrics, metrics  # it left the queue at once
        busy.set()
        executor.submit(time.sleep, 0).result(30)  # everything queued on the model's thread before this has run
        metrics = httpx.get(url + "/metrics", timeout=30).text
        answered = httpx.post(url + "/v1/predict", json={"inputs": [TEXTS[0]], "adapter": "a", "head": "nli"})
        assert answered.status_code == 200
    assert "adapterfusion_serve_predictions_total 0" in metrics, metrics  # its three inputs never ran
    assert 'requests_total{endpoint="/v1/predict",status="499"} 1' in metrics, metrics


def test_piece_loads_name_a_fusions_missing_adapters_and_not_whether_a_path_exists(model, tokenizer, tmp_path):
    """A fusion needing adapters the server lacks was answered 'needs pieces this server has not loaded' without
    naming them; a folder that exists but holds no piece got another answer than a path that does not exist, so a
    client could probe the server's disk."""
    donor = tiny_served_model(tokenizer)
    donor.add_adapter("x")
    donor.add_fusion("fx", ["a", "x"])
    donor.double().save_fusion("fx", tmp_path / "fx")
    (tmp_path / "empty").mkdir()
    with running(create_app(model, tokenizer, ServeConfig(max_wait_ms=0))) as url:
        with httpx.Client(base_url=url, timeout=30) as client:
            missing = client.post("/v1/pieces", json={"kind": "fusion", "source": str(tmp_path / "fx")})
            assert missing.status_code == 404
            assert "fuses adapters ['a', 'x'], of which ['x'] are not loaded" in missing.json()["error"]["message"]
            answers = {}
            for source in (tmp_path / "empty", tmp_path / "nothing-here", "empty", "nothing-here"):
                answer = client.post("/v1/pieces", json={"kind": "adapter", "source": str(source)})
                assert answer.status_code == 422
                answers[str(source)] = answer.json()["error"]["message"].replace(repr(str(source)), "SOURCE")
    assert len(set(answers.values())) == 1, answers


@pytest.mark.parametrize("text", ["", "\u200b", "   "])
def test_a_text_of_no_word_is_refused(model, tokenizer, text):
    """'' and a zero-width space were answered 200, scored on [CLS] [SEP] alone; as a side of a pair, the pair was
    answered as its other text alone (an empty second text dropped) or as half an input."""
    with running(create_app(model, tokenizer, ServeConfig(max_wait_ms=0))) as url:
        answer = httpx.post(url + "/v1/predict", json={"inputs": ["Hi", text], "adapter": "a", "head": "nli"})
        assert answer.status_code == 422
        assert answer.json()["error"]["message"].startswith("inputs[1] is ")
        pair = httpx.post(url + "/v1/predict", json={"inputs": [["Hi", text]], "adapter": "a", "head": "nli"})
        assert pair.status_code == 422  # an empty second text was dropped: the pair answered as "Hi" alone
        assert pair.json()["error"]["message"].startswith("inputs[0] is a pair whose second text ")
        pair = httpx.post(url + "/v1/predict", json={"inputs": [[text, "Hi"]], "adapter": "a", "head": "nli"})
        assert pair.status_code == 422  # half an input
        assert pair.json()["error"]["message"].startswith("inputs[0] is a pair whose first text ")
        unknown = httpx.post(url + "/v1/predict", json={"inputs": ["日本語 😀"], "adapter": "a", "head": "nli"})
        assert unknown.status_code == 200  # [UNK] stands for text the vocabulary lacks: it is read
