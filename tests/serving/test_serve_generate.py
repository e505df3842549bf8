"""POST /v1/generate over real HTTP on 127.0.0.1: concurrent requests for different adapters, a fusion and the plain
model share generate() calls, and each request's text is what its prompt gets generated alone (greedy) with its
choice active; an encoder-decoder generates too; bad requests get 4xx JSON naming the problem."""

from __future__ import annotations

import copy
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import torch
import transformers

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

from serve_helpers import TEXTS, running, tiny_served_model  # noqa: E402

import adapterfusion as af  # noqa: E402
from adapterfusion.serving import ServeConfig  # noqa: E402
from adapterfusion.serving.app import create_app  # noqa: E402
from tiny_models import randomise  # noqa: E402


def _generating(tokenizer: Any, model_type: str = "llama", positions: int = 128) -> af.AdaptedModel:
    """A tiny float64 LM over the shipped tokenizer's vocabulary with adapters a, b (at every site, cross-attention's
    too on BART) and fusion f over them, all random so that each choice changes the tokens."""
    if model_type == "llama":
        config: Any = transformers.LlamaConfig(
            vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=positions,
            pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.sep_token_id,
        )  # fmt: skip
        torch.manual_seed(0)
        base: Any = transformers.LlamaForCausalLM(config)
        sites: tuple[str, ...] = ("attention", "output")
    else:
        config = transformers.BartConfig(
            vocab_size=len(tokenizer), d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=128,
            pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.sep_token_id,
            decoder_start_token_id=tokenizer.cls_token_id, forced_eos_token_id=None,
        )  # fmt: skip
        torch.manual_seed(0)
        base = transformers.BartForConditionalGeneration(config)
        sites = ("attention", "cross", "output")
    model = af.wrap(base.double())
    for name in ("a", "b"):
        model.add_adapter(name, af.AdapterConfig.pfeiffer(4, positions=sites))
        randomise(torch.nn.ModuleList(site.adapters[name] for site in model.sites_with_adapter(name)), std=0.5)
    model.add_fusion("f", ["a", "b"])
    randomise(torch.nn.ModuleList(site.fusions["f"] for site in model.sites_with_fusion("f")), std=0.5)
    return model.eval()


