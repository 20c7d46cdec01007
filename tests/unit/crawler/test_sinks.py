"""OutputWriter: JSONL pages, rotation, WARC request/response pairs, dead letters, format none."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from warcio.archiveiterator import ArchiveIterator

from crawlfleet.crawler.sinks import OutputWriter, PageOutput, PageRecord, safe_file_token
from crawlfleet.crawljob import OutputSpec
from crawlfleet.errors import ConfigError
from tests.support.specs import job_spec

BODY = b"<html><head><title>Hello</title></head><body>" + b"x" * 200 + b"</body></html>"


def record(url: str = "https://example.com/a", **changes: object) -> PageRecord:
    base = PageRecord(
        url=url,
        final_url=url,
        status=200,
        depth=1,
        parent="https://example.com/",
        fetched_at=1_700_000_000.5,
        content_type="text/html; charset=utf-8",
        length=len(BODY),
        sha256=hashlib.sha256(BODY).hexdigest(),
        title="Hello — ünïcode",
        outlinks=3,
        failure_class=None,
        attempt=1,
        worker="worker-1",
        fetch_id=uuid.uuid4().hex,
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def writer_for(directory: Path, worker: str = "w", **output: Any) -> OutputWriter:
    """The writer a job's ``output`` section (camelCase, model defaults) asks for."""
    return OutputWriter.from_spec(directory, worker, job_spec({"output": output}).output)


def read_lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


def test_jsonl_lines_parse_with_every_field(tmp_path: Path) -> None:
    first, second = record(), record("https://example.com/b", status=None, failure_class="timeout")
    with writer_for(tmp_path, "worker-1") as writer:
        writer.write_pages([PageOutput(first)])
        writer.write_pages([PageOutput(second)])
        assert writer.files == [tmp_path / "pages-worker-1-00000.jsonl"]
    lines = read_lines(tmp_path / "pages-worker-1-00000.jsonl")
    assert lines == [dataclasses.asdict(first), dataclasses.asdict(second)]
    assert set(lines[0]) == {f.name for f in dataclasses.fields(PageRecord)}
    assert [p.name for p in tmp_path.iterdir()] == ["pages-worker-1-00000.jsonl"]


def test_lines_are_flushed_after_each_batch(tmp_path: Path) -> None:
    writer = writer_for(tmp_path)
    writer.write_pages([PageOutput(record()), PageOutput(record())])
    # Still open, nothing closed: another process (or a post-SIGKILL reader) sees both lines.
    assert len(read_lines(tmp_path / "pages-w-00000.jsonl")) == 2
    writer.close()
    writer.close()  # idempotent
    with pytest.raises(ValueError, match="closed"):
        writer.write_pages([PageOutput(record())])


def test_requeued_page_keeps_url_and_changes_fetch_id(tmp_path: Path) -> None:
    with writer_for(tmp_path) as writer:
        writer.write_pages([PageOutput(record(attempt=1))])
        writer.write_pages([PageOutput(record(attempt=2))])
    first, second = read_lines(tmp_path / "pages-w-00000.jsonl")
    assert first["url"] == second["url"]
    assert first["fetch_id"] != second["fetch_id"]


def test_jsonl_rotates_past_max_file_bytes(tmp_path: Path) -> None:
    line_bytes = len(record().to_json().encode()) + 1
    with writer_for(tmp_path, maxFileBytes=line_bytes * 2) as writer:
        writer.write_pages([PageOutput(record(f"https://example.com/{i}")) for i in range(5)])
    files = sorted(tmp_path.glob("pages-w-*.jsonl"))
    assert [f.name for f in files] == [
        "pages-w-00000.jsonl",
        "pages-w-00001.jsonl",
        "pages-w-00002.jsonl",
    ]
    urls = [line["url"] for f in files for line in read_lines(f)]
    assert urls == [f"https://example.com/{i}" for i in range(5)]  # nothing lost, in order
    assert [len(read_lines(f)) for f in files] == [2, 2, 1]


def test_a_restarted_worker_starts_a_new_file(tmp_path: Path) -> None:
    (tmp_path / "pages-w-00003.jsonl").write_text('{"url": "cut by a SIGKI')
    (tmp_path / "pages-w-x-00009.jsonl").write_text("")  # another worker "w-x": not ours
    with writer_for(tmp_path) as writer:
        writer.write_pages([PageOutput(record())])
    assert read_lines(tmp_path / "pages-w-00004.jsonl")[0]["url"] == record().url
    assert (tmp_path / "pages-w-00003.jsonl").read_text() == '{"url": "cut by a SIGKI'


