"""A second interrupt cancels the server's shutdown: the app answers what is queued with a 503 and says so, and the
CancelledError tracebacks uvicorn and starlette would log for the cancelled lifespan are dropped (nothing else)."""

from __future__ import annotations

import asyncio
import logging
import sys

from adapterfusion.serving.server import _ForcedExitFilter


def _record(message: str, exc_info=None) -> logging.LogRecord:
    return logging.LogRecord("uvicorn.error", logging.ERROR, __file__, 1, message, None, exc_info)


def test_only_the_cancelled_lifespans_tracebacks_are_dropped() -> None:
    keep = _ForcedExitFilter().filter
    try:
        raise asyncio.CancelledError
    except asyncio.CancelledError:
        cancelled = sys.exc_info()
    try:
        raise ValueError("a real failure")
    except ValueError:
        failure = sys.exc_info()
    assert not keep(_record("Exception in 'lifespan' protocol\n", cancelled))
    assert not keep(_record("Traceback (most recent call last):\n  ...\nasyncio.exceptions.CancelledError\n"))
    assert keep(_record("Exception in 'lifespan' protocol\n", failure))
    assert keep(_record("Traceback (most recent call last):\n  ...\nValueError: a real failure\n"))
    assert keep(_record("Application shutdown failed. Exiting."))
