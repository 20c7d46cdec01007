"""The file site (crawlfleet/testsite/files.py) over real HTTP: ranges, 416, versions, resets.

The download tests and bench/files.py take this site's bodies, digests and request log as
ground truth, so each host's behaviour is checked here with httpx straight (never the
crawler's fetcher, so that a crawler bug cannot hide a site bug).
"""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from crawlfleet.testsite.files import (
    KINDS,
    FileSite,
    FileSiteConfig,
    file_etag,
    file_last_modified,
    page_links,
)

SIZE = 3 * (1 << 20) + 12345  # not a multiple of the block size: the last chunk is partial
PAGES = 2


@pytest.fixture(scope="module")
def site() -> Iterator[FileSite]:
    with FileSite(FileSiteConfig(default_size=200_000, pages=PAGES)) as running:
        yield running


@pytest.fixture(autouse=True)
def fresh(site: FileSite) -> None:
    site.reset()
    site.throttle(0)


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=30, headers={"Accept-Encoding": "identity"}) as http:
        yield http


def test_every_kind_listens_on_its_own_loopback_address(site: FileSite) -> None:
    addresses = {netloc.rpartition(":")[0] for netloc in site.hosts.values()}
    assert set(site.hosts) == set(KINDS)
    assert addresses == {f"127.0.24.{k + 1}" for k in range(len(KINDS))}


@pytest.mark.parametrize(
    ("name", "content_type", "magic"),
    [
        ("clip.mp4", "video/mp4", b"ftypisom"),
        ("clip.webm", "video/webm", b"\x1a\x45\xdf\xa3"),
        ("doc.pdf", "application/pdf", b"%PDF-"),
        ("photo.png", "image/png", b"\x89PNG\r\n\x1a\n"),
        ("photo.jpg", "image/jpeg", b"\xff\xd8\xff"),
        ("anim.gif", "image/gif", b"GIF89a"),
        ("data.zip", "application/zip", b"PK\x03\x04"),
        ("data.gz", "application/gzip", b"\x1f\x8b\x08"),
        ("blob.bin", "application/octet-stream", b""),
    ],
)
def test_a_file_has_its_type_magic_validators_and_the_digest_of_its_bytes(
    site: FileSite, client: httpx.Client, name: str, content_type: str, magic: bytes
) -> None:
    response = client.get(site.file_url("ranges", name, SIZE))
    assert response.status_code == 200
    assert response.headers["content-type"] == content_type
    assert int(response.headers["content-length"]) == len(response.content) == SIZE
    start = 4 if name.endswith(".mp4") else 0
    assert response.content[start : start + len(magic)] == magic
    assert hashlib.sha256(response.content).hexdigest() == site.sha256(name, SIZE)
    assert response.headers["etag"] == file_etag(name, SIZE)
    assert response.headers["last-modified"] == file_last_modified(0)
    assert response.headers["accept-ranges"] == "bytes"


def test_bodies_differ_by_name_size_and_version(site: FileSite) -> None:
    digests = {
        site.sha256("a.mp4", SIZE),
        site.sha256("b.mp4", SIZE),
        site.sha256("a.mp4", SIZE + 1),
        site.sha256("a.mp4", SIZE, version=1),
    }
    assert len(digests) == 4


def test_the_default_size_applies_without_a_size_query(
    site: FileSite, client: httpx.Client
) -> None:
    response = client.get(site.file_url("ranges", "clip.mp4"))
    assert len(response.content) == 200_000
    assert hashlib.sha256(response.content).hexdigest() == site.sha256("clip.mp4")


@pytest.mark.parametrize(
    ("range_header", "start", "end"),
    [
        ("bytes=1000000-", 1_000_000, SIZE),
        ("bytes=0-0", 0, 1),
        ("bytes=65530-65545", 65_530, 65_546),
        ("bytes=100-99999999999", 100, SIZE),
        ("bytes=-500", SIZE - 500, SIZE),
    ],
)
def test_a_single_range_gets_206_with_its_bytes(
    site: FileSite, client: httpx.Client, range_header: str, start: int, end: int
) -> None:
    url = site.file_url("ranges", "clip.mp4", SIZE)
    whole = client.get(url).content
    response = client.get(url, headers={"Range": range_header})
    assert response.status_code == 206
    assert response.headers["content-range"] == f"bytes {start}-{end - 1}/{SIZE}"
    assert int(response.headers["content-length"]) == end - start
    assert response.content == whole[start:end]
    last = site.requests("ranges")[-1]
    assert (last.range_header, last.status, last.bytes_sent) == (range_header, 206, end - start)
    assert last.completed
    assert last.ended is None or last.ended >= last.at


