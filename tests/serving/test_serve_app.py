"""The inference server (issue #24 item 5) over real HTTP on 127.0.0.1: every answer must be the model's own
prediction of that input run alone with the request's adapter or fusion and head (float64), whatever else shared its
forward; bad requests get 4xx JSON naming the problem and never stop the server."""

from __future__ import annotations

import copy
import json
import logging
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

from serve_helpers import TEXTS, choice_of, load_tokenizer, offline, running, tiny_served_model  # noqa: E402

import adapterfusion as af  # noqa: E402
from adapterfusion.serving import ServeConfig  # noqa: E402
from adapterfusion.serving.app import create_app  # noqa: E402
from tiny_models import randomise  # noqa: E402
from tolerances import assert_close  # noqa: E402

KEY = "test-key-0123456789"


def _check(reference, tokenizer, body, answer) -> None:
    """Each prediction equals the offline one of its input (same label; scores to float64 tolerance)."""
    predictions = answer["predictions"]
    assert len(predictions) == len(body["inputs"])
    for text, got in zip(body["inputs"], predictions, strict=True):
        expected = offline(reference, tokenizer, text, **choice_of(body))
        assert got.keys() == expected.keys()
        assert got.get("label") == expected.get("label") and got.get("label_name") == expected.get("label_name")
        assert_close(got["scores"], expected["scores"], dtype=reference.dtype, label=json.dumps(body))


# Requests that name every kind of choice: adapters, a fusion, the plain encoder; heads of 3, 2 and 1 outputs;
# a head defaulted from the adapter's name; text pairs.
MIXED = [
    {"inputs": TEXTS[:2], "adapter": "a", "head": "nli"},
    {"inputs": [TEXTS[2]], "adapter": "b", "head": "nli"},
    {"inputs": TEXTS[1:4], "fusion": "f", "head": "nli"},
    {"inputs": [TEXTS[4]], "head": "nli"},
    {"inputs": [TEXTS[0], TEXTS[3]], "adapter": "c", "head": "a"},
    {"inputs": [[TEXTS[0], TEXTS[1]], [TEXTS[2], TEXTS[4]]], "adapter": "b", "head": "score"},
    {"inputs": [TEXTS[3]], "adapter": "a"},
    {"inputs": [[TEXTS[4], TEXTS[3]], TEXTS[2]], "fusion": "f", "head": "a"},
]


def test_concurrent_mixed_requests_share_forwards_and_each_equals_its_offline_prediction(model, tokenizer):
    reference = copy.deepcopy(model)
    config = ServeConfig(max_batch_size=16, max_wait_ms=300, max_inputs=8)
    with running(create_app(model, tokenizer, config)) as url, httpx.Client(base_url=url, timeout=30) as client:
        assert client.get("/healthz").status_code == 200
        with ThreadPoolExecutor(len(MIXED)) as pool:
            responses = list(pool.map(lambda body: client.post("/v1/predict", json=body), MIXED * 2))
        metrics = client.get("/metrics").text
    for body, response in zip(MIXED * 2, responses, strict=True):
        assert response.status_code == 200, response.text
        body = {**body, "head": body.get("head", body.get("adapter"))}  # the head named like the adapter
        _check(reference, tokenizer, body, response.json())
    rows = sum(len(body["inputs"]) for body in MIXED * 2)
    assert f"adapterfusion_serve_predictions_total {rows}" in metrics
    forwards = int(_sample(metrics, "adapterfusion_serve_batch_rows_count"))
    assert forwards < len(MIXED) * 2, "requests that arrived together ran in separate forwards"
    assert f'adapterfusion_serve_requests_total{{endpoint="/v1/predict",status="200"}} {len(MIXED) * 2}' in metrics


def _sample(metrics: str, name: str) -> float:
    return float(next(line.split()[-1] for line in metrics.splitlines() if line.startswith(name + " ")))


