"""File downloads (crawlfleet/crawler/files/download.py) against the file site over loopback.

Each test downloads from one of FileSite's hosts into a real local part and checks both ends:
the ``FileResult`` and the part on disk, and the site's request log (the ``Range`` and
``If-Range`` each request carried, the bytes each response sent), which is how "resumed from
the middle", "restarted from zero" and "never read the body" are proven rather than assumed.
Digests are the site's own (:meth:`FileSite.sha256`, computed from the generator).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
import sys
import time
import tracemalloc
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from crawlfleet.crawler.fetching.failures import FailureClass
from crawlfleet.crawler.fetching.fetch import Fetcher, FetchSettings
from crawlfleet.crawler.fetching.safety import AddressGuard
from crawlfleet.crawler.fetching.transport import STREAM_READ_BYTES
from crawlfleet.crawler.files import download as download_module
from crawlfleet.crawler.files.download import FileRequest, FileResult, Throttle, fetch_file
from crawlfleet.crawler.files.parts import WRITE_BEHIND_BYTES, LocalParts, PartWriter, content_key
from crawlfleet.testsite.files import FileKind, FileSite, FileSiteConfig, file_etag
from tests.support.specs import job_spec

MIB = 1 << 20
SIZE = 3 * MIB + 12345  # not a multiple of a chunk, a block or a part
PART_SIZE = 1 * MIB
JOB: dict[str, Any] = {
    "fetch": {"connectTimeoutSeconds": 1.0, "readTimeoutSeconds": 2.0, "totalTimeoutSeconds": 2.0},
    "retry": {"backoffBaseSeconds": 0.01, "backoffFactor": 2.0, "backoffMaxSeconds": 0.1},
    "scope": {"allowPrivateNetworks": True},
}


@dataclass(frozen=True, slots=True)
class Limits:
    """A ``files`` rule's bounds, as ``FileRule`` carries them."""

    max_bytes: int = 1 << 40
    min_bytes: int | None = None


@pytest.fixture(scope="module")
def site() -> Iterator[FileSite]:
    with FileSite(FileSiteConfig(default_size=SIZE)) as running:
        yield running


@pytest.fixture(autouse=True)
def fresh(site: FileSite) -> None:
    site.reset()
    site.throttle(0)


@pytest.fixture
async def fetcher() -> AsyncIterator[Fetcher]:
    # A total timeout of 2 s that downloads ignore (the throttled one takes longer): they
    # have per-read timeouts only.
    made = Fetcher(FetchSettings.from_spec(job_spec(JOB)))
    yield made
    await made.aclose()


def request_for(
    url: str,
    part: PartWriter,
    *,
    limits: Limits | None = None,
    throttle: Throttle | None = None,
    stop: asyncio.Event | None = None,
    stop_at: int | None = None,
    durable: list[int] | None = None,
) -> FileRequest:
    """A request into ``part``; ``stop_at`` sets the stop once the part holds that many bytes,
    and ``durable`` collects the part's durable offset after every chunk."""
    stop = stop or asyncio.Event()

    def progress(held: int) -> None:
        if durable is not None:
            durable.append(part.state.offset)
        if stop_at is not None and held >= stop_at:
            stop.set()

    return FileRequest(
        url=url,
        rule=limits or Limits(),
        part=part,
        part_size=PART_SIZE,
        throttle=throttle,
        stop=stop,
        on_progress=progress,
    )


async def download(
    fetcher: Fetcher, root: Path, url: str, **options: Any
) -> tuple[FileResult, PartWriter]:
    """One attempt, as a worker makes it: open the part (a new LocalParts: another process),
    download, and close the part unless the file is complete (then the test finishes it)."""
    part = await LocalParts(root).open(url)
    result = await fetch_file(fetcher, url, request_for(url, part, **options))
    if result.failure is not None or result.stopped:
        await part.close()  # it stays for the next attempt
    return result, part


def sent(site: FileSite, kind: FileKind) -> int:
    return sum(record.bytes_sent for record in site.requests(kind))


