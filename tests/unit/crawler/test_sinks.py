"""OutputSink on a real folder: spooled, sealed by size, age and count, durable, then handed on.

Every test writes through a :class:`FolderStore` on the test's own disk (fsync and rename for
real); a failing store is a real one whose folder is blocked by a file in its way.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import hashlib
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from warcio.archiveiterator import ArchiveIterator

from crawlfleet.crawler.harvest.extract import Item
from crawlfleet.crawler.worker.metrics import WorkerMetrics
from crawlfleet.crawler.worker.revisits import (
    RevisitProfile,
    WarcRevisitRef,
    body_digest,
    payload_digest,
)
from crawlfleet.crawler.worker.sinks import (
    DurableFile,
    FileRecord,
    OutputSink,
    PageOutput,
    PageRecord,
    safe_file_token,
)
from crawlfleet.destinations import parse_destination
from crawlfleet.errors import ConfigError
from crawlfleet.output.stores import FolderStore
from tests.support.records import page_record
from tests.support.specs import job_spec

BODY = b"<html><head><title>Hello</title></head><body>" + b"x" * 200 + b"</body></html>"


def record(url: str = "https://example.com/a", **changes: object) -> PageRecord:
    return page_record(url, BODY, **changes)


class Durable:
    """The sink's callback, recording what became durable (and failing when told to)."""

    def __init__(self, failures: int = 0) -> None:
        self.calls: list[tuple[int, list[DurableFile]]] = []
        self.failures = failures

    async def __call__(self, generation: int, files: Sequence[DurableFile]) -> None:
        if self.failures:
            self.failures -= 1
            raise RuntimeError("Redis is away")
        self.calls.append((generation, list(files)))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def sink_for(
    root: Path,
    worker: str = "w",
    durable: Durable | None = None,
    *,
    clock: Clock | None = None,
    max_records_per_file: int = 10_000,
    max_pending_files: int = 4,
    metrics: WorkerMetrics | None = None,
    **output: Any,
) -> OutputSink:
    """The sink a job's ``output`` section (camelCase, model defaults) asks for, on a folder."""
    spec = job_spec({"output": output}).output
    return OutputSink(
        FolderStore(parse_destination(str(root))),
        worker,
        format=spec.format,
        max_file_bytes=spec.max_file_bytes,
        max_file_age_seconds=spec.max_file_age_seconds,
        max_records_per_file=max_records_per_file,
        max_pending_files=max_pending_files,
        retry_max_seconds=0.05,
        on_durable=durable or Durable(),
        metrics=metrics,
        clock=clock or Clock(),
    )


def read_lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


def pages(root: Path) -> list[Path]:
    return sorted((root / "pages").glob("*.jsonl")) if (root / "pages").exists() else []


async def test_records_are_durable_only_once_sealed_and_then_handed_on(tmp_path: Path) -> None:
    durable = Durable()
    sink = sink_for(tmp_path, "worker-1", durable)
    first, second = record(), record("https://example.com/b", status=None, failure_class="timeout")

    assert sink.write([PageOutput(first)]) == 0
    assert sink.write([PageOutput(second)]) == 0
    assert pages(tmp_path) == []  # spooled, not durable: nothing a reader may count
    assert durable.calls == []
    assert sink.open_records == 2

    assert await sink.drain(5) == []
    (path,) = pages(tmp_path)
    assert path.name.startswith("worker-1-")
    assert path.name.endswith("-00000.jsonl")
    lines = read_lines(path)
    # content: none writes neither content field, a page no sitemap listed has no lastmod,
    # and one of a job without recrawl rules no change
    content = {"content", "content_truncated", "lastmod", "change"}
    without_content = [
        {k: v for k, v in dataclasses.asdict(r).items() if k not in content}
        for r in (first, second)
    ]
    assert lines == without_content
    assert set(lines[0]) == {f.name for f in dataclasses.fields(PageRecord)} - content
    ((generation, (file,)),) = durable.calls
    assert generation == 0
    content = path.read_bytes()
    assert file == DurableFile(
        f"pages/{path.name}", len(content), hashlib.sha256(content).hexdigest(), 2
    )
    assert list((tmp_path / ".partial").iterdir()) == []  # renamed into place, nothing left
    await sink.aclose()
    with pytest.raises(ValueError, match="closed"):
        sink.write([PageOutput(record())])


