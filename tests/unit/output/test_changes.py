"""What changed (output/changes.py and ``crawlfleet output changes``), read from files the
worker's own sink wrote: a job's layout and a scheduled job's runs/<run-id>/."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from crawlfleet.cli import main
from crawlfleet.crawler.worker.sinks import OutputSink, PageOutput, PageRecord
from crawlfleet.destinations import parse_destination
from crawlfleet.errors import ConfigError
from crawlfleet.output.changes import ChangeEvent, changes, parse_since
from crawlfleet.output.stores import FolderStore
from tests.support.records import page_record

#: 2026-12-02T08:00:00Z and the run ids of two runs of a scheduled job after it.
T0 = datetime(2026, 12, 2, 8, 0, tzinfo=UTC).timestamp()
FIRST_RUN, SECOND_RUN = "20261202T080000Z", "20261202T081500Z"
SITE = "http://news.test"


def record(path: str, at: float, change: str | None = None, **fields: Any) -> PageRecord:
    """A page record as the worker writes it, fetched ``at`` seconds after T0."""
    body = b"<html>" + path.encode()
    return page_record(f"{SITE}{path}", body, fetched_at=T0 + at, change=change, **fields)


async def write(root: Path, *records: PageRecord, run: str | None = None) -> None:
    """``records`` written, sealed and made durable by a real OutputSink, in one file."""
    destination = parse_destination(str(root))
    if run is not None:
        destination = destination.for_run(run)

    async def acked(number: int, files: object) -> None:
        return None

    sink = OutputSink(
        FolderStore(destination),
        "worker-1",
        format="jsonl",
        max_file_bytes=1 << 20,
        max_file_age_seconds=60.0,
        max_records_per_file=1000,
        max_pending_files=4,
        retry_max_seconds=0.05,
        on_durable=acked,
    )
    sink.write([PageOutput(r) for r in records])
    assert await sink.drain(5.0) == []
    await sink.aclose()


async def listed(root: Path, since: float | None = None) -> list[tuple[str, str, str | None]]:
    store = FolderStore(parse_destination(str(root)))
    found = [event async for event in changes(store, since=since)]
    return sorted((e.change, e.url.removeprefix(SITE), e.run) for e in found)


async def test_new_changed_and_gone_urls_once_each_and_never_the_unchanged(
    tmp_path: Path,
) -> None:
    await write(
        tmp_path,
        record("/", 0, "new"),
        record("/feed.xml", 0, "new"),
        record("/articles/1.html", 1),  # fetched once: it appeared
        record("/articles/2.html", 2),
        record("/articles/3.html", 2),
        record("/broken", 3, status=404, failure_class="http_4xx"),  # never was there
    )
    await write(
        tmp_path,
        record("/", 60, "changed"),
        record("/feed.xml", 60, "not_modified", status=304),
        record("/", 120, "unchanged"),
        record("/feed.xml", 120, "changed"),
        record("/articles/2.html", 130, "gone", status=410, failure_class="http_4xx"),
        record("/articles/4.html", 125),
    )
    assert await listed(tmp_path) == [
        ("gone", "/articles/2.html", None),
        ("new", "/", None),  # appeared in the window, then changed: new
        ("new", "/articles/1.html", None),
        ("new", "/articles/3.html", None),
        ("new", "/articles/4.html", None),
        ("new", "/feed.xml", None),
    ]
    assert await listed(tmp_path, since=T0 + 50) == [
        ("changed", "/", None),
        ("changed", "/feed.xml", None),
        ("gone", "/articles/2.html", None),
        ("new", "/articles/4.html", None),
    ]


async def test_between_runs_of_a_scheduled_job(tmp_path: Path) -> None:
    await write(tmp_path, record("/", 0, "new"), record("/articles/1.html", 1), run=FIRST_RUN)
    await write(
        tmp_path,
        record("/", 900, "changed"),
        record("/articles/5.html", 901),
        record("/articles/1.html", 902, "gone", status=404, failure_class="http_4xx"),
        run=SECOND_RUN,
    )
    since_second = parse_since(SECOND_RUN, now=0.0)
    assert await listed(tmp_path, since=since_second) == [
        ("changed", "/", SECOND_RUN),
        ("gone", "/articles/1.html", SECOND_RUN),
        ("new", "/articles/5.html", SECOND_RUN),
    ]
    assert ("new", "/articles/1.html", FIRST_RUN) not in await listed(tmp_path)  # gone since


async def test_a_record_written_twice_is_listed_once(tmp_path: Path) -> None:
    twice = record("/articles/7.html", 5)
    await write(tmp_path, twice)
    await write(tmp_path, twice)  # a generation made durable, then written again after a kill
    assert await listed(tmp_path) == [("new", "/articles/7.html", None)]


def test_since_reads_a_time_a_run_id_and_a_duration() -> None:
    assert parse_since("2026-12-02T08:00:00Z", now=0.0) == T0
    assert parse_since("2026-12-02T08:00:00", now=0.0) == T0  # no zone: UTC
    assert parse_since(FIRST_RUN, now=0.0) == T0
    assert parse_since("1h30m", now=T0) == T0 - 5400
    assert parse_since("45s", now=T0) == T0 - 45
    for bad in ("yesterday", "15x", "", "20261302T000000Z"):
        with pytest.raises(ConfigError, match="--since"):
            parse_since(bad, now=T0)


def test_the_command_prints_each_change_as_text_or_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pages = (record("/", 0, "new"), record("/", 60, "changed"), record("/articles/9.html", 61))
    asyncio.run(write(tmp_path, *pages))
    assert main(["output", "changes", str(tmp_path), "--since", "2026-12-02T08:00:30Z"]) == 0
    out, err = capsys.readouterr()
    assert sorted(out.splitlines()) == [
        f"changed  2026-12-02T08:01:00Z  {SITE}/",
        f"new      2026-12-02T08:01:01Z  {SITE}/articles/9.html",
    ]
    assert err.strip().endswith("1 new, 1 changed, 0 gone since 2026-12-02T08:00:30Z")
    assert main(["output", "changes", str(tmp_path), "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted(lines, key=lambda line: line["url"]) == [
        {"url": f"{SITE}/", "change": "new", "at": T0, "status": 200, "run": None},
        {"url": f"{SITE}/articles/9.html", "change": "new", "at": T0 + 61, "status": 200,
         "run": None},
    ]  # fmt: skip
    assert ChangeEvent(**lines[0]).to_json() == json.dumps(lines[0])


def test_a_bad_since_is_refused_with_the_forms_it_takes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "pages").mkdir()
    assert main(["output", "changes", str(tmp_path), "--since", "last week"]) != 0
    assert "a duration back from now" in capsys.readouterr().err