BAD = [
    (b"{not json", 400, "not valid JSON"),
    (b"[1, 2]", 422, "JSON object"),
    ({"adapter": "a"}, 422, "'inputs' is missing"),
    ({"inputs": [], "adapter": "a"}, 422, "'inputs' is empty"),
    ({"inputs": "one text", "adapter": "a"}, 422, "'inputs' is a string"),
    ({"inputs": [["a", "b", "c"]], "adapter": "a"}, 422, "inputs[0]"),
    ({"inputs": [3]}, 422, "wrong shape"),
    ({"inputs": ["x"], "adapter": "zz", "head": "nli"}, 404, "no adapter named 'zz'"),
    ({"inputs": ["x"], "fusion": "zz", "head": "nli"}, 404, "no fusion named 'zz'"),
    ({"inputs": ["x"], "adapter": "b", "head": "zz"}, 404, "no head named 'zz'"),
    ({"inputs": ["x"], "adapter": "a", "fusion": "f"}, 422, "not adapter and fusion"),
    ({"inputs": ["x"], "fusion": "f", "block": {"stack": ["a"]}, "head": "nli"}, 422, "not fusion and block"),
    ({"inputs": ["x"], "block": {"stak": ["a"]}, "head": "nli"}, 422, "a block is one of"),
    ({"inputs": ["x"], "block": {"stack": ["a", "zz"]}, "head": "nli"}, 404, "'block.stack[1]' = 'zz'"),
    ({"inputs": ["x"], "block": {"stack": []}, "head": "nli"}, 422, "1 to 64 children"),
    ({"inputs": ["x"], "block": {"stack": ["a", 3]}, "head": "nli"}, 422, "'block.stack[1]' is 3"),
    (
        {"inputs": ["x"], "block": {"average": ["a", "b"], "weights": [1]}, "head": "nli"},
        422,
        "lists 1 weight(s) for 2",
    ),
    ({"inputs": ["x"], "block": {"average": ["a", {"stack": ["b"]}]}, "head": "nli"}, 422, "an average block cannot"),
    (
        {"inputs": ["x"], "block": {"fuse": ["a", {"stack": ["b"]}]}, "head": "nli"},
        422,
        "a fuse block cannot hold a stack block (child 1); it takes names only; to feed one adapter's output to a "
        'fusion, send {"stack": ["base", {"fuse": ["a", "b"]}]}',
    ),
    ({"inputs": ["x"], "block": {"stack": ["a", {"stack": ["b"]}]}, "head": "nli"}, 422, "list its children in the"),
    ({"inputs": ["x"], "block": {"stack": ["a"], "weights": [1]}, "head": "nli"}, 422, "unknown field(s) ['weights']"),
    ({"inputs": ["x"], "block": {"stack": ["a"]}}, 422, "no 'head' given"),
    ({"inputs": ["x"], "block": {"fuse": ["a", "c"]}, "head": "nli"}, 422, "no loaded fusion fuses"),  # at forward
    ({"inputs": ["x"], "adapter": "b"}, 422, "no 'head' given"),
    ({"inputs": ["x"], "adapters": "a"}, 422, "unknown field(s) ['adapters']"),
    ({"inputs": ["x"] * 5, "head": "nli"}, 413, "over the limit of 4"),
    ({"inputs": ["x" * 101], "head": "nli"}, 413, "101 characters"),
    (b'{"inputs": ["' + b"y" * 2000 + b'"]}', 413, "bytes, over the limit"),
]


@pytest.mark.parametrize("server_config", [dict(max_inputs=4, max_text_chars=100, max_body_bytes=1000)])
def test_bad_requests_get_json_errors_naming_the_problem(model, tokenizer, server_config):
    config = ServeConfig(max_batch_size=4, max_wait_ms=0, **server_config)
    with running(create_app(model, tokenizer, config)) as url, httpx.Client(base_url=url, timeout=30) as client:
        for body, status, words in BAD:
            sent = {"content": body} if isinstance(body, bytes) else {"json": body}
            response = client.post("/v1/predict", **sent)
            assert response.status_code == status, (body, response.text)
            error = response.json()["error"]
            assert error["status"] == status and words in error["message"], (body, error)
        good = {"inputs": [TEXTS[0]], "adapter": "a", "head": "nli"}
        response = client.post("/v1/predict", json=good)
        metrics = client.get("/metrics").text
    assert response.status_code == 200
    assert "adapterfusion_serve_predict_latency_seconds_count 1\n" in metrics  # the answered one, no refusal
    _check(copy.deepcopy(model), tokenizer, good, response.json())


# Blocks as JSON, each answer checked against the model run alone with the block activated.
BLOCKS = [
    ({"stack": ["a", "b"]}, af.Stack("a", "b")),
    ({"average": ["a", "c"], "weights": [0.25, 0.75]}, af.Average("a", "c", weights=[0.25, 0.75])),
    ({"stack": ["c", {"fuse": ["a", "b"]}]}, af.Stack("c", af.Fuse("a", "b"))),
    ({"fuse": ["a", "b"]}, af.Fuse("a", "b")),
]