async def test_files_seal_by_size_in_order_and_nothing_is_lost(tmp_path: Path) -> None:
    durable = Durable()
    line_bytes = len(record().to_json().encode()) + 1
    sink = sink_for(tmp_path, durable=durable, maxFileBytes=line_bytes * 2)
    numbers = [sink.write([PageOutput(record(f"https://example.com/{i}"))]) for i in range(5)]
    assert numbers == [0, 0, 1, 1, 2]
    await sink.drain(5)
    files = pages(tmp_path)
    assert [len(read_lines(f)) for f in files] == [2, 2, 1]
    urls = [line["url"] for f in files for line in read_lines(f)]
    assert urls == [f"https://example.com/{i}" for i in range(5)]
    assert sorted(generation for generation, _ in durable.calls) == [0, 1, 2]


async def test_a_file_seals_at_its_age_and_at_its_record_count(tmp_path: Path) -> None:
    clock = Clock()
    durable = Durable()
    sink = sink_for(tmp_path, durable=durable, clock=clock, maxFileAgeSeconds=30)
    sink.write([PageOutput(record())])
    clock.now += 29.9
    sink.tick()
    await asyncio.sleep(0.05)
    assert durable.calls == []
    clock.now += 0.1
    sink.tick()
    await sink.drain(5)
    assert [generation for generation, _ in durable.calls] == [0]

    counted = sink_for(tmp_path / "counted", durable=Durable(), max_records_per_file=3)
    assert [counted.write([PageOutput(record())] * 2) for _ in range(3)] == [0, 0, 1]
    await counted.drain(5)
    assert [len(read_lines(f)) for f in pages(tmp_path / "counted")] == [4, 2]


async def test_a_failing_destination_blocks_keeps_the_file_and_retries(tmp_path: Path) -> None:
    """A file where the pages folder belongs: every rename fails until it is moved away."""
    tmp_path.joinpath("pages").write_text("in the way")
    metrics = WorkerMetrics()
    durable = Durable()
    sink = sink_for(tmp_path, durable=durable, metrics=metrics)
    sink.write([PageOutput(record())])
    assert sink.rotate()
    for _ in range(100):
        if sink.blocked:
            break
        await asyncio.sleep(0.01)
    assert sink.blocked
    assert metrics.output_failures._value.get() >= 1
    assert metrics.output_blocked._value.get() == 1
    assert durable.calls == []
    assert len(list((tmp_path / ".partial").iterdir())) == 1  # kept, not dropped

    tmp_path.joinpath("pages").unlink()
    assert await sink.drain(5) == []
    assert not sink.blocked
    assert len(durable.calls) == 1
    assert len(read_lines(pages(tmp_path)[0])) == 1
    assert metrics.output_blocked._value.get() == 0
    assert metrics.output_files._value.get() == 1


async def test_too_many_pending_files_block_until_one_is_durable(tmp_path: Path) -> None:
    tmp_path.joinpath("pages").write_text("in the way")
    sink = sink_for(tmp_path, max_pending_files=2)
    for _ in range(2):
        sink.write([PageOutput(record())])
        assert sink.rotate()
    sink.write([PageOutput(record())])
    assert sink.blocked
    assert not sink.rotate()  # the third keeps taking what is in flight
    assert sink.write([PageOutput(record())]) == 2
    tmp_path.joinpath("pages").unlink()
    await sink.drain(5)
    assert [len(read_lines(f)) for f in pages(tmp_path)] == [1, 1, 2]


async def test_a_failed_hand_over_is_retried_without_committing_twice(tmp_path: Path) -> None:
    durable = Durable(failures=2)
    sink = sink_for(tmp_path, durable=durable)
    sink.write([PageOutput(record())])
    assert await sink.drain(5) == []
    assert [generation for generation, _ in durable.calls] == [0]
    assert len(pages(tmp_path)) == 1


async def test_closing_removes_what_was_never_durable(tmp_path: Path) -> None:
    tmp_path.joinpath("pages").write_text("in the way")
    durable = Durable()
    sink = sink_for(tmp_path, durable=durable)
    sink.write([PageOutput(record())])
    sink.rotate()
    sink.write([PageOutput(record())])  # still open
    assert await sink.drain(0.2) == [0, 1]  # neither could become durable
    await sink.aclose()
    await sink.aclose()  # idempotent
    assert list((tmp_path / ".partial").iterdir()) == []
    assert durable.calls == []


async def test_a_restarted_worker_never_meets_its_old_names(tmp_path: Path) -> None:
    for _ in range(2):
        sink = sink_for(tmp_path, "w")
        sink.write([PageOutput(record())])
        await sink.drain(5)
        await sink.aclose()
    names = [path.name for path in pages(tmp_path)]
    assert len(set(names)) == 2
    assert all(name.startswith("w-") and name.endswith("-00000.jsonl") for name in names)


