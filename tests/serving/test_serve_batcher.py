"""The dynamic batcher alone, with a stand-in predict that records its batches: requests that wait together run
together up to max_batch_size inputs, one that does not fit starts the next forward, a full queue refuses at once,
and close() finishes everything queued."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest

from adapterfusion.errors import ConfigError
from adapterfusion.serving import PredictRequest, ServeConfig
from adapterfusion.serving.batcher import Batcher, QueueFullError


def _request(inputs: int, tag: str) -> PredictRequest:
    return PredictRequest(tuple((f"{tag}{i}", None) for i in range(inputs)), {"adapter": tag}, "h", "classification")


def _run(requests, max_batch_size=4, max_wait_ms=50.0, max_queue=16):
    """Submit all `requests` at once; (answers, the batches predict saw as lists of input counts)."""
    batches: list[list[int]] = []

    def predict(batch):
        batches.append([len(r.inputs) for r in batch])
        return [[{"label": 0, "scores": [text for text, _ in r.inputs]}] for r in batch]

    async def main():
        with ThreadPoolExecutor(1) as executor:
            batcher = Batcher(predict, executor, max_batch_size, max_wait_ms, max_queue)
            batcher.start()
            answers = await asyncio.gather(*(batcher.submit(r) for r in requests), return_exceptions=True)
            await batcher.close()
        return answers

    return asyncio.run(main()), batches


def test_requests_waiting_together_share_a_forward_up_to_the_batch_size():
    requests = [_request(n, tag) for n, tag in [(1, "a"), (2, "b"), (1, "c"), (3, "d"), (1, "e")]]
    answers, batches = _run(requests)
    assert batches == [[1, 2, 1], [3, 1]]  # d (3 inputs) does not fit beside 4, so it starts the next forward
    assert [answer[0]["scores"] for answer in answers] == [
        [f"{r.choice['adapter']}{i}" for i in range(len(r.inputs))] for r in requests
    ]


def test_a_full_queue_refuses_at_once_and_the_rest_finish():
    answers, batches = _run([_request(1, str(i)) for i in range(5)], max_batch_size=1, max_queue=2)
    refused = [a for a in answers if isinstance(a, QueueFullError)]
    assert len(refused) == 3 and refused[0].status == 429  # the loop had not started taking: 2 queued, 3 refused
    assert batches == [[1], [1]]


def test_close_finishes_every_queued_request():
    answers, batches = _run([_request(2, str(i)) for i in range(6)], max_batch_size=2, max_wait_ms=1000)
    assert all(not isinstance(a, Exception) for a in answers) and batches == [[2]] * 6


def test_config_refusals():
    with pytest.raises(ConfigError, match="max_inputs=8 exceeds max_batch_size=4"):
        ServeConfig(max_batch_size=4, max_inputs=8)
    with pytest.raises(ConfigError, match="max_queue=0"):
        ServeConfig(max_queue=0)
    with pytest.raises(ConfigError, match="at least 8 characters"):
        ServeConfig(api_key="short")
