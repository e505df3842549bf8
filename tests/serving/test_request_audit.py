"""What a robustness audit of the request boundary found, over HTTP, each now refused with a short JSON error that
names the field: refusals quoted a client's name or key back whole (a 1 MB answer for a 1 MB adapter name), query
parameters on POST endpoints were ignored unsaid (the plain encoder answered POST /v1/predict?adapter=b), a gzip body
was called 'not valid JSON' over one of its bytes, piece names of any length were loaded, and POST /v1/pieces
messages quoted values in Python (None, False) or not at all ('source' of the wrong type). After each refusal the
next good request still answers as before."""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

from serve_helpers import TEXTS, running, tiny_served_model  # noqa: E402

from adapterfusion.serving import ServeConfig  # noqa: E402
from adapterfusion.serving.app import create_app  # noqa: E402
from adapterfusion.serving.catalog import Catalog  # noqa: E402
from adapterfusion.serving.contract import MAX_PIECE_NAME_CHARS, parse_generate, parse_piece  # noqa: E402
from adapterfusion.serving.request_errors import RequestError  # noqa: E402

GOOD = {"inputs": [TEXTS[0]], "adapter": "a", "head": "nli"}
BIG = "x" * 200_000


@pytest.fixture(scope="module")
def served(tokenizer):
    with running(create_app(tiny_served_model(tokenizer), tokenizer, ServeConfig(max_wait_ms=0))) as url:
        with httpx.Client(base_url=url, timeout=30) as client:
            yield client, client.post("/v1/predict", json=GOOD).json()


def _refused(client: Any, path: str, status: int, **sent: Any) -> str:
    response = client.post(path, **sent)
    assert response.status_code == status, response.text[:300]
    error = response.json()["error"]
    assert error["status"] == status
    return error["message"]


@pytest.mark.parametrize(
    "path, body, status, words",
    [
        ("/v1/predict", {"inputs": ["x"], "adapter": BIG, "head": "nli"}, 404, "no adapter named 'xxxx"),
        ("/v1/predict", {"inputs": ["x"], "fusion": BIG, "head": "nli"}, 404, "no fusion named 'xxxx"),
        ("/v1/predict", {"inputs": ["x"], "head": BIG}, 404, "no head named 'xxxx"),
        ("/v1/predict", {"inputs": ["x"], "head": "nli", BIG: 1}, 422, "unknown field(s) ['xxxx"),
        ("/v1/predict", {"inputs": ["x"], "head": "nli", **{f"k{i}": 0 for i in range(20_000)}}, 422, "['k0', "),
        ("/v1/predict", {"inputs": ["x"], "head": "nli", "block": {"stack": ["a", BIG]}}, 404, "'block.stack[1]' = "),
        ("/v1/predict", {"inputs": ["x"], "head": "nli", "block": {"stack": ["a"], BIG: 1}}, 422, "unknown field(s)"),
        (
            "/v1/predict",
            {"inputs": ["x"], "head": "nli", "block": {"average": ["a", "b"], "weights": {"w": BIG}}},
            422,
            '\'block.weights\' is {"w": "xxxx',
        ),
        ("/v1/predict", {"inputs": ["x"], "head": "nli", "block": {"fuse": ["a", "b"], "name": BIG}}, 404, "fusion"),
        ("/v1/pieces", {"kind": BIG, "source": "org/x"}, 422, "'kind' is 'xxxx"),
        ("/v1/pieces", {"kind": "adapter", "source": BIG}, 422, "'source' has 200000 characters"),
        ("/v1/pieces", {"kind": "adapter", "source": "org/x", "name": BIG}, 422, "'name' has 200000 characters"),
        ("/v1/pieces", {"kind": "adapter", "source": "org/x", BIG: 1}, 422, "unknown field(s)"),
    ],
)
def test_a_refusal_quotes_a_short_piece_of_what_was_sent(served, path, body, status, words):
    """Each of these answered with the whole value (200,000 characters) in its message."""
    client, expected = served
    message = _refused(client, path, status, json=body)
    assert words in message and len(message) < 300, message[:300]
    assert client.post("/v1/predict", json=GOOD).json() == expected


@pytest.mark.parametrize("path", ["/v1/predict", "/v1/generate", "/v1/pieces"])
def test_query_parameters_on_a_post_endpoint_are_refused(served, path):
    """POST /v1/predict?adapter=b&head=nli answered with the plain encoder: the URL's fields were dropped unsaid."""
    client, expected = served
    message = _refused(client, path + "?adapter=b&head=nli", 400, json={"inputs": ["x"]})
    assert message == (
        f"POST {path} takes no query parameters (got '?adapter=b&head=nli'); send every field in the JSON body"
    )
    assert client.get("/healthz?probe=1").status_code == 200  # a GET's query harms nothing
    assert client.post("/v1/predict", json=GOOD).json() == expected


def test_a_compressed_body_is_refused_naming_its_encoding(served):
    """A gzip body was answered 400 "not valid JSON ('utf-8' codec can't decode byte 0x8b ...)"."""
    client, expected = served
    body = json.dumps(GOOD).encode()
    for path in ("/v1/predict", "/v1/pieces"):
        headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
        message = _refused(client, path, 415, content=gzip.compress(body), headers=headers)
        assert "Content-Encoding 'gzip'" in message and "send the JSON uncompressed" in message
    identity = {"Content-Type": "application/json", "Content-Encoding": "identity"}
    assert client.post("/v1/predict", content=body, headers=identity).json() == expected


@pytest.mark.parametrize(
    "body, words",
    [
        ({"source": "org/x"}, "'kind' is missing; give one of ['adapter', 'fusion', 'head']"),
        ({"kind": None, "source": "org/x"}, "'kind' is null; give one of"),  # was Python's None
        ({"kind": ["adapter"], "source": "org/x"}, "'kind' is [\"adapter\"]; give one of"),
        ({"kind": "adapter", "source": 3}, "'source' is 3; give a piece's folder on the server or a Hub id"),
        ({"kind": "adapter", "source": ""}, "'source' is ''; give a piece's folder"),
        ({"kind": "adapter", "source": "org/x", "name": False}, "'name' is false; give a non-empty name"),
        (
            {"kind": "adapter", "source": "org/x", "name": "n" * (MAX_PIECE_NAME_CHARS + 1)},
            f"'name' has {MAX_PIECE_NAME_CHARS + 1} characters; give at most {MAX_PIECE_NAME_CHARS}",
        ),
    ],
)
def test_piece_fields_are_refused_naming_what_was_sent(body, words):
    with pytest.raises(RequestError) as refused:
        parse_piece(body)
    assert refused.value.status == 422 and words in refused.value.message, refused.value.message


def test_a_piece_name_at_the_limit_is_taken():
    name = "n" * MAX_PIECE_NAME_CHARS
    assert parse_piece({"kind": "adapter", "source": "org/x", "name": name}).name == name


def test_a_generate_request_without_prompts_is_told_to_send_prompts_not_pairs():
    """'inputs': [] on /v1/generate was told to give 'text pairs', which that endpoint refuses."""
    catalog = Catalog(adapters=(), fusions={}, heads={}, active={}, generates=True)
    for inputs, words in (([], "'inputs' is empty"), ("x", "'inputs' is a string"), (None, "'inputs' is missing")):
        with pytest.raises(RequestError) as refused:
            parse_generate({"inputs": inputs}, catalog, ServeConfig())
        assert refused.value.message.startswith(words) and 'a list of prompts ["...", ...]' in refused.value.message
        assert "pair" not in refused.value.message