async def test_warc_has_request_and_response_records(tmp_path: Path) -> None:
    redirected = record(
        "https://example.com/old", final_url="https://example.com/new?q=1", status=200
    )
    sink = sink_for(tmp_path, format="warc")
    sink.write(
        [
            PageOutput(
                record(),
                request_headers={"User-Agent": "crawlfleet/0.1", "Accept": "text/html"},
                response_headers={
                    "Content-Type": "text/html",
                    "Content-Encoding": "gzip",
                    "Content-Length": "17",
                },
                body=BODY,
            )
        ]
    )
    sink.write(
        [
            PageOutput(redirected, body=b"moved here"),
            PageOutput(record("https://example.com/t", status=None)),  # nothing to archive
        ]
    )
    await sink.drain(5)
    assert len(read_lines(pages(tmp_path)[0])) == 3  # JSONL too
    (warc,) = sorted((tmp_path / "warc").glob("*.warc.gz"))
    assert warc.name == pages(tmp_path)[0].name.replace(".jsonl", ".warc.gz")
    with warc.open("rb") as stream:
        records = [
            (
                r.rec_type,
                r.rec_headers.get_header("WARC-Target-URI"),
                r.http_headers,
                r.content_stream().read(),
                r.rec_headers,
            )
            for r in ArchiveIterator(stream)
        ]
    assert [(kind, uri) for kind, uri, *_ in records] == [
        ("warcinfo", None),
        ("response", "https://example.com/a"),  # warcio's order: response, then its request
        ("request", "https://example.com/a"),
        ("response", "https://example.com/new?q=1"),
        ("request", "https://example.com/new?q=1"),
    ]
    _, _, response_head, body, response_warc = records[1]
    _, _, request_head, _, request_warc = records[2]
    assert request_head.protocol == "GET"
    assert request_head.statusline == "/a HTTP/1.1"
    assert request_head.get_header("Host") == "example.com"
    assert request_head.get_header("User-Agent") == "crawlfleet/0.1"
    assert request_warc.get_header("WARC-Concurrent-To") == response_warc.get_header(
        "WARC-Record-ID"
    )
    assert response_warc.get_header("WARC-Date") == "2023-11-14T22:13:20Z"
    assert response_head.get_statuscode() == "200"
    assert response_head.get_header("Content-Encoding") is None  # the body is stored decoded
    assert response_head.get_header("Content-Length") == str(len(BODY))
    assert body == BODY
    assert records[4][2].statusline == "/new?q=1 HTTP/1.1"


async def test_warc_files_rotate_with_their_pages_and_start_with_warcinfo(
    tmp_path: Path,
) -> None:
    durable = Durable()
    sink = sink_for(tmp_path, durable=durable, format="warc", maxFileBytes=1)
    for i in range(3):
        sink.write([PageOutput(record(f"https://example.com/{i}"), body=BODY)])
    await sink.drain(5)
    files = sorted((tmp_path / "warc").glob("*.warc.gz"))
    assert len(files) == 3
    for i, path in enumerate(files):
        with path.open("rb") as stream:
            kinds = [
                (r.rec_type, r.rec_headers.get_header("WARC-Target-URI"))
                for r in ArchiveIterator(stream)
            ]
        url = f"https://example.com/{i}"
        assert kinds == [("warcinfo", None), ("response", url), ("request", url)]
        with gzip.open(path) as archive:
            assert b"WARC/1.0" in archive.read()
    assert len(pages(tmp_path)) == 3
    # A generation is durable when both its files are: one call each, with both files.
    assert sorted(len(files) for _, files in durable.calls) == [2, 2, 2]


async def test_format_none_writes_nothing_and_waits_for_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    sink = sink_for(out, format="none")
    assert sink.write([PageOutput(record(), body=BODY)]) is None
    assert await sink.drain(1) == []
    await sink.aclose()
    assert not out.exists()
    folder = sink_for(tmp_path / "empty")
    assert folder.write([]) is None  # no pages: nothing to wait for either


def test_worker_ids_are_sanitised_for_file_names() -> None:
    assert safe_file_token("../../etc/passwd") == "_.._etc_passwd"
    assert safe_file_token("pod-7f9c/abc:1") == "pod-7f9c_abc_1"
    assert safe_file_token("worker-0#a1b2c3") == "worker-0_a1b2c3"
    assert safe_file_token("") == "worker"
    assert len(safe_file_token("x" * 500)) == 100


async def test_an_odd_worker_id_stays_inside_the_folder(tmp_path: Path) -> None:
    sink = sink_for(tmp_path, "../evil worker")
    sink.write([PageOutput(record())])
    await sink.drain(5)
    (path,) = pages(tmp_path)
    assert path.name.startswith("_evil_worker-")


