"""A batch download killed mid-body resumes where its durable part ends (issue 24, "Tests").

``crawlfleet run`` of seeds that are file URLs on the file test site, a ``files`` rule and
``maxDepth: 0``, one worker; the worker process is SIGKILLed when about half of each file has
gone out (the site's own count), with no chance to checkpoint or release anything. The run
replaces it (the killed worker's leases are requeued at once, their file slots freed with
them: each download goes on within seconds, not a lease ttl later) and the next attempt:

* on a host that honours ``Range``: asks for the rest (``Range: bytes=N-``, N > 0, N at most
  what had been sent), so the site sends at most 1.2 times the file in all, and the stored
  body is the file (its sha256 is the site's), its record saying ``resumed_from: N``;
* on a host that ignores ``Range``: gets a 200, drops the part and keeps the whole new body,
  from zero (a ``no_range`` restart);
* on a host whose file changes between requests: the old ``ETag`` in ``If-Range`` gets the
  new version whole, and the stored body is that one version, never a splice of two.

A second run covers the answers that must not be stored as they are: an empty 200 (retried and
counted as ``file_too_small``, then stored right) and an HTML error page for an ``.mp4``
(``file_type_mismatch``, dead-lettered, nothing under ``files/sha256/`` and no part left
behind).

Runtime: about 15 s for the kill (three 200 MB files at 25 MB/s each, half of them sent
twice), 3 s for the other.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from crawlfleet.local.redis_server import RedisServer, free_port
from crawlfleet.testsite.files import FileSite, FileSiteConfig
from tests.support.file_crawls import (
    KILLED_FILE_BYTES,
    KILLED_FILE_BYTES_PER_SECOND,
    MetricsWatch,
    content_key,
    file_records,
    files_job,
    folder_objects,
    kill_at,
    part_leftovers,
    range_start,
    resumed_from,
    run_one_worker,
    served,
    sha256_of,
    stored_blobs,
    summary_of,
    write_job,
)
from tests.support.runs import no_stray_runs  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_stray_runs")]

FILE_BYTES = KILLED_FILE_BYTES
#: The lease ttl of the killed run, and how soon after the kill every download goes on.
LEASE_SECONDS = 30
RESUMED_WITHIN_SECONDS = 5
SMALL_BYTES = 1_000_000
FILE_RULE = {"match": r"/files/"}
_FAILURES = 'crawlfleet_worker_failures_total{{failure_class="{}"}}'


def test_a_killed_worker_s_downloads_resume_restart_or_start_over_whole(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    files = {kind: f"{kind}.mp4" for kind in ("ranges", "norange", "changing")}
    with FileSite(FileSiteConfig(bytes_per_second=KILLED_FILE_BYTES_PER_SECOND)) as site:
        seeds = [site.url(kind, f"/files/{name}?size={FILE_BYTES}") for kind, name in files.items()]
        # A long lease: a killed worker's file slots must come back with its leases, at
        # once, not when they expire (the frontier's requeue frees them).
        job = write_job(
            tmp_path,
            files_job("killed-downloads", seeds, [FILE_RULE], lease={"ttlSeconds": LEASE_SECONDS}),
        )
        out = tmp_path / "out"
        run = run_one_worker(job, out, redis_server.url)
        at_kill = kill_at(
            site, [(kind, name, FILE_BYTES) for kind, name in files.items()], job, run
        )
        killed_at = time.monotonic()  # the site's clock (FileRequestRecord.at)
        stdout, err = run.communicate(timeout=120)
        assert run.returncode == 0, err[-3000:]
        log = {kind: served(site, kind, name) for kind, name in files.items()}

    summary = summary_of(stdout)
    assert summary["crawled"] == len(files)
    assert summary["dead_lettered"] == 0
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    assert [e["why"] for e in events if e["kind"] == "LeasesRequeued"] == ["exited"]
    waited = {kind: requests[-1].at - killed_at for kind, requests in log.items()}
    assert max(waited.values()) < RESUMED_WITHIN_SECONDS, waited
    objects = folder_objects(out)
    records = {record["url"]: record for record in file_records(objects)}
    assert set(records) == set(seeds)
    blobs = stored_blobs(objects)
    assert part_leftovers(objects) == []  # every part finished into its content key

    # Honours Range: the next attempt asks for the rest and gets it.
    start = resumed_from(log["ranges"], at_kill[files["ranges"]], FILE_BYTES)
    record = records[seeds[0]]
    assert record["sha256"] == site.sha256(files["ranges"], FILE_BYTES)
    assert record["resumed_from"] == start
    assert record["size"] == FILE_BYTES
    assert record["duplicate"] is False
    assert sha256_of(blobs[record["stored"]]) == record["sha256"]

    # Ignores Range: asked, answered whole, restarted from zero.
    asked = log["norange"][-1]
    assert range_start(asked.range_header) not in (None, 0), asked
    assert (asked.status, asked.completed) == (200, True)
    again = sum(r.bytes_sent for r in log["norange"]) - at_kill[files["norange"]]
    assert again >= FILE_BYTES  # sent again whole
    record = records[seeds[1]]
    assert record["sha256"] == site.sha256(files["norange"], FILE_BYTES)
    assert record["resumed_from"] == 0
    assert "no_range" in record["restarts"]
    assert sha256_of(blobs[record["stored"]]) == record["sha256"]

    # Changed between attempts: the old validator in If-Range gets the new version whole.
    changed = log["changing"][-1]
    assert changed.if_range is not None, changed
    assert (changed.status, changed.completed) == (200, True)
    assert changed.version != log["changing"][0].version
    record = records[seeds[2]]
    # One whole version, the one the last answer sent: not a splice of two.
    assert record["sha256"] == site.sha256(files["changing"], FILE_BYTES, changed.version)
    assert record["resumed_from"] == 0
    assert "validator_changed" in record["restarts"] or "no_range" in record["restarts"]
    assert sha256_of(blobs[record["stored"]]) == record["sha256"]
    assert sorted(blobs) == sorted(content_key(r["sha256"]) for r in records.values())


def test_an_empty_answer_is_retried_and_an_error_page_is_never_stored(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    port = free_port()
    env = {
        **os.environ,
        "CRAWLFLEET_METRICS_PORT": str(port),
        "CRAWLFLEET_METRICS_HOST": "127.0.0.1",
    }
    metrics = MetricsWatch(port)
    with FileSite(FileSiteConfig()) as site:
        empty = site.url("empty_once", f"/files/empty.pdf?size={SMALL_BYTES}")
        error = site.url("html_error", f"/files/error.mp4?size={SMALL_BYTES}")
        job = write_job(
            tmp_path,
            files_job("refused-downloads", [empty, error], [FILE_RULE], retry={"taskAttempts": 2}),
        )
        out = tmp_path / "out"
        metrics.start()
        run = run_one_worker(job, out, redis_server.url, env=env)
        try:
            stdout, err = run.communicate(timeout=120)
        finally:
            metrics.stop()
        assert run.returncode == 0, err[-3000:]
        empties = served(site, "empty_once", "empty.pdf")
        errors = served(site, "html_error", "error.mp4")

    summary = summary_of(stdout)
    assert metrics.scrapes > 0
    # The empty 200 came first, was refused and counted, and the next attempt stored the file.
    assert len(empties) == 2
    assert (empties[0].status, empties[0].bytes_sent) == (200, 0)
    assert metrics.value(_FAILURES.format("file_too_small")) == 1
    objects = folder_objects(out)
    (record,) = [r for r in file_records(objects) if r["url"] == empty]
    sha256 = site.sha256("empty.pdf", SMALL_BYTES)
    assert (record["sha256"], record["size"]) == (sha256, SMALL_BYTES)

    # The error page: retried to the task's attempts, counted each time, then a dead letter.
    assert len(errors) == 2
    assert metrics.value(_FAILURES.format("file_type_mismatch")) == 2
    dead = [json.loads(line) for line in (out / "dead-letters.jsonl").read_text().splitlines()]
    assert [(d["url"], d["failure_class"]) for d in dead] == [(error, "file_type_mismatch")]
    assert summary["dead_lettered"] == 1
    assert summary["failed"] == 3  # every refused attempt, in the frontier's count too
    assert list(stored_blobs(objects)) == [content_key(sha256)]  # the error page: nowhere
    assert part_leftovers(objects) == []  # not even a part, once it is dead-lettered