@pytest.mark.parametrize("first", [SIZE, SIZE + 1, 10 * SIZE])
def test_a_range_at_or_past_the_end_gets_416_with_the_total(
    site: FileSite, client: httpx.Client, first: int
) -> None:
    response = client.get(
        site.file_url("ranges", "clip.mp4", SIZE), headers={"Range": f"bytes={first}-"}
    )
    assert response.status_code == 416
    assert response.headers["content-range"] == f"bytes */{SIZE}"
    assert response.content == b""


@pytest.mark.parametrize("header", ["bytes=0-10,20-30", "items=0-10", "bytes=50-10", "bytes=x-"])
def test_a_range_the_site_does_not_serve_is_ignored(
    site: FileSite, client: httpx.Client, header: str
) -> None:
    response = client.get(site.file_url("ranges", "clip.mp4", SIZE), headers={"Range": header})
    assert response.status_code == 200
    assert len(response.content) == SIZE


def test_if_range_with_the_current_etag_or_date_gets_the_range(
    site: FileSite, client: httpx.Client
) -> None:
    url = site.file_url("ranges", "clip.mp4", SIZE)
    first = client.get(url)
    for validator in (first.headers["etag"], first.headers["last-modified"]):
        response = client.get(url, headers={"Range": "bytes=10-", "If-Range": validator})
        assert response.status_code == 206
        assert response.content == first.content[10:]
    assert [r.if_range for r in site.requests("ranges")] == [
        None,
        first.headers["etag"],
        first.headers["last-modified"],
    ]


@pytest.mark.parametrize(
    "validator", ['"another"', "W/{etag}", "Tue, 06 Jan 2026 06:00:00 GMT", "not a date"]
)
def test_if_range_that_does_not_match_strongly_gets_the_whole_file(
    site: FileSite, client: httpx.Client, validator: str
) -> None:
    url = site.file_url("ranges", "clip.mp4", SIZE)
    etag = file_etag("clip.mp4", SIZE)
    response = client.get(
        url, headers={"Range": "bytes=10-", "If-Range": validator.format(etag=etag)}
    )
    assert response.status_code == 200
    assert hashlib.sha256(response.content).hexdigest() == site.sha256("clip.mp4", SIZE)


def test_head_answers_the_headers_of_a_get(site: FileSite, client: httpx.Client) -> None:
    response = client.head(site.file_url("ranges", "clip.mp4", SIZE))
    assert response.status_code == 200
    assert response.headers["content-length"] == str(SIZE)
    assert site.requests("ranges")[-1].bytes_sent == 0


def test_norange_ignores_range_and_sends_the_whole_file(
    site: FileSite, client: httpx.Client
) -> None:
    url = site.file_url("norange", "clip.mp4", SIZE)
    first = client.get(url)
    response = client.get(url, headers={"Range": "bytes=1000-", "If-Range": first.headers["etag"]})
    assert response.status_code == 200
    assert "content-range" not in response.headers
    assert response.headers["etag"] == first.headers["etag"]
    assert response.content == first.content
    assert site.bytes_sent(url) == 2 * SIZE


def test_changing_serves_a_new_version_on_every_request(
    site: FileSite, client: httpx.Client
) -> None:
    url = site.file_url("changing", "clip.mp4", SIZE)
    first = client.get(url)
    second = client.get(url, headers={"Range": "bytes=1000-", "If-Range": first.headers["etag"]})
    assert second.status_code == 200  # the old ETag: the whole new version
    assert second.headers["etag"] != first.headers["etag"]
    assert second.headers["last-modified"] != first.headers["last-modified"]
    assert hashlib.sha256(first.content).hexdigest() == site.sha256("clip.mp4", SIZE, 0)
    assert hashlib.sha256(second.content).hexdigest() == site.sha256("clip.mp4", SIZE, 1)
    third = client.get(url, headers={"Range": "bytes=1000-"})  # no If-Range: version 2's tail
    assert third.status_code == 206
    assert third.headers["etag"] == file_etag("clip.mp4", SIZE, 2)
    assert site.version("changing", "clip.mp4", SIZE) == 2
    assert [r.version for r in site.requests("changing")] == [0, 1, 2]
    site.reset()
    assert site.version("changing", "clip.mp4", SIZE) == 0
    assert client.get(url).headers["etag"] == first.headers["etag"]


def _read_all(response: httpx.Response, into: bytearray | None = None) -> bytearray:
    """The body, kept in ``into`` chunk by chunk (what arrived before an error counts)."""
    received = bytearray() if into is None else into
    for chunk in response.iter_raw():
        received += chunk
    return received


