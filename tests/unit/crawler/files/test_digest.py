"""Unit tests for crawlfleet.crawler.files.digest: the SHA-256 computed behind the bytes is the
SHA-256 of every byte given, in order, whatever the chunks' sizes and however the calls end."""

from __future__ import annotations

import asyncio
import hashlib
import random

import pytest

from crawlfleet.crawler.files import digest as digest_module
from crawlfleet.crawler.files.digest import HASH_BATCH_BYTES, BackgroundDigest


def chunks_of(data: bytes, seed: int) -> list[bytes]:
    """``data`` cut at random places: tiny pieces, pieces over a batch, pieces in between."""
    rng = random.Random(seed)
    pieces, at = [], 0
    while at < len(data):
        size = rng.choice((1, 17, 4096, 256 * 1024, HASH_BATCH_BYTES + 3))
        pieces.append(data[at : at + size])
        at += size
    return pieces


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_the_digest_is_the_sha256_of_the_bytes_in_order(seed: int) -> None:
    data = random.Random(seed).randbytes(3 * HASH_BATCH_BYTES + 12345)
    digest = BackgroundDigest()
    for piece in chunks_of(data, seed):
        await digest.update(piece)
    assert await digest.hexdigest() == hashlib.sha256(data).hexdigest()


async def test_a_digest_read_midway_goes_on_with_the_later_bytes() -> None:
    first, second = b"a" * (HASH_BATCH_BYTES + 1), b"b" * 10
    digest = BackgroundDigest()
    await digest.update(first)
    assert await digest.hexdigest() == hashlib.sha256(first).hexdigest()
    await digest.update(second)
    assert await digest.hexdigest() == hashlib.sha256(first + second).hexdigest()


async def test_nothing_given_is_the_digest_of_no_bytes() -> None:
    assert await BackgroundDigest().hexdigest() == hashlib.sha256().hexdigest()


async def test_a_caller_cancelled_while_a_batch_hashes_loses_no_byte(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()
    real_update = digest_module._update

    def slow_update(hasher: hashlib._Hash, chunks: list[bytes]) -> None:
        loop.call_soon_threadsafe(started.set)
        asyncio.run_coroutine_threadsafe(release.wait(), loop).result(10)
        real_update(hasher, chunks)

    monkeypatch.setattr(digest_module, "_update", slow_update)
    digest = BackgroundDigest()
    first, second = b"1" * HASH_BATCH_BYTES, b"2" * HASH_BATCH_BYTES
    await digest.update(first)  # its batch hashes in the thread, held up
    await started.wait()
    caller = asyncio.create_task(digest.update(second))  # waits for the first batch
    await asyncio.sleep(0.01)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    release.set()
    assert await digest.hexdigest() == hashlib.sha256(first + second).hexdigest()