def test_the_model_refuses_what_the_sink_would_choke_on(tmp_path: Path) -> None:
    # The sink has no checks of its own: the model refuses, naming the field.
    with pytest.raises(ConfigError, match=r"spec\.output\.maxFileBytes"):
        sink_for(tmp_path, maxFileBytes=0)
    with pytest.raises(ConfigError, match=r"spec\.output\.maxFileAgeSeconds"):
        sink_for(tmp_path, maxFileAgeSeconds=0.5)
    with pytest.raises(ConfigError, match=r"spec\.output\.format"):
        sink_for(tmp_path, format="csv")


# --- items (spec.extract) and content (output.content) --------------------------------------


async def test_items_go_beside_their_pages_and_become_durable_with_them(tmp_path: Path) -> None:
    durable = Durable()
    sink = sink_for(tmp_path, "worker-1", durable)
    listing = record("https://example.com/list")
    product = record("https://example.com/p/1", content="Teapot €24.90", content_truncated=False)
    items = [
        Item(0, 0, {"name": "Teapot", "tags": ["tea"]}),
        Item(0, 1, {"name": None, "tags": []}),
    ]

    sink.write([PageOutput(listing, items=items), PageOutput(product)])
    assert not (tmp_path / "items").exists()  # spooled with the pages, not durable yet
    assert await sink.drain(5) == []

    (items_file,) = sorted((tmp_path / "items").glob("*.jsonl"))
    (pages_file,) = pages(tmp_path)
    assert items_file.name == pages_file.name  # one generation, one name in both folders
    assert read_lines(items_file) == [
        {
            "url": listing.url,
            "fetch_id": listing.fetch_id,
            "fetched_at": listing.fetched_at,
            "source": 0,
            "position": position,
            "fields": item.fields,
        }
        for position, item in enumerate(items)
    ]
    page_lines = read_lines(pages_file)
    assert "content" not in page_lines[0]
    assert page_lines[1]["content"] == "Teapot €24.90"
    assert page_lines[1]["content_truncated"] is False
    ((_, files),) = durable.calls
    by_key = {file.key: file for file in files}
    assert by_key[f"items/{items_file.name}"].records == 2
    assert by_key[f"pages/{pages_file.name}"].records == 2


async def test_a_generation_without_items_writes_no_items_file(tmp_path: Path) -> None:
    durable = Durable()
    sink = sink_for(tmp_path, "worker-1", durable)
    sink.write([PageOutput(record())])
    assert await sink.drain(5) == []
    assert not (tmp_path / "items").exists()
    ((_, files),) = durable.calls
    assert [file.key.split("/")[0] for file in files] == ["pages"]


def test_a_sitemap_lastmod_is_on_the_line_only_when_the_page_has_one() -> None:
    listed = json.loads(record(lastmod="2026-01-15").to_json())
    assert listed["lastmod"] == "2026-01-15"
    assert "lastmod" not in json.loads(record().to_json())


def test_a_change_is_on_the_line_only_for_a_tracked_url() -> None:
    tracked = json.loads(record(change="not_modified", status=304, length=0).to_json())
    assert tracked["change"] == "not_modified"
    assert "content" not in tracked
    assert "change" not in json.loads(record().to_json())


@pytest.mark.parametrize(
    ("profile", "status"), [("server-not-modified", 304), ("identical-payload-digest", 200)]
)
async def test_a_revisit_record_refers_to_the_capture_it_found_unchanged(
    tmp_path: Path, profile: RevisitProfile, status: int
) -> None:
    """A revisit written long after its capture names the capture's URI, date and payload
    digest exactly as the capture's response record has them (what replay tools look up)."""
    url = "https://example.com/news"
    captured = record(url)
    revisit = WarcRevisitRef(
        profile,
        url,
        refers_to_date=math.floor(captured.fetched_at),
        payload_digest=payload_digest(body_digest(BODY)),
    )
    later = record(url, status=status, fetched_at=captured.fetched_at + 3600, change="unchanged")
    sink = sink_for(tmp_path, format="warc")
    sink.write([PageOutput(captured, response_headers={"ETag": '"v1"'}, body=BODY)])
    sink.write([PageOutput(later, response_headers={"ETag": '"v1"'}, revisit=revisit)])
    await sink.drain(5)

    (warc,) = sorted((tmp_path / "warc").glob("*.warc.gz"))
    with warc.open("rb") as stream:
        records = {
            r.rec_type: (r.rec_headers, r.http_headers, r.content_stream().read())
            for r in ArchiveIterator(stream)
            if r.rec_type in ("response", "revisit")
        }
    original, _, _ = records["response"]
    headers, head, payload = records["revisit"]
    assert (
        headers.get_header("WARC-Profile") == f"http://netpreserve.org/warc/1.0/revisit/{profile}"
    )
    assert headers.get_header("WARC-Refers-To-Target-URI") == original.get_header("WARC-Target-URI")
    assert headers.get_header("WARC-Refers-To-Date") == original.get_header("WARC-Date")
    assert headers.get_header("WARC-Payload-Digest") == original.get_header("WARC-Payload-Digest")
    assert headers.get_header("WARC-Date") == "2023-11-14T23:13:20Z"  # the revisit's own time
    assert head.get_statuscode() == str(status)
    assert head.get_header("ETag") == '"v1"'
    assert payload == b""