def test_warc_has_request_and_response_records(tmp_path: Path) -> None:
    redirected = record(
        "https://example.com/old", final_url="https://example.com/new?q=1", status=200
    )
    with writer_for(tmp_path, format="warc") as writer:
        writer.write_pages(
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
        writer.write_pages(
            [
                PageOutput(redirected, body=b"moved here"),
                PageOutput(record("https://example.com/t", status=None)),  # nothing to archive
            ]
        )
    assert len(read_lines(tmp_path / "pages-w-00000.jsonl")) == 3  # JSONL too
    with (tmp_path / "warc-w-00000.warc.gz").open("rb") as stream:
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


def test_warc_rotates_and_each_file_starts_with_warcinfo(tmp_path: Path) -> None:
    with writer_for(tmp_path, format="warc", maxFileBytes=1) as writer:
        for i in range(3):
            writer.write_pages([PageOutput(record(f"https://example.com/{i}"), body=BODY)])
    files = sorted(tmp_path.glob("warc-w-*.warc.gz"))
    assert len(files) == 3
    for i, path in enumerate(files):
        with path.open("rb") as stream:
            kinds = [
                (r.rec_type, r.rec_headers.get_header("WARC-Target-URI"))
                for r in ArchiveIterator(stream)
            ]
        url = f"https://example.com/{i}"
        assert kinds == [("warcinfo", None), ("response", url), ("request", url)]
    assert len(sorted(tmp_path.glob("pages-w-*.jsonl"))) == 3


def test_dead_letters_file(tmp_path: Path) -> None:
    with writer_for(tmp_path) as writer:
        writer.write_dead_letter(
            "https://example.com/gone", "http_404", "404 Not Found", 1, 2, "https://example.com/"
        )
        writer.write_dead_letter("https://example.com/slow", "timeout", "read timeout", 5, 1, "")
    lines = read_lines(tmp_path / "failures-w.jsonl")
    assert [line["url"] for line in lines] == [
        "https://example.com/gone",
        "https://example.com/slow",
    ]
    first = lines[0]
    assert first["failure_class"] == "http_404"
    assert first["message"] == "404 Not Found"
    assert (first["attempts"], first["depth"], first["parent"]) == (1, 2, "https://example.com/")
    assert first["worker"] == "w"
    assert isinstance(first["failed_at"], float)
    assert not list(tmp_path.glob("pages-*"))  # opened lazily: no empty page file


def test_dead_letters_survive_a_cut_last_line(tmp_path: Path) -> None:
    (tmp_path / "failures-w.jsonl").write_bytes(b'{"url":"https://example.com/x","fail')
    with writer_for(tmp_path) as writer:
        writer.write_dead_letter("https://example.com/y", "timeout", "t", 5, 0, "")
    last = (tmp_path / "failures-w.jsonl").read_text().splitlines()[-1]
    assert json.loads(last)["url"] == "https://example.com/y"


def test_format_none_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with writer_for(out, format="none") as writer:
        writer.write_pages([PageOutput(record(), body=BODY)])
        writer.write_pages([PageOutput(record(), body=BODY)])
        writer.write_dead_letter("https://example.com/x", "timeout", "t", 5, 0, "")
        assert writer.files == []
    assert not out.exists()


def test_worker_ids_are_sanitised_for_file_names(tmp_path: Path) -> None:
    assert safe_file_token("../../etc/passwd") == "_.._etc_passwd"
    assert safe_file_token("pod-7f9c/abc:1") == "pod-7f9c_abc_1"
    assert safe_file_token("") == "worker"
    assert len(safe_file_token("x" * 500)) == 100
    with writer_for(tmp_path, "../evil worker") as writer:
        writer.write_pages([PageOutput(record())])
    assert [p.name for p in tmp_path.iterdir()] == ["pages-_evil_worker-00000.jsonl"]


def test_from_spec_and_bad_settings(tmp_path: Path) -> None:
    spec = OutputSpec.model_validate({"format": "warc", "maxFileBytes": 1000})
    with OutputWriter.from_spec(tmp_path, "w", spec) as writer:
        assert writer.format == "warc"
        writer.write_pages([PageOutput(record(), body=BODY)])
    with gzip.open(tmp_path / "warc-w-00000.warc.gz") as stream:
        assert b"WARC/1.0" in stream.read()
    # The writer has no checks of its own: the model refuses, naming the field.
    with pytest.raises(ConfigError, match=r"spec\.output\.maxFileBytes"):
        writer_for(tmp_path, maxFileBytes=0)
    with pytest.raises(ConfigError, match=r"spec\.output\.format"):
        writer_for(tmp_path, format="csv")