def test_flaky_resets_the_first_response_at_half_then_honours_the_range(
    site: FileSite, client: httpx.Client
) -> None:
    url = site.file_url("flaky", "clip.mp4", SIZE)
    received = bytearray()
    with client.stream("GET", url) as response:
        etag = response.headers["etag"]
        with pytest.raises(httpx.ReadError):
            _read_all(response, received)
    assert len(received) == SIZE // 2
    first = site.requests("flaky")[0]
    assert (first.status, first.bytes_sent, first.completed) == (200, SIZE // 2, False)
    assert etag is not None
    rest = client.get(url, headers={"Range": f"bytes={len(received)}-", "If-Range": etag})
    assert rest.status_code == 206
    whole = bytes(received) + rest.content
    assert hashlib.sha256(whole).hexdigest() == site.sha256("clip.mp4", SIZE)
    assert site.bytes_sent(url) == SIZE
    assert site.requests("flaky")[1].range_header == f"bytes={SIZE // 2}-"


def test_empty_once_answers_an_empty_200_first(site: FileSite, client: httpx.Client) -> None:
    url = site.file_url("empty_once", "clip.mp4", SIZE)
    empty = client.get(url)
    assert (empty.status_code, empty.content) == (200, b"")
    assert empty.headers["content-length"] == "0"
    assert empty.headers["content-type"] == "video/mp4"
    again = client.get(url)
    assert hashlib.sha256(again.content).hexdigest() == site.sha256("clip.mp4", SIZE)
    other = client.get(site.file_url("empty_once", "other.mp4", SIZE))
    assert other.content == b""  # first request of each file


def test_html_error_answers_a_small_html_page_for_every_file(
    site: FileSite, client: httpx.Client
) -> None:
    response = client.get(site.file_url("html_error", "clip.mp4", SIZE))
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert response.content.startswith(b"<!DOCTYPE html>")
    assert len(response.content) < 1024


def test_lengthless_sends_chunked_without_content_length(
    site: FileSite, client: httpx.Client
) -> None:
    url = site.file_url("lengthless", "clip.webm", SIZE)
    response = client.get(url, headers={"Range": "bytes=10-"})
    assert response.status_code == 200
    assert "content-length" not in response.headers
    assert response.headers["transfer-encoding"] == "chunked"
    assert hashlib.sha256(response.content).hexdigest() == site.sha256("clip.webm", SIZE)


def test_the_throttle_paces_responses_and_changes_at_run_time(
    site: FileSite, client: httpx.Client
) -> None:
    rate = 1 << 20
    site.throttle(rate)
    url = site.file_url("ranges", "slow.bin", rate // 2)
    started = time.monotonic()
    assert len(client.get(url).content) == rate // 2
    assert time.monotonic() - started >= 0.4
    # a response streaming at 64 KiB/s speeds up when the cap is lifted
    site.throttle(64 * 1024)
    started = time.monotonic()
    with client.stream("GET", site.file_url("ranges", "slow2.bin", 4 * rate)) as response:
        for n, _ in enumerate(response.iter_raw()):
            if n == 0:
                site.throttle(0)
    assert time.monotonic() - started < 10


def test_pages_link_files_in_each_context_and_robots_allows_all(
    site: FileSite, client: httpx.Client
) -> None:
    page = client.get(site.page_url("ranges", 0))
    assert page.headers["content-type"].startswith("text/html")
    for link in page_links(0, PAGES):
        assert f'"{link.path}"' in page.text
    assert {link.element for link in page_links(0, PAGES)} == {"a", "img", "video", "source"}
    assert "/page/1.html" in page.text
    assert "/page/2.html" not in client.get(site.page_url("ranges", 1)).text
    assert client.get(site.page_url("ranges", PAGES)).status_code == 404
    assert client.get(site.url("norange", "/robots.txt")).text == "User-agent: *\nDisallow:\n"
    assert client.get(site.url("ranges", "/elsewhere")).status_code == 404
    assert client.get(site.url("ranges", "/files/x.mp4?size=big")).status_code == 404


def test_the_cli_serves_the_file_site_and_writes_its_requests(tmp_path: Path) -> None:
    records = tmp_path / "requests.jsonl"
    command = [sys.executable, "-m", "crawlfleet.testsite", "--files", "--base-address"]
    proc = subprocess.Popen(
        [*command, "127.0.24.11", "--record-file", str(records)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        ready = json.loads(proc.stdout.readline())
        assert list(ready["hosts"]) == list(KINDS)
        assert ready["bases"]["ranges"] == f"http://{ready['hosts']['ranges']}"
        url = ready["bases"]["ranges"] + "/files/a.pdf?size=1000"
        tail = httpx.get(url, headers={"Range": "bytes=990-"})
        assert (tail.status_code, len(tail.content)) == (206, 10)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
    assert out == b""
    assert json.loads(err.splitlines()[-1]) == {"requests": 1, "bytes_sent": 10}
    [line] = [json.loads(line) for line in records.read_text().splitlines()]
    assert (line["range"], line["status"], line["bytes_sent"]) == ("bytes=990-", 206, 10)