def test_blocks_as_json_route_each_request_as_the_block_activated_alone(model, tokenizer):
    reference = copy.deepcopy(model)
    config = ServeConfig(max_batch_size=16, max_wait_ms=300, max_inputs=8)
    bodies = [{"inputs": TEXTS[i : i + 2], "block": spec, "head": "nli"} for i, (spec, _) in enumerate(BLOCKS)]
    bodies.append({"inputs": [TEXTS[4]], "adapter": "a", "head": "nli"})  # an adapter in the same batch
    with running(create_app(model, tokenizer, config)) as url, httpx.Client(base_url=url, timeout=30) as client:
        with ThreadPoolExecutor(len(bodies)) as pool:
            responses = list(pool.map(lambda body: client.post("/v1/predict", json=body), bodies))
    for body, response, (_, block) in zip(bodies, responses, [*BLOCKS, (None, "a")], strict=True):
        assert response.status_code == 200, response.text
        for text, got in zip(body["inputs"], response.json()["predictions"], strict=True):
            expected = offline(reference, tokenizer, text, adapter=block, head="nli")
            assert got["label"] == expected["label"]
            assert_close(got["scores"], expected["scores"], dtype=reference.dtype, label=json.dumps(body))
    plain = offline(reference, tokenizer, TEXTS[0], head="nli")["scores"]
    assert not torch.allclose(torch.tensor(responses[0].json()["predictions"][0]["scores"]), torch.tensor(plain))


class _Tokenizer:
    """The real tokenizer, whose padding (on the model's thread, inside a forward) sleeps `delay` and fails for a
    batch holding the word 'boom'."""

    def __init__(self, tokenizer, delay: float = 0.0) -> None:
        self.tokenizer, self.delay = tokenizer, delay
        self.boom = tokenizer("boom", add_special_tokens=False)["input_ids"][0]

    def __call__(self, *args, **kwargs):
        return self.tokenizer(*args, **kwargs)

    def pad(self, features, **kwargs):
        time.sleep(self.delay)
        if any(self.boom in feature["input_ids"] for feature in features):
            raise RuntimeError("a forward that fails")
        return self.tokenizer.pad(features, **kwargs)

    def __getattr__(self, name):
        return getattr(self.tokenizer, name)


def test_a_failing_request_fails_alone_and_the_server_keeps_serving(model, tokenizer):
    reference = copy.deepcopy(model)
    config = ServeConfig(max_batch_size=8, max_wait_ms=300, max_inputs=4)
    bodies = [{"inputs": [TEXTS[i]], "adapter": "a", "head": "nli"} for i in range(3)]
    bodies.insert(1, {"inputs": ["boom"], "adapter": "b", "head": "nli"})
    with running(create_app(model, _Tokenizer(tokenizer), config)) as url, httpx.Client(base_url=url, timeout=30) as c:
        with ThreadPoolExecutor(len(bodies)) as pool:
            responses = list(pool.map(lambda body: c.post("/v1/predict", json=body), bodies))
        after = c.post("/v1/predict", json=bodies[0])
        metrics = c.get("/metrics").text
    assert [r.status_code for r in responses] == [200, 500, 200, 200]
    assert "server's log" in responses[1].json()["error"]["message"]
    for body, response in [
        *zip(bodies[:1] + bodies[2:], responses[:1] + responses[2:], strict=True),
        (bodies[0], after),
    ]:
        _check(reference, tokenizer, body, response.json())
    assert _sample(metrics, "adapterfusion_serve_failed_forwards_total") >= 1


def test_a_library_check_inside_the_forward_is_a_422_the_log_shows(model, tokenizer, monkeypatch, caplog):
    """A refusal from a check inside the forward (one the arrival checks let pass) answers 422 with its message and
    is logged, so the operator sees which check the contract missed; the server goes on."""

    def refusing(self, *args, **kwargs):
        raise af.ConfigError("a check the contract missed")

    monkeypatch.setattr(_Tokenizer, "pad", refusing)
    body = {"inputs": [TEXTS[0]], "adapter": "a", "head": "nli"}
    with running(create_app(model, _Tokenizer(tokenizer), ServeConfig(max_wait_ms=0))) as url:
        with httpx.Client(base_url=url, timeout=30) as client, caplog.at_level(logging.WARNING):
            refused = client.post("/v1/predict", json=body)
            assert client.get("/healthz").status_code == 200
    assert refused.status_code == 422 and refused.json()["error"]["message"].endswith("a check the contract missed")
    assert "refused a request the contract let pass: a check the contract missed" in caplog.text


