"""The dynamic batcher alone, with a stand-in predict that records its batches: requests that wait together run
together up to max_batch_size inputs and max_batch_tokens padded tokens (one that does not fit waits for a later
forward, never past being the oldest), a full queue refuses at once, a failing request fails alone, and close()
finishes everything queued."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest

from adapterfusion.errors import ConfigError
from adapterfusion.serving import RequestError, ServeConfig
from adapterfusion.serving.batcher import UNAVAILABLE_RETRY_SECONDS, Batcher, QueueFullError


@dataclass(frozen=True)
class Item:
    tag: str
    rows: int = 1
    tokens: int = 10


def _run(items, max_batch_size=4, max_wait_ms=50.0, max_queue=16, max_batch_tokens=None):
    """Submit all `items` at once; (answers or errors, the batches predict saw as lists of tags)."""
    batches: list[list[str]] = []

    def predict(batch):
        batches.append([item.tag for item in batch])
        if any(item.tag == "boom" for item in batch):
            raise RuntimeError("boom")
        return [[{"label": 0, "scores": [item.tag]}] * item.rows for item in batch]

    async def main():
        with ThreadPoolExecutor(1) as executor:
            batcher = Batcher(predict, executor, max_batch_size, max_wait_ms, max_queue, max_batch_tokens)
            batcher.start()
            answers = await asyncio.gather(*(batcher.submit(item) for item in items), return_exceptions=True)
            await batcher.close()
        return answers

    return asyncio.run(main()), batches


def test_requests_waiting_together_share_a_forward_up_to_the_batch_size():
    items = [Item("a"), Item("b", 2), Item("c"), Item("d", 3), Item("e")]
    answers, batches = _run(items)
    assert batches == [["a", "b", "c"], ["d", "e"]]  # d (3 inputs) does not fit beside 4, so it starts the next
    assert [answer[0]["scores"] for answer in answers] == [[item.tag] for item in items]


def test_a_long_input_waits_for_a_forward_of_its_own_kind_within_the_token_budget():
    items = [Item("s1", tokens=10), Item("long", tokens=100), Item("s2", tokens=12), Item("s3", tokens=9)]
    _, batches = _run(items, max_batch_size=8, max_batch_tokens=64)
    assert batches == [["s1", "s2", "s3"], ["long"]]  # 2 x 100 > 64: long runs next, alone (over the budget alone)
    _, batches = _run(items, max_batch_size=8)  # no budget: all in one forward
    assert batches == [["s1", "long", "s2", "s3"]]


def test_a_full_queue_refuses_at_once_and_the_rest_finish():
    answers, batches = _run([Item(str(i)) for i in range(5)], max_batch_size=1, max_queue=2)
    refused = [a for a in answers if isinstance(a, QueueFullError)]
    assert len(refused) == 3 and refused[0].status == 429  # the loop had not started taking: 2 queued, 3 refused
    assert batches == [["0"], ["1"]]


def test_refusals_say_when_to_come_back():
    """429 carries Retry-After: the last forward's seconds plus the batch wait, rounded up and at least 1, since a place
    in the queue opens when the running forward ends; 503 (no model loop running) carries one too."""

    def slow(batch):
        time.sleep(1.2)
        return [[{"label": 0, "scores": [item.tag]}] for item in batch]

    async def main():
        with ThreadPoolExecutor(1) as executor:
            batcher = Batcher(slow, executor, max_batch_size=1, max_wait_ms=50.0, max_queue=1)
            with pytest.raises(RequestError) as stopped:
                await batcher.submit(Item("before the start"))
            batcher.start()
            # a waits in the queue (its limit is 1), b is refused; then again, once a forward took 1.2 s
            first = await asyncio.gather(batcher.submit(Item("a")), batcher.submit(Item("b")), return_exceptions=True)
            later = await asyncio.gather(batcher.submit(Item("c")), batcher.submit(Item("d")), return_exceptions=True)
            await batcher.close()
        return stopped.value, first, later

    stopped, first, later = asyncio.run(main())
    assert stopped.status == 503 and stopped.headers == {"Retry-After": str(UNAVAILABLE_RETRY_SECONDS)}
    assert isinstance(first[1], QueueFullError) and first[1].headers == {"Retry-After": "1"}  # no forward timed yet
    assert isinstance(later[1], QueueFullError) and later[1].headers == {"Retry-After": "2"}  # ceil(1.2 + 0.05)
    assert "retry after 2 s" in later[1].message and first[0][0]["scores"] == ["a"]


def test_a_failing_request_fails_alone():
    answers, batches = _run([Item("a"), Item("boom"), Item("c")])
    assert (
        isinstance(answers[1], RuntimeError) and answers[0][0]["scores"] == ["a"] and answers[2][0]["scores"] == ["c"]
    )
    assert batches == [["a", "boom", "c"], ["a"], ["boom"], ["c"]]


def test_a_forward_answering_too_few_requests_fails_its_batch_and_the_loop_goes_on():
    """A predictor that answered fewer requests than it ran ended the batcher's loop (zip(strict=True) raised in
    it): that batch's clients and every later one waited forever. Now the batch fails and later requests run."""

    def short(batch):
        return [[{"label": 0, "scores": [item.tag]}] for item in batch][: 1 if batch[0].tag == "short" else None]

    async def main():
        with ThreadPoolExecutor(1) as executor:
            batcher = Batcher(short, executor, 4, 50.0, 16, None)
            batcher.start()
            first = await asyncio.gather(*(batcher.submit(Item(t)) for t in ("short", "b")), return_exceptions=True)
            later = await asyncio.wait_for(batcher.submit(Item("c")), 5)
            await batcher.close()
        return first, later

    first, later = asyncio.run(main())
    assert all(isinstance(a, RuntimeError) and "answered 1 of the 2 requests" in str(a) for a in first)
    assert later[0]["scores"] == ["c"]


def test_close_finishes_every_queued_request():
    answers, batches = _run([Item(str(i), 2) for i in range(6)], max_batch_size=2, max_wait_ms=1000)
    assert all(not isinstance(a, Exception) for a in answers) and len(batches) == 6


def test_config_refusals():
    with pytest.raises(ConfigError, match="max_inputs=8 exceeds max_batch_size=4"):
        ServeConfig(max_batch_size=4, max_inputs=8)
    # max_inputs left out follows max_batch_size (a default of 32 refused ServeConfig(max_batch_size=8))
    assert ServeConfig(max_batch_size=8).max_inputs == 8 == ServeConfig(max_batch_size=8).inputs_limit
    assert ServeConfig().max_inputs == 32
    with pytest.raises(ConfigError, match="max_queue=0"):
        ServeConfig(max_queue=0)
    with pytest.raises(ConfigError, match="max_batch_tokens=0"):
        ServeConfig(max_batch_tokens=0)
    with pytest.raises(ConfigError, match="at least 8 characters"):
        ServeConfig(api_key="short")
