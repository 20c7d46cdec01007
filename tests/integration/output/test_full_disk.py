"""The output sink on a real file system that fills up (a tmpfs of 256 KiB).

What a full disk must never cost: a torn line, a record twice, a lost record, a dead sink. The
disk is filled by a filler file, the sink writes batches until the disk refuses one, and the
filler is then deleted: every file the sink made durable is read back whole (every line JSON,
every WARC record readable) and holds every page exactly once.
"""

from __future__ import annotations

import asyncio
import errno
import gzip
import json
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from crawlfleet.crawler.harvest.extract import Item
from crawlfleet.crawler.worker.metrics import WorkerMetrics
from crawlfleet.crawler.worker.sinks import DurableFile, OutputSink, PageOutput
from crawlfleet.destinations import parse_destination
from crawlfleet.errors import OutputWriteError
from crawlfleet.output.stores import FolderStore
from tests.support.records import page_record
from tests.support.tmpfs import fill, small_disk

DISK_BYTES = 256 * 1024
#: What the disk keeps free once filled up to this: a few batches, then ENOSPC mid-batch.
FREE_BYTES = 40 * 1024
#: Bigger than a tmpfs page and not a multiple of one, so a batch is cut mid-line.
BODY = b"<html><body>" + b"page text " * 300 + b"</body></html>"


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with small_disk(tmp_path / "disk", DISK_BYTES) as mounted:
        yield mounted


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Durable:
    def __init__(self) -> None:
        self.generations: list[int] = []

    async def __call__(self, generation: int, files: Sequence[DurableFile]) -> None:
        self.generations.append(generation)


def page(number: int) -> PageOutput:
    """A page whose line is long (its text as content): a batch spans several tmpfs pages."""
    record = page_record(f"https://example.com/{number}", BODY, content=BODY.decode())
    items = (Item(source=0, position=0, fields={"n": number}),)
    return PageOutput(
        record, response_headers={"content-type": "text/html"}, body=BODY, items=items
    )


def sink_on(
    root: Path,
    clock: Clock,
    durable: Durable,
    metrics: WorkerMetrics,
    *,
    retry_max_seconds: float = 30,
) -> OutputSink:
    return OutputSink(
        FolderStore(parse_destination(str(root))),
        "w",
        format="warc",
        max_file_bytes=DISK_BYTES * 4,  # sealed by the test only
        max_file_age_seconds=3600,
        max_records_per_file=10_000,
        max_pending_files=4,
        retry_max_seconds=retry_max_seconds,
        on_durable=durable,
        metrics=metrics,
        clock=clock,
    )


def enospc_count(metrics: WorkerMetrics) -> float:
    return metrics.output_write_errors.labels(errno="ENOSPC")._value.get()


def spooled_urls(root: Path) -> list[str]:
    """The URL of every line of the page files in the spool, as on disk: each line must
    parse, and the file must end with a whole line."""
    urls = []
    for path in sorted((root / ".partial").glob("*.jsonl")):
        if path.name.startswith("items-"):
            continue
        text = path.read_text()
        assert text == "" or text.endswith("\n"), f"{path.name} ends mid-line"
        urls += [json.loads(line)["url"] for line in text.splitlines()]
    return urls