def test_a_full_queue_answers_429_and_the_queued_requests_still_finish(model, tokenizer):
    config = ServeConfig(max_batch_size=1, max_wait_ms=0, max_queue=1, max_inputs=1)
    body = {"inputs": [TEXTS[0]], "adapter": "a", "head": "nli"}
    with running(create_app(model, _Tokenizer(tokenizer, delay=1.0), config)) as url:
        with httpx.Client(base_url=url, timeout=30) as client, ThreadPoolExecutor(2) as pool:
            first = pool.submit(client.post, "/v1/predict", json=body)  # runs (slowly)
            time.sleep(0.3)
            second = pool.submit(client.post, "/v1/predict", json=body)  # waits in the queue
            time.sleep(0.15)
            refused = client.post("/v1/predict", json=body)
            assert refused.status_code == 429, refused.text
            assert "retry" in refused.json()["error"]["message"]
            assert int(refused.headers["retry-after"]) >= 1  # whole seconds, as HTTP's Retry-After takes them
            assert first.result().status_code == 200 and second.result().status_code == 200


def test_pieces_are_listed_and_loaded_behind_the_api_key(model, tokenizer, tmp_path):
    reference = copy.deepcopy(model)
    donor = tiny_served_model(tokenizer)
    donor.add_adapter("d")
    randomise(torch.nn.ModuleList(site.adapters["d"] for site in donor.sites_with_adapter("d")), std=0.3)
    donor.double()
    donor.save_adapter("d", tmp_path / "d")
    donor.save_adapter("a", tmp_path / "a")  # saved as 'a', a name the server has loaded
    reference.load_adapter(tmp_path / "d", name="d2")
    config = ServeConfig(max_wait_ms=0, api_key=KEY)
    load = {"kind": "adapter", "source": str(tmp_path / "d"), "name": "d2"}
    with running(create_app(model, tokenizer, config)) as url, httpx.Client(base_url=url, timeout=30) as client:
        listed = client.get("/v1/pieces").json()
        assert listed["adapters"] == ["a", "b", "c"] and listed["fusions"] == {"f": ["a", "b"]}
        assert listed["heads"]["nli"] == {
            "kind": "classification",
            "outputs": 3,
            "labels": ["entailment", "neutral", "contradiction"],
        }
        assert listed["heads"]["score"]["kind"] == "regression"
        assert client.post("/v1/pieces", json=load).status_code == 401
        assert (
            client.post("/v1/pieces", json=load, headers={"Authorization": "Bearer wrong-key-123"}).status_code == 401
        )
        response = client.post("/v1/pieces", json=load, headers={"Authorization": f"Bearer {KEY}"})
        assert response.status_code == 201 and response.json() == {"kind": "adapter", "name": "d2"}
        for bad, status, words in [
            ({**load, "kind": "lora"}, 422, "'kind' is 'lora'"),
            ({**load, "source": str(tmp_path / "missing"), "name": "d3"}, 422, "missing"),
            ({**load, "name": "a"}, 422, "'a'"),  # already loaded
            ({**load, "name": "f"}, 422, "a fusion named 'f' is loaded"),  # a JSON block could not tell them apart
            ({"kind": "adapter", "source": str(tmp_path / "a")}, 422, "is saved as 'a', which is loaded already"),
        ]:
            refused = client.post("/v1/pieces", json=bad, headers={"X-API-Key": KEY})
            assert refused.status_code == status and words in refused.json()["error"]["message"], refused.text
        assert "d2" in client.get("/v1/pieces").json()["adapters"]
        body = {"inputs": TEXTS[:2], "adapter": "d2", "head": "nli"}
        answer = client.post("/v1/predict", json=body).json()
        metrics = client.get("/metrics").text
    _check(reference, tokenizer, body, answer)
    assert "# TYPE adapterfusion_serve_predict_latency_seconds histogram" in metrics
    assert 'adapterfusion_serve_requests_total{endpoint="/v1/pieces",status="401"} 2' in metrics
    assert "adapterfusion_serve_pieces_loaded 8" in metrics  # 4 adapters, 1 fusion, 3 heads


