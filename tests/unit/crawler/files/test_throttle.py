"""Unit tests for crawlfleet.crawler.files.download.Throttle: the token bucket's rate, its
burst, and its fairness between downloads that share it, on a simulated clock."""

from __future__ import annotations

import asyncio

import pytest

from crawlfleet.crawler.files.download import Throttle


class Clock:
    """A clock that only moves when a throttle sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def throttle(rate: int, clock: Clock) -> Throttle:
    return Throttle(rate, clock=clock, sleep=clock.sleep)


async def test_no_cap_never_sleeps() -> None:
    clock = Clock()
    bucket = throttle(0, clock)
    for _ in range(100):
        await bucket.take(1 << 20)
    assert clock.sleeps == []


def test_a_negative_rate_is_refused() -> None:
    with pytest.raises(ValueError, match="bytes_per_second"):
        Throttle(-1)


@pytest.mark.parametrize("chunk", [1, 1000, 16 * 1024, 300_000])
async def test_the_rate_holds_from_the_first_byte(chunk: int) -> None:
    clock = Clock()
    bucket = throttle(100_000, clock)
    total = 0
    while total < 1_000_000:
        await bucket.take(chunk)
        total += chunk
    # The bucket starts empty: every byte is paid at the rate, none comes free.
    assert clock.now == pytest.approx(total / 100_000)


async def test_a_pause_buys_a_quarter_second_of_burst_at_most() -> None:
    clock = Clock()
    bucket = throttle(100_000, clock)
    await bucket.take(100_000)
    clock.now += 60.0  # idle a minute
    before = clock.now
    await bucket.take(25_000)  # the burst: free
    assert clock.now == before
    await bucket.take(50_000)  # the rest is paid at the rate
    assert clock.now - before == pytest.approx(0.5)


async def test_downloads_sharing_a_throttle_share_its_rate() -> None:
    bucket = Throttle(4_000_000)  # the event loop's clock: sleepers really run side by side
    loop = asyncio.get_running_loop()
    started = loop.time()
    taken = [0, 0, 0]

    async def download(index: int) -> None:
        while loop.time() - started < 0.5:
            await bucket.take(16 * 1024)
            taken[index] += 16 * 1024

    await asyncio.gather(*(download(index) for index in range(3)))
    assert sum(taken) / (loop.time() - started) == pytest.approx(4_000_000, rel=0.1)
    # No taker starves: each gets a fair share give or take what a busy machine's scheduling
    # does to three sleepers in 0.5 s (0.79 of the largest share seen under a load of 10).
    assert min(taken) >= 0.5 * max(taken)


async def test_it_sleeps_on_the_event_loop_clock_by_default() -> None:
    bucket = Throttle(1_000_000)
    loop = asyncio.get_running_loop()
    started = loop.time()
    for _ in range(5):
        await bucket.take(20_000)
    assert loop.time() - started == pytest.approx(0.1, abs=0.05)
