"""The server's app as a Ray Serve deployment with 2 replicas on a local Ray instance: the same endpoints over
Ray Serve's HTTP proxy on 127.0.0.1, every answer the offline prediction of the saved setup."""

from __future__ import annotations

import shutil
import socket
import tempfile
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")
ray = pytest.importorskip("ray")
serve = pytest.importorskip("ray.serve")

from serve_helpers import TEXTS, choice_of, load_tokenizer, offline, tiny_served_model  # noqa: E402

import adapterfusion as af  # noqa: E402
from adapterfusion.errors import ConfigError  # noqa: E402
from adapterfusion.serving import ServeConfig  # noqa: E402
from adapterfusion.serving.ray_deployment import deployment  # noqa: E402
from tiny_models import tiny_encoder  # noqa: E402
from tolerances import assert_close  # noqa: E402


def test_replicas_must_be_a_positive_number(tmp_path):
    with pytest.raises(ConfigError, match="replicas=0"):
        deployment(tmp_path, replicas=0)


@pytest.mark.slow
def test_two_replicas_answer_as_the_offline_model(tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # a local instance on 127.0.0.1 only
    tokenizer = load_tokenizer()
    base = tiny_encoder(vocab_size=len(tokenizer), max_position_embeddings=128)
    base.save_pretrained(tmp_path / "base")
    tokenizer.save_pretrained(tmp_path / "base")
    tiny_served_model(tokenizer).save_pretrained(tmp_path / "setup")
    reference = af.AdaptedModel.from_pretrained(str(tmp_path / "base"), tmp_path / "setup").double().eval()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    bodies = [
        {"inputs": [TEXTS[i % len(TEXTS)]], **choice}
        for i, choice in enumerate([{"adapter": "a", "head": "nli"}, {"fusion": "f", "head": "a"}, {"head": "nli"}] * 4)
    ]
    temp = tempfile.mkdtemp(prefix="afsrv")  # short: Ray's socket paths must fit in 107 characters
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=temp)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        app = deployment(
            tmp_path / "setup", tmp_path / "base", ServeConfig(max_wait_ms=50), 2, dtype="float64", cpus=0.5
        )
        serve.run(app, route_prefix="/")
        replicas = serve.status().applications["default"].deployments["adapterfusion"].replica_states
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            assert client.get("/healthz").status_code == 200
            with ThreadPoolExecutor(4) as pool:
                responses = list(pool.map(lambda body: client.post("/v1/predict", json=body), bodies))
            refused = client.post("/v1/predict", json={"inputs": [], "adapter": "a"})
    finally:
        serve.shutdown()
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)
    assert replicas == {"RUNNING": 2}
    assert refused.status_code == 422 and "'inputs' is empty" in refused.json()["error"]["message"]
    for body, response in zip(bodies, responses, strict=True):
        assert response.status_code == 200, response.text
        (got,) = response.json()["predictions"]
        expected = offline(reference, tokenizer, body["inputs"][0], **choice_of(body))
        assert got.get("label") == expected.get("label")
        assert_close(got["scores"], expected["scores"], dtype=reference.dtype)