def test_an_unexpected_error_is_a_json_500_and_the_server_goes_on(model, tokenizer, monkeypatch):
    def broken(*_args, **_kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(model, "load_head", broken)
    body = {"inputs": [TEXTS[0]], "adapter": "a", "head": "nli"}
    with running(create_app(model, tokenizer, ServeConfig(max_wait_ms=0))) as url:
        with httpx.Client(base_url=url, timeout=30) as client:
            response = client.post("/v1/pieces", json={"kind": "head", "source": "anywhere"})
            assert response.status_code == 500 and "server's log" in response.json()["error"]["message"]
            assert client.post("/v1/predict", json=body).status_code == 200


def test_serve_loads_the_model_on_the_thread_that_runs_it(model, tokenizer, monkeypatch):
    """`serve` loads the setup on the app's model thread, not the main thread, and the forwards run on that same thread
    (app.model_executor: a second OpenMP pool, left on the main thread by loading there, slows every forward)."""
    import threading
    import types

    import adapterfusion.serving.server as server

    threads: dict[str, threading.Thread] = {}

    def load(*args):
        threads["load"] = threading.current_thread()
        return model, tokenizer

    def forward(*args, **kwargs):
        threads["forward"] = threading.current_thread()
        return type(model).forward(model, *args, **kwargs)

    apps = []
    monkeypatch.setattr(server, "load_setup", load)

    def not_run(config, drain_seconds):  # the uvicorn.Server serve would run: its app is kept, not served
        return types.SimpleNamespace(run=lambda: apps.append(config.app))

    monkeypatch.setattr(server, "draining_server", not_run)
    server.serve("a-setup-folder", host="127.0.0.1", port=0)
    monkeypatch.setattr(model, "forward", forward)
    with running(apps[0]) as url, httpx.Client(base_url=url, timeout=30) as client:
        response = client.post("/v1/predict", json={"inputs": [TEXTS[0]], "adapter": "a", "head": "nli"})
    assert response.status_code == 200, response.text
    assert threads["load"] is threads["forward"] and threads["load"] is not threading.main_thread()


def test_routing_refusals_and_piece_loads_without_json_get_the_error_body(model, tokenizer):
    """FastAPI's own 404 and 405 answer in the server's {"error": ...} form; POST /v1/pieces takes only a body
    declared JSON (a web page may post text/plain or a form to a local server without a CORS preflight)."""
    with running(create_app(model, tokenizer)) as url, httpx.Client(base_url=url, timeout=30) as client:
        for method, path, status, words in [
            ("GET", "/v1/predict", 405, "this path takes POST"),
            ("PUT", "/v1/pieces", 405, "this path takes GET, HEAD, POST"),  # every route of the path
            ("POST", "/v1/nope", 404, "the endpoints are /healthz"),
        ]:
            response = client.request(method, path)
            assert response.status_code == status and words in response.json()["error"]["message"], response.text
            if status == 405:  # RFC 9110: a 405 names what the path takes
                assert response.headers["allow"] == words.removeprefix("this path takes ")
        for path in ("/healthz", "/metrics", "/v1/pieces"):  # probes that want the status alone
            head = client.head(path)
            assert head.status_code == 200 and head.content == b"", path
        body = json.dumps({"kind": "adapter", "source": "anywhere"})
        for headers in [{"Content-Type": "text/plain"}, {}]:
            response = client.post("/v1/pieces", content=body, headers=headers)
            assert response.status_code == 415 and "application/json" in response.json()["error"]["message"]
        assert client.get("/v1/pieces").json()["adapters"] == list(model.adapter_names)  # nothing loaded


def _post_unfinished(url: str, path: str, chunks: list[bytes]) -> tuple[int, dict]:
    """POST `chunks` as a chunked body (no Content-Length) that never ends, and read the answer the server gives
    before the end; a server that waits to read the body whole never answers."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        head = [f"POST {path} HTTP/1.1", f"Host: {host}", "Content-Type: application/json"]
        sock.sendall(("\r\n".join([*head, "Transfer-Encoding: chunked"]) + "\r\n\r\n").encode())
        for chunk in chunks:
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        received = b""
        try:
            while b"\r\n\r\n" not in received or len(received.partition(b"\r\n\r\n")[2]) < _length(received):
                data = sock.recv(65536)
                assert data, f"the server closed the connection without an answer: {received!r}"
                received += data
        except TimeoutError:
            pytest.fail(f"no answer to {path} before the body ended: the server waits to read an oversized body whole")
    status_line, _, rest = received.partition(b"\r\n")
    return int(status_line.split()[1]), json.loads(rest.partition(b"\r\n\r\n")[2][: _length(received)])


def _length(received: bytes) -> int:
    """The Content-Length of an answer's head (received so far), or 1 << 30 while the head is not in."""
    head, done, _ = received.partition(b"\r\n\r\n")
    lines = [line.split(b":", 1) for line in head.split(b"\r\n")[1:]] if done else []
    return next((int(value) for key, value in lines if key.strip().lower() == b"content-length"), 1 << 30)


def test_a_chunked_body_is_refused_as_soon_as_it_passes_the_limit_on_every_endpoint(model, tokenizer):
    """A body sent chunked declares no length: the server counts it as it arrives and answers 413 once it passes
    max_body_bytes, without waiting for (or holding) the rest; a chunked body within the limit is read as usual."""
    config = ServeConfig(max_wait_ms=0, max_body_bytes=1000)
    with running(create_app(model, tokenizer, config)) as url, httpx.Client(base_url=url, timeout=30) as client:
        for path in ("/v1/predict", "/v1/generate", "/v1/pieces"):
            status, answer = _post_unfinished(url, path, [b'{"inputs": ["' + b"y" * 600, b"y" * 600])
            assert status == 413 and answer["error"]["status"] == 413, (path, answer)
            assert "over the limit of 1000" in answer["error"]["message"], answer
            assert "--max-body-bytes" in answer["error"]["message"], answer
        pieces = [b'{"inputs": [', b'"A man is playing a guitar."], ', b'"adapter": "a", "head": "nli"}']
        response = client.post("/v1/predict", content=iter(pieces), headers={"Content-Type": "application/json"})
        assert response.status_code == 200, response.text
        _check(copy.deepcopy(model), tokenizer, {"inputs": [TEXTS[0]], "adapter": "a", "head": "nli"}, response.json())


def test_the_default_text_limit_follows_the_tokens_the_model_reads(model, tokenizer):
    """Tokenising runs on the event loop, so each text is held to CHARS_PER_TOKEN (8) characters per token kept: the
    tiny model reads 128 tokens, so 1024 characters pass (cut to 128 tokens) and 1025 are refused before tokenising,
    naming the limit and the setting that raises it (/v1/generate: test_serve_generate.py)."""
    long = ("word " * 205)[:1024]
    with running(create_app(model, tokenizer, ServeConfig(max_wait_ms=0))) as url:
        with httpx.Client(base_url=url, timeout=30) as client:
            response = client.post("/v1/predict", json={"inputs": [[TEXTS[0], long]], "head": "nli"})
            assert response.status_code == 200, response.text
            refused = client.post("/v1/predict", json={"inputs": [[TEXTS[0], long + "s"]], "head": "nli"})
            message = refused.json()["error"]["message"]
            assert refused.status_code == 413 and "1025 characters, over the limit of 1024" in message, message
            assert "--max-text-chars" in message
    assert len(tokenizer(TEXTS[0], long)["input_ids"]) > 128
    cut = tokenizer(TEXTS[0], long, truncation=True, max_length=128, return_tensors="pt")
    with model.activated(head="nli"), torch.no_grad():
        scores = model(**cut).logits[0].softmax(-1)
    assert_close(response.json()["predictions"][0]["scores"], scores.tolist(), dtype=model.dtype)


@pytest.mark.parametrize("limit, reason", [("positions", "max_position_embeddings=128"), ("tokenizer", "=64")])
def test_a_max_length_over_what_the_model_takes_is_refused_when_the_app_is_made(model, limit, reason):
    """The tiny model's position table holds 128 tokens; a tokenizer may say less. A longer max_length would fail in
    the embeddings at the first long input, so create_app (which `serve` and the Ray replicas call) refuses it."""
    tokenizer = load_tokenizer()
    tokenizer.model_max_length = 64 if limit == "tokenizer" else tokenizer.model_max_length
    most = 64 if limit == "tokenizer" else 128
    words = f"max_length={most + 1} is more tokens than this model takes: {most}"
    with pytest.raises(af.ConfigError, match=words) as refused:
        create_app(model, tokenizer, ServeConfig(max_length=most + 1))
    assert reason in str(refused.value) and f"--max-length {most} or less" in str(refused.value)
    create_app(model, tokenizer, ServeConfig(max_length=most))  # the limit itself is fine


def test_a_piece_that_does_not_load_is_answered_without_the_servers_paths_or_folders(
    model, tokenizer, tmp_path, monkeypatch, caplog
):
    """POST /v1/pieces names what is wrong with the 'source' the client sent, never what the server's folders hold or
    paths it resolved there (a client could map the disk with it); the server's log keeps the detail."""
    (tmp_path / "stuff").mkdir()
    for secret in ("id_rsa", "payroll-2026.xlsx"):
        (tmp_path / "stuff" / secret).write_text("x")
    model.save_adapter("a", tmp_path / "saved-adapter")
    model.save_pretrained(tmp_path / "setup")
    leaks = ["id_rsa", "payroll", "adapter.safetensors", "adapter_config.json", "adapters/", "holds ["]
    requests = [
        ({"kind": "adapter", "source": str(tmp_path / "stuff")}, 422),
        ({"kind": "fusion", "source": str(tmp_path / "saved-adapter")}, 422),
        ({"kind": "head", "source": str(tmp_path / "saved-adapter")}, 422),
        ({"kind": "adapter", "source": str(tmp_path / "setup"), "name": "new"}, 422),  # holds 3: lists their folders
    ]
    # Each kind of library error, its message full of server paths, as the loader raises it.
    secret = "/srv/private/models holds ['id_rsa', 'payroll-2026.xlsx'] (cache /root/.cache/huggingface/hub)"
    errors = [
        (af.SerializationError(secret), 422),
        (af.HubError(secret), 422),
        (af.IncompatibleModelError(secret), 422),
        (af.NameNotFoundError(secret), 422),
        (af.ConfigError(secret), 422),
    ]
    caplog.set_level(logging.WARNING, logger="adapterfusion.serving.app")
    with running(create_app(model, tokenizer, ServeConfig(max_wait_ms=0))) as url:
        with httpx.Client(base_url=url, timeout=30) as client:
            answers = [(body, status, client.post("/v1/pieces", json=body)) for body, status in requests]
            for error, status in errors:
                monkeypatch.setattr(model, "load_head", _raising(error))
                body = {"kind": "head", "source": "org/name"}
                answers.append((body, status, client.post("/v1/pieces", json=body)))
            assert client.get("/v1/pieces").json()["adapters"] == ["a", "b", "c"]  # nothing loaded, still serving
    for body, status, response in answers:
        assert response.status_code == status, (body, response.text)
        message = response.json()["error"]["message"]
        assert repr(body["source"]) in message, message  # names what the client sent
        rest = message.replace(repr(body["source"]), "")
        assert not [leak for leak in [*leaks, str(tmp_path), "/srv", "/root"] if leak in rest], message
    assert "id_rsa" in caplog.text and "/srv/private/models" in caplog.text  # the detail stays in the server's log


def _raising(error: Exception):
    """A loader that raises `error`."""

    def load(*_args):
        raise error

    return load


def test_non_finite_scores_are_a_json_500_counted_in_the_metrics(model, tokenizer):
    """A head whose weights hold NaN: the answer cannot be JSON. It was Starlette's bare 500 with an ASGI traceback,
    missing from requests_total, while predictions_total counted the inputs never answered."""
    with torch.no_grad():
        for parameter in model.get_head("nli").parameters():
            parameter.fill_(float("nan"))
    body = {"inputs": TEXTS[:2], "adapter": "a", "head": "nli"}
    with running(create_app(model, tokenizer, ServeConfig(max_wait_ms=0))) as url:
        with httpx.Client(base_url=url, timeout=30) as client:
            response = client.post("/v1/predict", json=body)
            assert response.status_code == 500, response.text
            assert "non-finite values (NaN or infinity) for inputs [0, 1]" in response.json()["error"]["message"]
            assert client.get("/healthz").status_code == 200
            metrics = client.get("/metrics").text
    assert 'adapterfusion_serve_requests_total{endpoint="/v1/predict",status="500"} 1' in metrics
    assert _sample(metrics, "adapterfusion_serve_predictions_total") == 0
