"""Batch downloads a test runs as a user would, and what it reads back (issue 24).

A batch download is a CrawlJob whose seeds are file URLs on the file test site
(crawlfleet/testsite/files.py), ``maxDepth: 0`` and a ``files`` rule matching them. The test
runs it with ``crawlfleet run`` and judges it from the outside: the site's own request log (what
was asked, with which ``Range``, how many bytes went out), the bytes stored under
``files/sha256/`` hashed again here, and the ``files/*.jsonl`` records.

``kill_at`` is the crash the resume is tested against: it watches the site's bytes sent for a
file and SIGKILLs the worker process once a share of the file has gone out, mid-body, with no
chance to checkpoint or release anything.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from crawlfleet.testsite.files import FileRequestRecord, FileSite
from tests.support.processes import worker_processes
from tests.support.runs import crawlfleet
from tests.support.s3 import S3Server
from tests.support.specs import merged

__all__ = [
    "KILLED_FILE_BYTES",
    "KILLED_FILE_BYTES_PER_SECOND",
    "PART_BYTES",
    "RESUME_OVERHEAD",
    "MetricsWatch",
    "bucket_objects",
    "content_key",
    "file_records",
    "files_job",
    "folder_objects",
    "kill_at",
    "part_leftovers",
    "range_start",
    "resumed_from",
    "run_one_worker",
    "served",
    "sha256_of",
    "stored_blobs",
    "summary_of",
    "wait_sent",
    "write_job",
]

#: The smallest part the spec allows: a kill costs at most this much fetched again.
PART_BYTES = 5 * 1024 * 1024
#: A file a kill lands in the middle of, with parts durable before it: half of it goes out
#: in 4 s at the site's per-response rate.
KILLED_FILE_BYTES = 200_000_000
KILLED_FILE_BYTES_PER_SECOND = 25_000_000
#: What a resumed download may cost the site in all, in files (issue 24's bound).
RESUME_OVERHEAD = 1.2
_HASH_CHUNK = 1 << 20


def files_job(
    name: str, seeds: Sequence[str], rules: Sequence[Mapping[str, Any]], **spec: Any
) -> dict[str, Any]:
    """A CrawlJob document of a batch download: ``seeds`` fetched as files by ``rules``, no
    link followed, quick to notice a dead worker and to retry; ``spec`` sections are merged
    over these (``files`` key by key too)."""
    base: dict[str, Any] = {
        "seeds": list(seeds),
        "scope": {"maxDepth": 0, "allowPrivateNetworks": True},
        "concurrency": {"perWorker": 8, "perHost": 2, "hostDelaySeconds": 0},
        "lease": {"ttlSeconds": 5, "heartbeatSeconds": 0.5, "deadAfterSeconds": 3},
        "retry": {
            "taskAttempts": 3,
            "backoffBaseSeconds": 0.05,
            "backoffFactor": 2.0,
            "backoffMaxSeconds": 0.5,
        },
        "output": {"maxFileAgeSeconds": 1},
        "files": {"rules": list(rules), "partSizeBytes": PART_BYTES},
    }
    return {
        "apiVersion": "crawlfleet.io/v1alpha1",
        "kind": "CrawlJob",
        "metadata": {"name": name},
        "spec": merged(base, spec),
    }


def write_job(directory: Path, document: Mapping[str, Any]) -> Path:
    path = directory / f"{document['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(dict(document)))
    return path


def run_one_worker(
    job_file: Path,
    out: Path,
    redis_url: str,
    *extra: str,
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen[str]:
    """``crawlfleet run --workers 1 --json`` of ``job_file`` into ``out`` (its folder, and its
    destination unless ``extra`` names another), on the test's Redis; one worker at a time, so
    the one to kill or to read the metrics of is the one there is."""
    return crawlfleet(
        "run", str(job_file), "--out", str(out), "--workers", "1", "--json",
        "--redis-url", redis_url, *extra, cwd=job_file.parent, env=env,
    )  # fmt: skip


def summary_of(stdout: str) -> dict[str, Any]:
    """The last line of ``crawlfleet run --json``: the run's figures."""
    loaded: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    return loaded


def folder_objects(out: Path) -> dict[str, Path]:
    """Every file of a destination folder by its key (relative path), dot names included."""
    return {p.relative_to(out).as_posix(): p for p in sorted(out.rglob("*")) if p.is_file()}


def bucket_objects(server: S3Server, bucket: str, prefix: str) -> dict[str, Path]:
    """Every object of a destination ``s3://bucket/prefix`` by its key under the prefix, read
    from the server's own disk (not through the client under test)."""
    return {
        key.removeprefix(prefix): path
        for key, path in server.stored_objects(bucket).items()
        if key.startswith(prefix)
    }


def file_records(objects: Mapping[str, Path]) -> list[dict[str, Any]]:
    """Every line of the destination's ``files/*.jsonl`` record streams."""
    records = []
    for key, path in sorted(objects.items()):
        if key.startswith("files/") and key.count("/") == 1 and key.endswith(".jsonl"):
            records += [json.loads(line) for line in path.read_text().splitlines() if line]
    return records


def stored_blobs(objects: Mapping[str, Path]) -> dict[str, Path]:
    """The stored file bodies, under ``files/sha256/``, by their content key."""
    return {key: path for key, path in objects.items() if key.startswith("files/sha256/")}