async def test_a_full_disk_tears_no_line_and_duplicates_no_record(disk: Path) -> None:
    clock, durable, metrics = Clock(), Durable(), WorkerMetrics()
    sink = sink_on(disk, clock, durable, metrics)
    filler = disk / "filler"
    filler.write_bytes(b"\0" * (DISK_BYTES - FREE_BYTES))

    written: list[int] = []
    batches = (list(range(start, start + 5)) for start in range(0, 1000, 5))
    refused: list[int] = []
    error: OutputWriteError | None = None
    for batch in batches:
        try:
            sink.write([page(n) for n in batch])
        except OutputWriteError as exc:
            refused, error = batch, exc
            break
        written += batch
    assert error is not None, "the disk never filled up"
    assert written, "not one batch fit before the disk was full"

    # One typed error with the errno's name and the file, counted, blocking claims.
    assert error.errno_name == "ENOSPC"
    assert str(error).startswith(f"ENOSPC writing {disk}/.partial/")
    assert str(error).endswith("(No space left on device)")
    assert isinstance(error.__cause__, OSError)
    assert error.__cause__.errno == errno.ENOSPC
    assert sink.blocked
    assert sink.blocked_reason == str(error)
    assert sink.retry_in_seconds is not None
    assert sink.retry_in_seconds > 0
    assert enospc_count(metrics) == 1
    assert metrics.output_blocked._value.get() == 1

    # The refused batch left nothing: the page file holds exactly the whole batches written.
    assert spooled_urls(disk) == [f"https://example.com/{n}" for n in written]
    assert sink.open_records == len(written)

    # Within the backoff the sink refuses at once, without a write (no new error counted).
    with pytest.raises(OutputWriteError):
        sink.write([page(n) for n in refused])
    assert enospc_count(metrics) == 1
    # After it, a new attempt: the disk is still full, so a second error and a longer wait.
    clock.now += sink.write_backoff_seconds
    with pytest.raises(OutputWriteError):
        sink.write([page(n) for n in refused])
    assert enospc_count(metrics) == 2
    assert spooled_urls(disk) == [f"https://example.com/{n}" for n in written]

    # Sealing on a full disk never raises: the whole batches go on to the store.
    sink.tick()
    assert sink.rotate()

    # Space comes back: the kept batch goes in once, and the sink stops blocking.
    filler.unlink()
    clock.now += sink.write_backoff_seconds
    generation = sink.write([page(n) for n in refused])
    assert generation == 1
    assert not sink.blocked
    assert sink.blocked_reason is None
    assert metrics.output_blocked._value.get() == 0
    rest = list(range(refused[-1] + 1, refused[-1] + 6))
    sink.write([page(n) for n in rest])
    assert await sink.drain(10) == []
    await sink.aclose()
    assert sorted(durable.generations) == [0, 1]

    expected = [f"https://example.com/{n}" for n in [*written, *refused, *rest]]
    records = [
        json.loads(line)  # every line parses: none torn
        for path in sorted((disk / "pages").glob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]
    assert [r["url"] for r in records] == expected  # each once, in order
    items = [
        json.loads(line)
        for path in sorted((disk / "items").glob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]
    assert [i["url"] for i in items] == expected
    responses: Counter[str] = Counter()
    for path in sorted((disk / "warc").glob("*.warc.gz")):
        with gzip.open(path) as check:  # the gzip members are whole too
            check.read()
        with path.open("rb") as archive:
            kinds = []
            for record in ArchiveIterator(archive):
                kinds.append(record.rec_type)
                if record.rec_type == "response":
                    responses[record.rec_headers.get_header("WARC-Target-URI")] += 1
                    assert record.content_stream().read() == BODY
        assert kinds[0] == "warcinfo"
        assert kinds.count("warcinfo") == 1
    assert responses == Counter(expected)
    assert list((disk / ".partial").iterdir()) == []


async def test_a_disk_full_from_the_first_batch_opens_no_file_and_recovers(disk: Path) -> None:
    """The generation's very first batch is refused: its warcinfo is written with the retry."""
    clock, durable, metrics = Clock(), Durable(), WorkerMetrics()
    sink = sink_on(disk, clock, durable, metrics)
    filler = disk / "filler"
    fill(filler)
    with pytest.raises(OutputWriteError, match=r"^ENOSPC writing "):
        sink.write([page(0)])
    assert sink.open_records == 0
    spooled = {p.name: p.stat().st_size for p in (disk / ".partial").iterdir()}
    assert all(size == 0 for size in spooled.values()), spooled  # nothing half-written
    assert not any(name.startswith("items-") for name in spooled)  # opened for it, removed

    filler.unlink()
    clock.now += sink.write_backoff_seconds
    assert sink.write([page(0)]) == 0
    assert await sink.drain(10) == []
    await sink.aclose()
    (archive,) = (disk / "warc").glob("*.warc.gz")
    with archive.open("rb") as stream:
        kinds = [record.rec_type for record in ArchiveIterator(stream)]
    assert kinds == ["warcinfo", "response", "request"]
    (items,) = (disk / "items").glob("*.jsonl")
    assert [json.loads(line)["fields"] for line in items.read_text().splitlines()] == [{"n": 0}]


async def test_a_full_disk_while_sealing_keeps_the_generation_until_it_is_durable(
    tmp_path: Path,
) -> None:
    """The store's own step fails too (no inode left for the pages folder): the generation is
    sealed and retried, never raised out of rotate() nor lost, and acked once it is durable."""
    clock, durable, metrics = Clock(), Durable(), WorkerMetrics()
    with small_disk(tmp_path / "disk", DISK_BYTES, inodes=16) as disk:
        sink = sink_on(disk, clock, durable, metrics, retry_max_seconds=0.05)
        sink.write([page(0)])
        fillers: list[Path] = []
        full = OSError()
        while len(fillers) < 16:  # every inode used: the pages folder cannot be created
            path = disk / f"filler-{len(fillers)}"
            try:
                path.touch()
            except OSError as exc:
                full = exc
                break
            fillers.append(path)
        assert full.errno == errno.ENOSPC
        assert sink.rotate()  # never raises; the sealed generation retries in the background
        for _ in range(500):
            if sink.blocked:
                break
            await asyncio.sleep(0.01)
        assert sink.blocked_reason is not None
        assert sink.blocked_reason.startswith("making pages/")
        assert "No space left on device" in sink.blocked_reason
        assert durable.generations == []
        assert metrics.output_failures._value.get() >= 1
        for path in fillers:
            path.unlink()
        assert await sink.drain(60) == []
        assert durable.generations == [0]
        assert not sink.blocked
        await sink.aclose()