def _alone(model: af.AdaptedModel, tokenizer: Any, prompt: str, new_tokens: int, **choice: str) -> dict[str, Any]:
    """The prompt generated alone (greedy) with `choice` active: new tokens up to the first end token, as text."""
    inputs = tokenizer(prompt, return_tensors="pt", return_token_type_ids=False)
    with model.activated(**choice):
        out = model.generate(**inputs, max_new_tokens=new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    start = 1 if model.model.config.is_encoder_decoder else inputs["input_ids"].shape[1]
    tokens = out[0, start:].tolist()
    end = model.model.generation_config.eos_token_id
    kept = tokens[: tokens.index(end) + 1] if end in tokens else tokens
    return {"text": tokenizer.decode(kept, skip_special_tokens=True), "tokens": len(kept)}


REQUESTS: list[dict[str, Any]] = [
    {"inputs": TEXTS[:2], "adapter": "a", "max_new_tokens": 6},
    {"inputs": [TEXTS[2]], "adapter": "b", "max_new_tokens": 3},
    {"inputs": [TEXTS[1], TEXTS[4]], "fusion": "f", "max_new_tokens": 5},
    {"inputs": [TEXTS[3]], "max_new_tokens": 6},
]


@pytest.mark.parametrize("model_type", ["llama", "bart"])
def test_concurrent_requests_share_generations_and_each_equals_its_prompt_alone(tokenizer: Any, model_type: str):
    model = _generating(tokenizer, model_type)
    reference = copy.deepcopy(model)
    config = ServeConfig(max_batch_size=16, max_wait_ms=300, max_inputs=8, max_new_tokens=8)
    with running(create_app(model, tokenizer, config)) as url, httpx.Client(base_url=url, timeout=60) as client:
        with ThreadPoolExecutor(len(REQUESTS)) as pool:
            responses = list(pool.map(lambda body: client.post("/v1/generate", json=body), REQUESTS))
        metrics = client.get("/metrics").text
    for body, response in zip(REQUESTS, responses, strict=True):
        assert response.status_code == 200, response.text
        choice = {kind: body[kind] for kind in ("adapter", "fusion") if kind in body}
        expected = [_alone(reference, tokenizer, text, body["max_new_tokens"], **choice) for text in body["inputs"]]
        assert response.json() == {"generations": expected}, body
    texts = [g["text"] for response in responses for g in response.json()["generations"]]
    assert len(set(texts)) > 1  # the choices (and prompts) make a difference
    forwards = int(
        next(
            line.split()[-1]
            for line in metrics.splitlines()
            if line.startswith("adapterfusion_serve_batch_rows_count ")
        )
    )
    assert forwards < len(REQUESTS), "requests that arrived together were generated apart"


def test_bad_generate_requests_get_json_errors(tokenizer: Any):
    model = _generating(tokenizer)
    config = ServeConfig(max_inputs=4, max_new_tokens=8)
    bad = [
        ({"inputs": ["x"], "max_new_tokens": 9}, 413, "over this server's limit of 8"),
        ({"inputs": ["x"], "max_new_tokens": 0}, 422, "'max_new_tokens'"),
        ({"inputs": ["x"], "max_new_tokens": "5"}, 422, "'max_new_tokens'"),
        ({"inputs": [["a", "b"]]}, 422, "pair of texts"),
        ({"inputs": ["x"], "adapter": "zz"}, 404, "no adapter named 'zz'"),
        ({"inputs": ["x"], "head": "nli"}, 422, "unknown field(s) ['head']"),
        ({"inputs": ["x"], "chat": "yes"}, 422, "'chat'"),
        ({"inputs": ["x"], "chat": True}, 422, "no chat template"),
        ({"inputs": ["word " * 200], "max_new_tokens": 8}, 413, "exceeds the model's"),
        ({"inputs": ["w" * 1025]}, 413, "over the limit of 1024; send a shorter text, or start the server with a"),
        ({"inputs": ["x"], "temperature": -0.5}, 422, "'temperature'"),
        ({"inputs": ["x"], "temperature": "hot"}, 422, "'temperature'"),
        ({"inputs": ["x"], "temperature": 1000}, 422, "to 100"),
        ({"inputs": ["x"], "temperature": 1e-45}, 422, "from 0.001"),  # logits / t overflowed: a 500 before
        ({"inputs": ["x"], "temperature": 1, "top_p": 0}, 422, "'top_p'"),
        ({"inputs": ["x"], "temperature": 1, "top_p": 1.5}, 422, "'top_p'"),
        ({"inputs": ["x"], "temperature": 1, "top_k": 2.5}, 422, "'top_k'"),
        ({"inputs": ["x"], "temperature": 1, "top_k": -1}, 422, "'top_k'"),
        # a 400-digit top_k failed the batch's generate() as no finite number, answered in the Python API's terms
        ({"inputs": ["x"], "temperature": 1, "top_k": 10**400}, 422, "'top_k' is 1000"),
        ({"inputs": ["x"], "top_k": 5}, 422, "act only when sampling"),
    ]
    with running(create_app(model, tokenizer, config)) as url, httpx.Client(base_url=url, timeout=30) as client:
        for body, status, words in bad:
            response = client.post("/v1/generate", json=body)
            assert response.status_code == status, (body, response.text)
            assert words in response.json()["error"]["message"], (body, response.text)
        assert client.post("/v1/generate", json={"inputs": ["x"], "max_new_tokens": 2}).status_code == 200


def test_a_model_without_a_language_model_head_answers_404(tokenizer: Any):
    model = tiny_served_model(tokenizer)
    with running(create_app(model, tokenizer, ServeConfig())) as url, httpx.Client(base_url=url, timeout=30) as client:
        response = client.post("/v1/generate", json={"inputs": ["x"]})
        assert response.status_code == 404 and "language-model head" in response.json()["error"]["message"]
        assert client.post("/v1/predict", json={"inputs": ["x"], "head": "nli"}).status_code == 200


def test_sampling_requests_share_a_batch_with_greedy_ones(tokenizer: Any):
    """Sampling with top_k 1 keeps only the likeliest token, so it must give the greedy answer, whichever batch it
    shares with greedy requests; at temperature 1 over the whole vocabulary the answer is a draw, not the greedy one."""
    model = _generating(tokenizer)
    reference = copy.deepcopy(model)
    config = ServeConfig(max_batch_size=16, max_wait_ms=300, max_inputs=8, max_new_tokens=8)
    bodies = [
        {"inputs": TEXTS[:2], "adapter": "a", "max_new_tokens": 6, "temperature": 0.7, "top_k": 1},
        {"inputs": [TEXTS[2]], "fusion": "f", "max_new_tokens": 6},
        {"inputs": [TEXTS[3]], "adapter": "b", "max_new_tokens": 6, "temperature": 1.0, "top_p": 1.0},
    ]
    torch.manual_seed(0)
    with running(create_app(model, tokenizer, config)) as url, httpx.Client(base_url=url, timeout=60) as client:
        with ThreadPoolExecutor(len(bodies)) as pool:
            responses = list(pool.map(lambda body: client.post("/v1/generate", json=body), bodies))
    assert all(response.status_code == 200 for response in responses), [r.text for r in responses]
    top_one, greedy, sampled = (response.json()["generations"] for response in responses)
    assert top_one == [_alone(reference, tokenizer, text, 6, adapter="a") for text in TEXTS[:2]]
    assert greedy == [_alone(reference, tokenizer, TEXTS[2], 6, fusion="f")]
    assert 1 <= sampled[0]["tokens"] <= 6
    assert sampled != [_alone(reference, tokenizer, TEXTS[3], 6, adapter="b")]


def test_requests_that_fit_alone_are_never_grouped_past_the_models_positions(tokenizer: Any):
    """A short prompt asking for many tokens beside a long prompt asking for few: each fits the 32 positions alone,
    together (the longest prompt plus the most new tokens) they did not, so the batch failed and ran again one by one,
    counted in failed_forwards_total."""
    model = _generating(tokenizer, positions=32)
    short = {"inputs": ["hi"], "adapter": "a", "max_new_tokens": 24}
    long_ = {"inputs": [" ".join(["word"] * 20)], "adapter": "b", "max_new_tokens": 4}
    with running(create_app(model, tokenizer, ServeConfig(max_wait_ms=300))) as url:
        with httpx.Client(base_url=url, timeout=60) as client, ThreadPoolExecutor(2) as pool:
            together = list(pool.map(lambda body: client.post("/v1/generate", json=body), [short, long_]))
            metrics = client.get("/metrics").text
    assert [response.status_code for response in together] == [200, 200], [r.text for r in together]
    assert "adapterfusion_serve_failed_forwards_total 0" in metrics
    for body, response in zip([short, long_], together, strict=True):
        expected = _alone(model, tokenizer, body["inputs"][0], body["max_new_tokens"], adapter=body["adapter"])
        assert response.json()["generations"] == [expected]
