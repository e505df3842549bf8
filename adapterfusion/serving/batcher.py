"""Dynamic batching: requests that arrive together share one forward.

Requests wait in a bounded queue (full: QueueFullError, which the app answers with 429 and a Retry-After of the last
forward's seconds, rounded up: a place in the queue opens when the running forward ends and the loop takes the next
batch, so a client that waits that long finds room). One loop takes the oldest waiting request, then, in arrival
order, every other waiting or arriving request that fits, until max_batch_size inputs or max_wait_ms have passed. A
request fits while the batch stays within max_batch_size inputs and within max_batch_tokens padded tokens (inputs x
the longest input: a batch is padded to its longest), so a long input is left for a batch of its own kind rather
than padding many short ones; it waits at most until it is the oldest. The batch runs in one call of `predict` on the
model's own thread, so the event loop keeps answering while the model works. A batch that raises is run again one
request at a time, so one bad request fails alone. `close` lets every queued request finish before the loop ends
(graceful shutdown); `stop` answers every request not yet answered with a 503 (the drain time ran out)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from adapterfusion.serving.predictor import Prediction
from adapterfusion.serving.request_errors import RequestError

logger = logging.getLogger(__name__)


class Item(Protocol):
    """What the batcher needs of a request: its inputs and its longest input in tokens (predictor.Encoded)."""

    @property
    def rows(self) -> int: ...

    @property
    def tokens(self) -> int: ...


ItemT = TypeVar("ItemT", bound=Item)


# Seconds a client is told to wait (Retry-After) when the server is not running its model: stopping (another replica
# or a restart takes over) or not yet started.
UNAVAILABLE_RETRY_SECONDS = 5


def drain_ran_out() -> RequestError:
    """503 for a request still unanswered when the server's drain time (--drain-seconds) ran out."""
    return RequestError(
        503,
        "the server is stopping and this request did not finish within its drain time (--drain-seconds); send it "
        f"again after {UNAVAILABLE_RETRY_SECONDS} s (Retry-After), to the restarted server or another replica",
        {"Retry-After": str(UNAVAILABLE_RETRY_SECONDS)},
    )


class QueueFullError(RequestError):
    """429: the queue is full; `retry_after` seconds (Retry-After) until a place is likely to open."""

    def __init__(self, size: int, retry_after: int = 1) -> None:
        super().__init__(
            429,
            f"the server's queue holds {size} requests, its limit; retry after {retry_after} s (Retry-After)",
            {"Retry-After": str(retry_after)},
        )


@dataclass
class _Job(Generic[ItemT]):
    item: ItemT
    future: asyncio.Future[list[Prediction]]