def ranges(site: FileSite, kind: FileKind) -> list[tuple[str | None, str | None]]:
    return [(record.range_header, record.if_range) for record in site.requests(kind)]


async def finished(part: PartWriter, result: FileResult, root: Path) -> bytes:
    """Finish a downloaded part; its stored bytes (checked against the result)."""
    assert result.sha256 is not None
    stored = await part.finish(result.sha256)
    data = (root / stored.key).read_bytes()
    assert (stored.key, stored.size, len(data)) == (content_key(result.sha256), result.size, SIZE)
    return data


# -- a whole file -----------------------------------------------------------------------------


async def test_a_file_streams_whole_into_its_part(
    fetcher: Fetcher, site: FileSite, tmp_path: Path
) -> None:
    url = site.file_url("ranges", "clip.mp4")
    part = await LocalParts(tmp_path).open(url)
    result = await fetch_file(fetcher, url, request_for(url, part))

    assert result.failure is None, result.message
    assert (result.status, result.size, result.wire_bytes) == (200, SIZE, SIZE)
    assert result.sha256 == site.sha256("clip.mp4")
    assert (result.sniffed, result.resumed_from, result.restarts, result.stopped) == (
        "mp4",
        0,
        [],
        False,
    )
    assert result.etag == file_etag("clip.mp4", SIZE)
    assert result.content_type == "video/mp4"
    assert ranges(site, "ranges") == [(None, None)]
    data = await finished(part, result, tmp_path)
    assert hashlib.sha256(data).hexdigest() == site.sha256("clip.mp4")


async def test_a_file_without_a_length_is_taken_as_it_comes(
    fetcher: Fetcher, site: FileSite, tmp_path: Path
) -> None:
    result, _ = await download(fetcher, tmp_path, site.file_url("lengthless", "doc.pdf"))
    assert result.failure is None, result.message
    assert (result.size, result.sha256) == (SIZE, site.sha256("doc.pdf"))
    assert "content-length" not in result.headers


# -- resume -----------------------------------------------------------------------------------


async def test_a_reset_mid_body_resumes_with_a_range(
    fetcher: Fetcher, site: FileSite, tmp_path: Path
) -> None:
    url = site.file_url("flaky", "clip.webm")
    result, _ = await download(fetcher, tmp_path, url)

    assert result.failure is None, result.message
    assert result.sha256 == site.sha256("clip.webm")
    assert (result.size, result.attempts, result.restarts) == (SIZE, 2, [])
    [first, second] = site.requests("flaky")
    assert (first.range_header, first.completed) == (None, False)
    received = SIZE - second.bytes_sent  # what the reset left us (unread bytes die with it)
    assert 0 < received <= first.bytes_sent
    assert (second.status, second.completed) == (206, True)
    assert second.range_header == f"bytes={received}-"  # from the last byte received
    assert second.if_range == file_etag("clip.webm", SIZE)
    assert result.wire_bytes == SIZE  # every byte came once
    assert sent(site, "flaky") <= 1.2 * SIZE


