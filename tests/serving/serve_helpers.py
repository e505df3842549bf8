"""Shared by the server tests: a tiny float64 model over the shipped MiniLM tokenizer's vocabulary with adapters, a
fusion and heads of different sizes; a uvicorn server on 127.0.0.1 (a port the OS picks) in a thread; and the
offline prediction of one input, computed without the server (the model alone, with the choice activated)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import torch
import transformers
import uvicorn

import adapterfusion as af
from tiny_models import randomise, tiny_encoder

TEXTS = [
    "A man is playing a guitar.",
    "Nobody is here",
    "The cat sat on the mat and looked at the dog for a long time.",
    "Rain",
    "Two dogs run across a field of snow while their owner watches from far away.",
]


def load_tokenizer() -> Any:
    return transformers.AutoTokenizer.from_pretrained(af.default_encoder_path())


def tiny_served_model(tokenizer: Any) -> af.AdaptedModel:
    """Adapters a, b, c (random, so each changes the output), fusion f over a and b, heads nli (3 labels), sent
    (2 labels, also the name of no adapter) and score (regression); float64 so that batched equals alone to 1e-10."""
    model = af.wrap(tiny_encoder(vocab_size=len(tokenizer), max_position_embeddings=128))
    for name in ("a", "b", "c"):
        model.add_adapter(name)
        randomise(torch.nn.ModuleList(site.adapters[name] for site in model.sites_with_adapter(name)), std=0.3)
    model.add_fusion("f", ["a", "b"])
    randomise(torch.nn.ModuleList(site.fusions["f"] for site in model.sites_with_fusion("f")), std=0.3)
    model.add_head("nli", af.ClassificationHead(num_labels=3, labels=["entailment", "neutral", "contradiction"]))
    model.add_head("a", af.ClassificationHead(num_labels=2))
    model.add_head("score", af.RegressionHead())
    randomise(model.heads, std=0.5)
    return model.double().eval()


@contextlib.contextmanager
def running(app: Any) -> Iterator[str]:
    """`app` served by uvicorn in a thread on 127.0.0.1; yields its base URL; stops it (gracefully) on exit."""
    with served(uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=20))) as url:
        yield url


@contextlib.contextmanager
def served(server: uvicorn.Server) -> Iterator[str]:
    """`server` run in a thread on a free port of 127.0.0.1; yields its base URL once it has started; on exit tells
    it to stop (as SIGTERM does) and checks that it did."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
        assert not thread.is_alive(), "the server did not stop"


def offline(model: af.AdaptedModel, tokenizer: Any, text: Any, **choice: Any) -> dict[str, Any]:
    """The prediction of one input (a text or [text, pair]) run alone through `model` with `choice` activated."""
    pair = (text, None) if isinstance(text, str) else tuple(text)
    with model.activated(**choice), torch.no_grad():
        logits = model(**tokenizer(*pair, return_tensors="pt")).logits[0].reshape(-1)  # a regression head: []
    if model.get_head(choice["head"]).config.kind == "regression":
        return {"value": float(logits[0]), "scores": logits.tolist()}
    label, names = int(logits.argmax()), model.get_head(choice["head"]).config.labels
    return {"label": label, **({"label_name": names[label]} if names else {}), "scores": logits.softmax(-1).tolist()}


def choice_of(body: dict[str, Any]) -> dict[str, Any]:
    """A predict body's adapter/fusion/head as activated() keywords."""
    return {key: body.get(key) for key in ("adapter", "fusion", "head")}