async def test_a_revisit_whose_capture_is_unknown_names_it_by_its_uri_alone(
    tmp_path: Path,
) -> None:
    revisit = WarcRevisitRef("server-not-modified", "https://example.com/a", None, None)
    sink = sink_for(tmp_path, format="warc")
    sink.write([PageOutput(record(status=304), revisit=revisit)])
    await sink.drain(5)
    (warc,) = sorted((tmp_path / "warc").glob("*.warc.gz"))
    with warc.open("rb") as stream:
        [found] = [r.rec_headers for r in ArchiveIterator(stream) if r.rec_type == "revisit"]
    assert found.get_header("WARC-Refers-To-Date") is None
    assert found.get_header("WARC-Payload-Digest") is None
    assert found.get_header("WARC-Refers-To-Target-URI") == "https://example.com/a"


def file_record(url: str = "https://example.com/v.mp4", **changes: Any) -> FileRecord:
    digest = hashlib.sha256(url.encode()).hexdigest()
    fields: dict[str, Any] = {
        "url": url,
        "final_url": url,
        "status": 200,
        "size": 4096,
        "sha256": digest,
        "content_type": "video/mp4",
        "sniffed_type": "mp4",
        "etag": '"v1"',
        "last_modified": None,
        "parent": "https://example.com/",
        "depth": 1,
        "rule": 0,
        "stored": f"files/sha256/{digest[:2]}/{digest}",
        "duplicate": False,
        "resumed_from": 0,
        "restarts": ("no_range",),
        "attempt": 1,
        "worker": "worker-1",
        "fetch_id": "worker-1-7",
        "fetched_at": 1000.0,
    }
    fields.update(changes)
    return FileRecord(**fields)


async def test_file_records_go_to_files_not_pages_nor_the_warc(tmp_path: Path) -> None:
    durable = Durable()
    sink = sink_for(tmp_path, "worker-1", durable, format="warc")
    downloaded = file_record()
    bookkeeping = record(downloaded.url)  # the lease's own record: written nowhere
    page = record("https://example.com/")

    generation = sink.write(
        [PageOutput(page, body=BODY), PageOutput(bookkeeping, body=b"", file=downloaded)]
    )
    assert generation is not None
    assert sink.open_records == 2  # a download is a record the generation waits to seal
    assert await sink.drain(5) == []

    (files_file,) = sorted((tmp_path / "files").glob("*.jsonl"))
    (pages_file,) = pages(tmp_path)
    assert files_file.name == pages_file.name
    (line,) = read_lines(files_file)
    assert line == {**dataclasses.asdict(downloaded), "restarts": ["no_range"]}
    assert [entry["url"] for entry in read_lines(pages_file)] == [page.url]
    with gzip.open(next((tmp_path / "warc").glob("*.warc.gz")), "rb") as archive:
        uris = {
            r.rec_headers.get_header("WARC-Target-URI")
            for r in ArchiveIterator(archive)
            if r.rec_type == "response"
        }
    assert uris == {page.url}
    ((_, files),) = durable.calls
    by_folder = {file.key.split("/")[0]: file.records for file in files}
    assert by_folder == {"pages": 1, "warc": 1, "files": 1}


async def test_a_generation_of_downloads_only_commits_no_empty_page_file(tmp_path: Path) -> None:
    durable = Durable()
    sink = sink_for(tmp_path, "worker-1", durable)
    sink.write([PageOutput(record(), file=file_record()), PageOutput(record(), file=file_record())])
    assert await sink.drain(5) == []
    assert pages(tmp_path) == []
    assert sink.store is not None
    assert not any(sink.store.spool_dir.iterdir())
    ((_, files),) = durable.calls
    assert [(file.key.split("/")[0], file.records) for file in files] == [("files", 2)]