def part_leftovers(objects: Mapping[str, Path]) -> list[str]:
    """Keys left under ``files/.parts/``: a finished download leaves none."""
    return sorted(key for key in objects if key.startswith("files/.parts/"))


def content_key(sha256: str) -> str:
    """Where a body with this sha256 is stored (the contract's ``files/sha256/<ab>/<sha>``),
    spelled out here rather than imported, so a test checks the layout, not the code."""
    return f"files/sha256/{sha256[:2]}/{sha256}"


def sha256_of(path: Path) -> str:
    """A stored body hashed again here, streaming (bodies of a gigabyte)."""
    digest = hashlib.sha256()
    with open(path, "rb") as body:
        while chunk := body.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def served(site: FileSite, kind: str, name: str) -> list[FileRequestRecord]:
    """The site's log of the requests for file ``name`` on host ``kind``, oldest first."""
    return [r for r in site.requests(kind) if r.path.split("?")[0] == f"/files/{name}"]


def wait_sent(
    site: FileSite,
    watched: Iterable[tuple[str, str, int]],
    *,
    share: float = 0.5,
    timeout_seconds: float = 60.0,
    going: Callable[[], str | None] = lambda: None,
) -> dict[str, int]:
    """Wait until each ``(kind, name, size)`` in ``watched`` has had ``share`` of its bytes sent
    by the site; the bytes sent of each then, by name. They download side by side, so a kill
    right after lands mid-body in each. ``going`` says why waiting is pointless (the run
    ended), or None."""
    watched = list(watched)
    deadline = time.monotonic() + timeout_seconds
    while True:
        progress = {name: _sent(site, kind, name) for kind, name, _ in watched}
        if all(progress[name] >= share * size for _, name, size in watched):
            return progress
        if (ended := going()) is not None:
            raise AssertionError(f"ended before {share:.0%} was sent ({progress}): {ended}")
        if time.monotonic() > deadline:
            raise AssertionError(f"the downloads did not reach {share:.0%}: {progress}")
        time.sleep(0.01)


def kill_at(
    site: FileSite,
    watched: Iterable[tuple[str, str, int]],
    job_file: Path,
    run: subprocess.Popen[str],
    *,
    share: float = 0.5,
) -> dict[str, int]:
    """SIGKILL every worker ``crawlfleet run`` runs for ``job_file`` once ``share`` of each
    watched file is sent (:func:`wait_sent`), with no chance to checkpoint or release
    anything; the bytes sent of each at the kill, by name."""

    def going() -> str | None:
        return None if run.poll() is None else f"the run exited: {run.communicate()[1][-3000:]}"

    progress = wait_sent(site, watched, share=share, going=going)
    workers = worker_processes(job_file)
    assert workers, "no worker to kill"
    for pid in workers.values():
        os.kill(pid, signal.SIGKILL)
    return progress


def range_start(header: str | None) -> int | None:
    """N of an open range ``bytes=N-``; None when no range was asked."""
    if header is None:
        return None
    start, dash, end = header.removeprefix("bytes=").partition("-")
    assert (dash, end) == ("-", ""), header  # an open range, from N to the end
    return int(start)


def resumed_from(log: Sequence[FileRequestRecord], sent_at_kill: int, size: int) -> int:
    """Check the site's log of a download killed after ``sent_at_kill`` of its ``size`` bytes
    went out: the first request asked no range, the last asked for the rest (``bytes=N-``
    with 0 < N <= what had been sent) and got all of it in a 206, and the site sent at most
    :data:`RESUME_OVERHEAD` times the file in all. N."""
    assert log[0].range_header is None, log[0]
    assert 0 < sent_at_kill < size
    resumed = log[-1]
    start = range_start(resumed.range_header)
    assert start is not None, resumed
    assert 0 < start <= sent_at_kill, resumed
    assert (resumed.status, resumed.completed) == (206, True), resumed
    sent = sum(r.bytes_sent for r in log)
    assert sent <= RESUME_OVERHEAD * size, f"{sent} bytes sent for a file of {size}"
    return start


def _sent(site: FileSite, kind: str, name: str) -> int:
    return sum(r.bytes_sent for r in served(site, kind, name))


class MetricsWatch(threading.Thread):
    """Scrapes a worker's ``/metrics`` every few milliseconds while a run goes, keeping the
    highest value seen of each series: the counters of a worker that has exited, read from
    the outside (the runner's one worker at a time serves them on ``port``, given in its
    environment as ``CRAWLFLEET_METRICS_PORT``)."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.highest: dict[str, float] = {}
        self.scrapes = 0
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(0.02):
            try:
                with urllib.request.urlopen(self.url, timeout=2) as answer:
                    text = answer.read().decode()
            except (OSError, urllib.error.URLError):
                continue  # no worker serving yet, or between two
            self.scrapes += 1
            for series, value in _SAMPLE.findall(text):
                self.highest[series] = max(self.highest.get(series, 0.0), float(value))

    def stop(self) -> None:
        self._done.set()
        self.join()

    def value(self, series: str) -> float:
        """The highest value seen of ``series`` (``name{label="value"}``); 0 if never."""
        return self.highest.get(series, 0.0)


_SAMPLE = re.compile(r"^([a-z_]+(?:\{[^}]*\})?) (\S+)$", re.M)
