"""The worker's periodic tasks (crawler/worker/flow.py ``every``): they never die, and an
outage of Redis is one warning a round, not a traceback."""

from __future__ import annotations

import asyncio
import logging

import pytest

from crawlfleet.crawler.worker.flow import every
from crawlfleet.errors import FrontierUnavailable


async def _rounds(failure: Exception, caplog: pytest.LogCaptureFixture) -> int:
    """Run a task that always fails with ``failure`` until it has been called three times."""
    closed = asyncio.Event()
    calls = 0

    async def heartbeat() -> None:
        nonlocal calls
        calls += 1
        if calls == 3:
            closed.set()
        raise failure

    with caplog.at_level(logging.WARNING, logger="crawlfleet.crawler.worker.flow"):
        await asyncio.wait_for(every(0.001, heartbeat, closed), timeout=5)
    return calls


async def test_redis_unavailable_is_a_warning_a_round_without_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls = await _rounds(FrontierUnavailable("Redis unavailable: TTL exhausted."), caplog)
    assert calls == 3  # it kept going
    assert [r.levelno for r in caplog.records] == [logging.WARNING] * 3
    assert all(r.exc_info is None for r in caplog.records)
    assert "heartbeat failed, tried again later: Redis unavailable" in caplog.records[0].message


async def test_any_other_error_is_logged_with_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls = await _rounds(RuntimeError("a bug"), caplog)
    assert calls == 3
    assert [r.levelno for r in caplog.records] == [logging.ERROR] * 3
    assert all(r.exc_info is not None for r in caplog.records)