class Batcher(Generic[ItemT]):
    """Batches `predict` calls; `on_forward(rows, failed)` hears of each forward (for the metrics)."""

    def __init__(
        self,
        predict: Callable[[Sequence[ItemT]], list[list[Prediction]]],
        executor: Executor,
        max_batch_size: int,
        max_wait_ms: float,
        max_queue: int,
        max_batch_tokens: int | None = None,
        on_forward: Callable[[int, bool], None] = lambda rows, failed: None,
    ) -> None:
        self._predict, self._executor, self._on_forward = predict, executor, on_forward
        self._max_rows, self._max_tokens, self._max_wait = max_batch_size, max_batch_tokens, max_wait_ms / 1000
        self._max_queue = max_queue
        self._waiting: deque[_Job[ItemT]] = deque()
        self._running: list[_Job[ItemT]] = []  # the jobs of the forward on the model's thread
        self._arrived = asyncio.Event()
        self._closing = False
        self._stopped: RequestError | None = None  # what `stop` answers, also to a batch being gathered
        self._task: asyncio.Task[None] | None = None
        self._forward_seconds = 0.0  # how long the last forward took, for Retry-After

    @property
    def waiting(self) -> int:
        """Requests queued and not yet taken into a forward."""
        return len(self._waiting)

    @property
    def retry_after(self) -> int:
        """Whole seconds (HTTP's Retry-After, at least 1) until the queue likely has room: the last forward's time plus
        the wait for a batch to fill, since the loop takes the next batch from the queue as soon as a forward ends."""
        return max(1, math.ceil(self._forward_seconds + self._max_wait))

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def submit(self, item: ItemT) -> list[Prediction]:
        """The request's predictions, once its forward has run (QueueFullError at once when the queue is full)."""
        if self._task is None or self._task.done() or self._closing:
            raise RequestError(
                503,
                "the server is not running its model (starting up or shutting down)",
                {"Retry-After": str(UNAVAILABLE_RETRY_SECONDS)},
            )
        if len(self._waiting) >= self._max_queue:
            raise QueueFullError(self._max_queue, self.retry_after)
        future: asyncio.Future[list[Prediction]] = asyncio.get_running_loop().create_future()
        job = _Job(item, future)
        self._waiting.append(job)
        self._arrived.set()
        try:
            return await future
        except asyncio.CancelledError:  # its client left (app.py): it no longer holds a place in the queue
            with contextlib.suppress(ValueError):
                self._waiting.remove(job)
            raise

    async def close(self) -> None:
        """Finish every queued request, then stop the loop."""
        self._closing = True
        self._arrived.set()
        if self._task is not None:
            await self._task

    def stop(self, error: RequestError) -> None:
        """Take no more requests and answer every one queued or in the running forward with `error` at once; that
        forward still runs to its end on the model's thread (a thread cannot be interrupted), its answers unsent."""
        self._closing, self._stopped = True, error
        for job in [*self._waiting, *self._running]:
            _settle(job, error=error)
        self._waiting.clear()
        self._arrived.set()

    async def _loop(self) -> None:
        while True:
            if not self._waiting:
                if self._closing:
                    return
                self._arrived.clear()
                await self._arrived.wait()
                continue
            jobs = await self._gather()
            await self._run([job for job in jobs if not job.future.done()])  # a client that left is skipped

    async def _gather(self) -> list[_Job[ItemT]]:
        """The oldest waiting request and those that fit beside it, waiting up to max_wait for more to arrive."""
        loop = asyncio.get_running_loop()
        first = self._waiting.popleft()
        jobs, rows, longest = [first], first.item.rows, first.item.tokens
        deadline = loop.time() + self._max_wait
        while True:
            left: deque[_Job[ItemT]] = deque()
            for job in self._waiting:  # no await in this loop: nothing arrives while it runs
                size, length = rows + job.item.rows, max(longest, job.item.tokens)
                if size <= self._max_rows and (self._max_tokens is None or size * length <= self._max_tokens):
                    jobs.append(job)
                    rows, longest = size, length
                else:
                    left.append(job)
            self._waiting = left
            remaining = deadline - loop.time()
            if rows >= self._max_rows or left or self._closing or remaining <= 0:
                return jobs  # full, or the next batch is already waiting, or time is up
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), remaining)
            except TimeoutError:
                return jobs

    async def _run(self, jobs: list[_Job[ItemT]]) -> None:
        if not jobs:
            return
        if self._stopped is not None:
            for job in jobs:
                _settle(job, error=self._stopped)
            return
        loop = asyncio.get_running_loop()
        rows = sum(job.item.rows for job in jobs)
        started = loop.time()
        self._running = jobs
        try:
            answers = await loop.run_in_executor(self._executor, self._predict, [job.item for job in jobs])
        except Exception as error:
            self._forward_seconds = loop.time() - started
            self._on_forward(rows, True)
            if len(jobs) == 1:
                logger.exception("a forward failed")
                _settle(jobs[0], error=error)
                return
            for job in jobs:  # one at a time: only the request that fails gets the error
                await self._run([job])
            return
        self._forward_seconds = loop.time() - started
        if len(answers) != len(jobs):  # a predictor fault: the batch's requests fail, the loop (and server) goes on
            logger.error("a forward answered %d requests of %d", len(answers), len(jobs))
            self._on_forward(rows, True)
            fault = RuntimeError(f"the forward answered {len(answers)} of the {len(jobs)} requests it ran")
            for job in jobs:
                _settle(job, error=fault)
            return
        self._on_forward(rows, False)
        for job, answer in zip(jobs, answers, strict=True):
            _settle(job, answer)


def _settle(job: _Job[ItemT], answer: list[Prediction] | None = None, error: BaseException | None = None) -> None:
    if job.future.done():  # the client went away
        return
    if error is not None:
        job.future.set_exception(error)
    else:
        job.future.set_result(answer or [])