async def test_a_stopped_download_is_resumed_by_another_process(
    fetcher: Fetcher, site: FileSite, tmp_path: Path
) -> None:
    url = site.file_url("ranges", "clip.mp4")
    site.throttle(8 * MIB)  # slow enough that the stop lands mid-body
    durable: list[int] = []
    stopped, part = await download(fetcher, tmp_path, url, stop_at=SIZE // 2, durable=durable)

    assert (stopped.stopped, stopped.failure, stopped.sha256) == (True, None, None)
    assert SIZE // 2 <= stopped.size < SIZE
    # Checkpoints fell on part boundaries while streaming, and at the stop on the last byte.
    assert sorted(set(durable)) == [0, PART_SIZE]
    assert part.state.offset == stopped.size
    assert (tmp_path / "files" / ".parts").is_dir()

    site.throttle(0)
    result, part = await download(fetcher, tmp_path, url)  # a new LocalParts, as a new worker
    assert result.failure is None, result.message
    assert (result.resumed_from, result.size, result.restarts) == (stopped.size, SIZE, [])
    assert result.sha256 == site.sha256("clip.mp4")
    assert ranges(site, "ranges")[-1] == (
        f"bytes={stopped.size}-",
        file_etag("clip.mp4", SIZE),
    )
    # The resumed request carried the rest and only the rest. (What the first one handed to
    # the socket past the stop depends on how long the stop took to close it on a loaded
    # machine: kernel buffers, not the download, so the 1.2x bound is the 200 MB tests'.)
    resumed = site.requests("ranges")[-1]
    assert (resumed.bytes_sent, resumed.completed) == (SIZE - stopped.size, True)
    await finished(part, result, tmp_path)


async def test_a_download_stopped_before_it_began_sends_nothing(
    fetcher: Fetcher, site: FileSite, tmp_path: Path
) -> None:
    stop = asyncio.Event()
    stop.set()
    result, _ = await download(fetcher, tmp_path, site.file_url("ranges", "clip.mp4"), stop=stop)
    assert (result.stopped, result.failure, result.attempts, result.size) == (True, None, 0, 0)
    assert site.requests() == []


async def test_a_200_to_a_range_request_restarts_cleanly(
    fetcher: Fetcher, site: FileSite, tmp_path: Path
) -> None:
    url = site.file_url("norange", "doc.pdf")
    site.throttle(8 * MIB)
    stopped, _ = await download(fetcher, tmp_path, url, stop_at=SIZE // 3)
    assert stopped.stopped
    site.throttle(0)

    result, part = await download(fetcher, tmp_path, url)
    assert result.failure is None, result.message
    assert (result.status, result.restarts, result.size) == (200, ["no_range"], SIZE)
    assert result.sha256 == site.sha256("doc.pdf")  # the whole body, nothing spliced
    assert ranges(site, "norange")[-1][0] == f"bytes={stopped.size}-"
    assert part.state.restarts == 1
    await finished(part, result, tmp_path)


async def test_a_changed_file_restarts_from_zero(
    fetcher: Fetcher, site: FileSite, tmp_path: Path
) -> None:
    url = site.file_url("changing", "clip.mp4")
    site.throttle(8 * MIB)
    stopped, _ = await download(fetcher, tmp_path, url, stop_at=SIZE // 3)
    assert stopped.etag == file_etag("clip.mp4", SIZE, 0)
    site.throttle(0)

    result, part = await download(fetcher, tmp_path, url)
    assert result.failure is None, result.message
    assert site.version("changing", "clip.mp4") == 1
    assert (result.status, result.restarts) == (200, ["validator_changed"])
    assert result.sha256 == site.sha256("clip.mp4", version=1)
    assert result.etag == file_etag("clip.mp4", SIZE, 1)
    assert ranges(site, "changing")[-1] == (
        f"bytes={stopped.size}-",
        file_etag("clip.mp4", SIZE, 0),
    )
    await finished(part, result, tmp_path)


async def test_a_part_complete_before_its_process_ended_is_confirmed_not_fetched_again(
    fetcher: Fetcher, site: FileSite, tmp_path: Path
) -> None:
    url = site.file_url("ranges", "whole.pdf", 100_000)
    first, part = await download(fetcher, tmp_path, url)
    assert first.failure is None, first.message
    await part.close()  # the process ends before finish: the part holds the whole file
    site.reset()

    result, part = await download(fetcher, tmp_path, url)
    assert result.failure is None, result.message
    assert (result.status, result.restarts, result.size) == (416, [], 100_000)
    assert result.resumed_from == 100_000
    assert result.sha256 == site.sha256("whole.pdf", 100_000)  # hashed from the part
    assert (result.content_type, result.sniffed) == ("application/pdf", "pdf")  # not the 416's
    assert ranges(site, "ranges") == [("bytes=100000-", file_etag("whole.pdf", 100_000))]
    assert sent(site, "ranges") == 0
    stored = await part.finish(result.sha256)
    assert stored.size == 100_000


async def test_a_416_restarts_from_zero(fetcher: Fetcher, site: FileSite, tmp_path: Path) -> None:
    url = site.file_url("ranges", "data.zip", 100_000)
    part = await LocalParts(tmp_path).open(url)
    part.state.etag = file_etag("data.zip", 100_000)  # the right version, but too many bytes
    await part.write(b"\0" * 150_000)
    await part.checkpoint()
    await part.close()

    result, part = await download(fetcher, tmp_path, url)
    assert result.failure is None, result.message
    assert (result.status, result.restarts, result.size) == (200, ["unsatisfiable"], 100_000)
    assert result.sha256 == site.sha256("data.zip", 100_000)
    assert [record.status for record in site.requests("ranges")] == [416, 200]
    assert ranges(site, "ranges")[1] == (None, None)  # asked again without a range


async def test_a_part_without_a_validator_restarts(
    fetcher: Fetcher, site: FileSite, tmp_path: Path
) -> None:
    url = site.file_url("ranges", "anim.gif", 100_000)
    part = await LocalParts(tmp_path).open(url)
    await part.write(b"GIF89a" + b"\0" * 1000)
    await part.checkpoint()
    await part.close()

    result, _ = await download(fetcher, tmp_path, url)
    assert result.failure is None, result.message
    assert (result.restarts, result.sha256) == (["no_validator"], site.sha256("anim.gif", 100_000))
    assert ranges(site, "ranges") == [(None, None)]


# -- verification -----------------------------------------------------------------------------


async def test_an_empty_200_is_too_small_and_the_next_attempt_succeeds(
    fetcher: Fetcher, site: FileSite, tmp_path: Path
) -> None:
    url = site.file_url("empty_once", "photo.png", 100_000)
    empty, _ = await download(fetcher, tmp_path, url)
    assert (empty.status, empty.failure, empty.size) == (200, FailureClass.FILE_TOO_SMALL, 0)
    assert "below the minimum" in empty.message

    result, _ = await download(fetcher, tmp_path, url)
    assert result.failure is None, result.message
    assert result.sha256 == site.sha256("photo.png", 100_000)


async def test_an_html_error_page_is_a_type_mismatch(
    fetcher: Fetcher, site: FileSite, tmp_path: Path
) -> None:
    result, part = await download(fetcher, tmp_path, site.file_url("html_error", "clip.mp4"))
    assert (result.status, result.failure) == (200, FailureClass.FILE_TYPE_MISMATCH)
    assert (result.sniffed, result.sha256) == ("html", None)
    assert part.state.offset == 0  # the page is not kept for a resume


async def test_the_type_check_can_be_turned_off(
    fetcher: Fetcher, site: FileSite, tmp_path: Path
) -> None:
    url = site.file_url("html_error", "clip.mp4")
    part = await LocalParts(tmp_path).open(url)
    request = request_for(url, part, limits=Limits(min_bytes=1))
    unchecked = FileRequest(**{**_fields(request), "verify_type": False})
    result = await fetch_file(fetcher, url, unchecked)
    assert result.failure is None, result.message
    assert result.sniffed == "html"


def _fields(request: FileRequest) -> dict[str, Any]:
    return {name: getattr(request, name) for name in FileRequest.__dataclass_fields__}


async def test_a_declared_length_over_max_bytes_is_refused_before_the_body(
    fetcher: Fetcher, site: FileSite, tmp_path: Path
) -> None:
    url = site.file_url("ranges", "clip.mp4")
    result, _ = await download(fetcher, tmp_path, url, limits=Limits(max_bytes=SIZE - 1))
    assert (result.status, result.failure) == (200, FailureClass.FILE_TOO_LARGE)
    assert f"declares {SIZE} bytes" in result.message
    assert (result.wire_bytes, result.size, result.attempts) == (0, 0, 1)


async def test_a_body_over_max_bytes_is_cut_off_while_streaming(
    fetcher: Fetcher, site: FileSite, tmp_path: Path
) -> None:
    url = site.file_url("lengthless", "clip.mp4")
    result, _ = await download(fetcher, tmp_path, url, limits=Limits(max_bytes=MIB))
    assert result.failure is FailureClass.FILE_TOO_LARGE
    assert result.size <= MIB
    assert result.wire_bytes <= MIB + STREAM_READ_BYTES  # stopped within a read of the bound


# -- the address guard ------------------------------------------------------------------------


async def test_the_address_guard_applies_to_a_download(site: FileSite, tmp_path: Path) -> None:
    settings = FetchSettings.from_spec(job_spec({**JOB, "scope": {}}))
    guarded = Fetcher(settings, guard=AddressGuard(allow_private=False))
    try:
        result, _ = await download(guarded, tmp_path, site.file_url("ranges", "clip.mp4"))
    finally:
        await guarded.aclose()
    assert result.failure is FailureClass.FORBIDDEN_ADDRESS
    assert site.requests() == []


class RawServer:
    """A loopback server that writes ``answers[n]`` for its request ``n`` (the last repeats)
    and closes: what the file site never does (redirects, a body cut short without
    validators). ``heads`` are the requests as they came."""

    def __init__(self, *answers: bytes) -> None:
        self.answers = answers
        self.heads: list[bytes] = []
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> str:
        self._server = await asyncio.start_server(self._answer, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/get/it.pdf"

    async def __aexit__(self, *_: object) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.heads.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(self.answers[min(len(self.heads), len(self.answers)) - 1])
        await writer.drain()
        writer.close()


def redirect(target: str) -> bytes:
    return f"HTTP/1.1 302 Found\r\nLocation: {target}\r\nContent-Length: 0\r\n\r\n".encode()


async def test_a_redirect_is_followed_into_the_file(
    fetcher: Fetcher, site: FileSite, tmp_path: Path
) -> None:
    target = site.file_url("ranges", "doc.pdf", 100_000)
    async with RawServer(redirect(target)) as url:
        result, _ = await download(fetcher, tmp_path, url)
    assert result.failure is None, result.message
    assert (result.final_url, result.redirects, result.attempts) == (target, [target], 2)
    assert result.sha256 == site.sha256("doc.pdf", 100_000)


async def test_the_address_guard_applies_to_a_downloads_redirects(
    fetcher: Fetcher, tmp_path: Path
) -> None:
    async with RawServer(redirect("http://169.254.169.254/latest/meta-data/video.mp4")) as url:
        result, part = await download(fetcher, tmp_path, url)
    assert result.failure is FailureClass.FORBIDDEN_ADDRESS
    assert (result.status, part.state.offset) == (302, 0)


async def test_a_body_cut_short_without_validators_restarts_on_the_retry(
    fetcher: Fetcher, tmp_path: Path
) -> None:
    body = b"%PDF-1.7\n" + bytes(range(256)) * 400
    head = f"HTTP/1.1 200 OK\r\nContent-Type: application/pdf\r\nContent-Length: {len(body)}"
    server = RawServer(
        f"{head}\r\n\r\n".encode() + body[: len(body) // 2],  # then the connection closes
        f"{head}\r\n\r\n".encode() + body,
    )
    async with server as url:
        result, _ = await download(fetcher, tmp_path, url)
    assert result.failure is None, result.message
    assert (result.restarts, result.attempts) == (["no_validator"], 2)
    assert result.sha256 == hashlib.sha256(body).hexdigest()
    assert len(server.heads) == 2
    assert all(b"range:" not in head.lower() for head in server.heads)  # nothing to splice


PIECES_BODY = b"%PDF-1.7\n" + bytes(range(256)) * 40


def piece(start: int, end: int, body: bytes = PIECES_BODY) -> bytes:
    """A 206 with bytes ``[start, end)`` of ``body``, whatever was asked."""
    return (
        f'HTTP/1.1 206 Partial Content\r\nContent-Type: application/pdf\r\nETag: "p"\r\n'
        f"Content-Range: bytes {start}-{end - 1}/{len(body)}\r\nContent-Length: {end - start}"
        "\r\n\r\n"
    ).encode() + body[start:end]


async def test_a_range_served_in_pieces_is_asked_for_the_rest(
    fetcher: Fetcher, tmp_path: Path
) -> None:
    total = len(PIECES_BODY)
    server = RawServer(piece(0, 4000), piece(4000, 8000), piece(8000, total))
    async with server as url:
        result, _ = await download(fetcher, tmp_path, url)
    assert result.failure is None, result.message
    assert (result.size, result.restarts, result.attempts) == (total, [], 3)
    assert result.sha256 == hashlib.sha256(PIECES_BODY).hexdigest()
    assert [b"range: bytes=4000-" in head.lower() for head in server.heads] == [False, True, False]
    assert b'if-range: "p"' in server.heads[2].lower()


async def test_pieces_are_asked_a_bounded_number_of_times_per_attempt(
    fetcher: Fetcher, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(download_module, "MAX_PIECES_PER_ATTEMPT", 2)
    total = len(PIECES_BODY)
    async with RawServer(piece(0, 4000), piece(4000, 8000), piece(8000, total)) as url:
        cut, _ = await download(fetcher, tmp_path, url)
        assert (cut.failure, cut.size, cut.attempts) == (FailureClass.FILE_SIZE_MISMATCH, 8000, 2)
        result, _ = await download(fetcher, tmp_path, url)  # the next attempt goes on
    assert result.failure is None, result.message
    assert (result.resumed_from, result.size) == (8000, total)
    assert result.sha256 == hashlib.sha256(PIECES_BODY).hexdigest()


async def test_a_hop_check_refuses_a_redirect(
    fetcher: Fetcher, site: FileSite, tmp_path: Path
) -> None:
    async def robots(url: str) -> tuple[FailureClass, str] | None:
        return FailureClass.ROBOTS_DISALLOWED, f"{url} is disallowed"

    async with RawServer(redirect(site.file_url("ranges", "doc.pdf"))) as url:
        part = await LocalParts(tmp_path).open(url)
        result = await fetch_file(fetcher, url, request_for(url, part), check_hop=robots)
    assert result.failure is FailureClass.ROBOTS_DISALLOWED
    assert site.requests() == []


# -- bandwidth --------------------------------------------------------------------------------


async def test_the_throttle_holds_the_rate(
    fetcher: Fetcher, site: FileSite, tmp_path: Path
) -> None:
    rate = 5 * MIB // 2  # 2.4 s for the file: past the total timeout, which does not apply
    url = site.file_url("ranges", "clip.mp4", 6 * MIB)
    started = time.monotonic()
    result, _ = await download(fetcher, tmp_path, url, throttle=Throttle(rate))
    took = time.monotonic() - started
    assert result.failure is None, result.message
    assert took == pytest.approx(6 * MIB / rate, rel=0.2)


# -- memory -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site_process() -> Iterator[dict[str, str]]:
    """The file site in a process of its own (``python -m crawlfleet.testsite --files``), so
    that what this process allocates is the download's alone: the base URL of each kind."""
    with subprocess.Popen(
        [sys.executable, "-m", "crawlfleet.testsite", "--files"],
        stdout=subprocess.PIPE,
        text=True,
    ) as process:
        try:
            assert process.stdout is not None
            bases: dict[str, str] = json.loads(process.stdout.readline())["bases"]
            yield bases
        finally:
            process.terminate()
            process.wait(timeout=10)


async def test_a_download_holds_a_chunk_and_its_write_buffer_not_the_file(
    fetcher: Fetcher, site_process: dict[str, str], tmp_path: Path
) -> None:
    size = 48 * MIB
    url = f"{site_process['ranges']}/files/clip.mp4?size={size}"
    tracemalloc.start()
    try:
        result, _ = await download(fetcher, tmp_path, url)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.failure is None, result.message
    assert result.size == size
    # The part's two 2 MiB write buffers (one filling, one written behind; the digest's
    # batches are the same chunks), a chunk, aiohttp's read buffer (its flow control stops
    # reading the socket past a high-water mark): a few MiB, whatever the file's size.
    assert peak < 2 * WRITE_BEHIND_BYTES + 2 * MIB
