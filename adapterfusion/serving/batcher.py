"""Dynamic batching: requests that arrive together share one forward.

Requests wait in a bounded queue (full: QueueFullError, which the app answers with 429). One loop takes the first
waiting request, then whatever else waits or arrives within max_wait_ms, up to max_batch_size inputs (a request that
would overflow the batch starts the next one), and runs them in one call of `predict` on the model's own thread, so
the event loop keeps answering while the model works. A batch that raises is run again one request at a time, so
one bad request fails alone. `close` lets every queued request finish before the loop ends (graceful shutdown)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from adapterfusion.serving.contract import PredictRequest, RequestError
from adapterfusion.serving.predictor import Prediction

logger = logging.getLogger(__name__)

Predict = Callable[[Sequence[PredictRequest]], list[list[Prediction]]]


class QueueFullError(RequestError):
    def __init__(self, size: int) -> None:
        super().__init__(429, f"the server's queue holds {size} requests, its limit; retry after a short wait")


@dataclass
class _Job:
    request: PredictRequest
    future: asyncio.Future[list[Prediction]]


_STOP = object()


class Batcher:
    """Batches `predict` calls; `on_forward(rows, failed)` hears of each forward (for the metrics)."""

    def __init__(
        self,
        predict: Predict,
        executor: Executor,
        max_batch_size: int,
        max_wait_ms: float,
        max_queue: int,
        on_forward: Callable[[int, bool], None] = lambda rows, failed: None,
    ) -> None:
        self._predict, self._executor, self._on_forward = predict, executor, on_forward
        self._max_rows, self._max_wait = max_batch_size, max_wait_ms / 1000
        self._queue: asyncio.Queue[Any] = asyncio.Queue(max_queue)
        self._task: asyncio.Task[None] | None = None

    @property
    def waiting(self) -> int:
        """Requests queued and not yet taken into a forward."""
        return self._queue.qsize()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def submit(self, request: PredictRequest) -> list[Prediction]:
        """The request's predictions, once its forward has run (QueueFullError at once when the queue is full)."""
        if self._task is None or self._task.done():
            raise RequestError(503, "the server is not running its model (starting up or shutting down)")
        future: asyncio.Future[list[Prediction]] = asyncio.get_running_loop().create_future()
        try:
            self._queue.put_nowait(_Job(request, future))
        except asyncio.QueueFull:
            raise QueueFullError(self._queue.maxsize) from None
        return await future

    async def close(self) -> None:
        """Finish every queued request, then stop the loop."""
        if self._task is None:
            return
        await self._queue.put(_STOP)
        await self._task

    async def _loop(self) -> None:
        carried: Any = None
        while True:
            first = carried if carried is not None else await self._queue.get()
            if first is _STOP:
                return
            jobs, carried = await self._gather(first)
            await self._run([job for job in jobs if not job.future.done()])  # a client that left is skipped

    async def _gather(self, first: _Job) -> tuple[list[_Job], Any]:
        """`first` and the requests that join it; the one that did not fit (or the stop sign) is carried over."""
        loop = asyncio.get_running_loop()
        jobs, rows, deadline = [first], len(first.request.inputs), loop.time() + self._max_wait
        while rows < self._max_rows:
            try:
                item = self._queue.get_nowait()
            except asyncio.QueueEmpty:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                try:
                    item = await asyncio.wait_for(self._queue.get(), remaining)
                except TimeoutError:
                    break
            if item is _STOP or rows + len(item.request.inputs) > self._max_rows:
                return jobs, item
            jobs.append(item)
            rows += len(item.request.inputs)
        return jobs, None

    async def _run(self, jobs: list[_Job]) -> None:
        if not jobs:
            return
        loop = asyncio.get_running_loop()
        rows = sum(len(job.request.inputs) for job in jobs)
        try:
            answers = await loop.run_in_executor(self._executor, self._predict, [job.request for job in jobs])
        except Exception as error:
            self._on_forward(rows, True)
            if len(jobs) == 1:
                logger.exception("a forward failed")
                _settle(jobs[0], error=error)
                return
            for job in jobs:  # one at a time: only the request that fails gets the error
                await self._run([job])
            return
        self._on_forward(rows, False)
        for job, answer in zip(jobs, answers, strict=True):
            _settle(job, answer)


def _settle(job: _Job, answer: list[Prediction] | None = None, error: BaseException | None = None) -> None:
    if job.future.done():  # the client went away
        return
    if error is not None:
        job.future.set_exception(error)
    else:
        job.future.set_result(answer or [])
