"""`crawlfleet run --output s3://...` as a user runs it: real workers, real Redis, the real test
site and a real S3-compatible server (versitygw), whose own disk says what landed.

The durability contract (DESIGN §8) from the outside: every page the frontier counts as crawled
has its record in the bucket, whatever happens to the workers or to the store meanwhile; a
record appears twice only for a page whose lease came back (a requeue); and a destination that
cannot be written to is refused at start, in one sentence, before anything is fetched.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from crawlfleet.frontier import canonicalize
from crawlfleet.testsite import SiteConfig, TestSite
from tests.support.processes import worker_pid
from tests.support.runs import crawlfleet, no_stray_runs  # noqa: F401 (a fixture)
from tests.support.s3 import S3Server, aws_env

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_stray_runs")]


def job_file(tmp_path: Path, site: TestSite, name: str, **spec: Any) -> Path:
    base: dict[str, Any] = {
        "seeds": site.seeds,
        "scope": {"allowedDomains": site.hosts, "maxDepth": 10, "allowPrivateNetworks": True},
        "concurrency": {"perWorker": 4, "perHost": 2, "hostDelaySeconds": 0},
        "lease": {"ttlSeconds": 60, "heartbeatSeconds": 0.5, "deadAfterSeconds": 3},
        "output": {"maxFileAgeSeconds": 1},
    }
    for key, value in spec.items():
        base[key] = {**base[key], **value} if isinstance(base.get(key), dict) else value
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "crawlfleet.io/v1alpha1",
                "kind": "CrawlJob",
                "metadata": {"name": name},
                "spec": base,
            }
        )
    )
    return path


def bucket_records(server: S3Server, bucket: str, prefix: str) -> list[dict[str, Any]]:
    """Every page record in the bucket, read from the server's own disk."""
    records = []
    for key, path in server.stored_objects(bucket).items():
        if key.startswith(prefix + "pages/") and key.endswith(".jsonl"):
            records += [json.loads(line) for line in path.read_text().splitlines() if line]
    return records


def crawled_urls(records: list[dict[str, Any]]) -> Counter[str]:
    return Counter(r["url"] for r in records if r["status"] == 200 and not r["failure_class"])


def summary_of(stdout: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    return loaded


def test_a_run_into_a_bucket_holds_every_page_and_verifies(
    s3_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    config = SiteConfig(hosts=2, pages_per_host=60, hostile=False)
    with TestSite(config) as site:
        job = job_file(tmp_path, site, "to-s3")
        destination = f"s3://{s3_bucket}/crawls/to-s3/"
        env = aws_env(s3_server)
        run = crawlfleet(
            "run", str(job), "--output", destination, "--out", str(tmp_path / "run"), "--json",
            cwd=tmp_path, env=env,
        )  # fmt: skip
        stdout, err = run.communicate(timeout=180)
        assert run.returncode == 0, err[-3000:]
        summary = summary_of(stdout)
        expected = {canonicalize(u) for u in site.expected_pages()}

    records = bucket_records(s3_server, s3_bucket, "crawls/to-s3/")
    assert set(crawled_urls(records)) == expected
    assert summary["crawled"] == len(expected)
    assert summary["output"]["destination"] == destination
    stored = s3_server.stored_objects(s3_bucket)
    assert "crawls/to-s3/manifest.json" in stored
    assert "crawls/to-s3/dead-letters.jsonl" in stored
    assert not (tmp_path / "run" / "pages").exists()  # the run's folder keeps only its own
    assert "crawlfleet output ls" in err

    verify = subprocess.run(
        [sys.executable, "-m", "crawlfleet", "output", "verify", destination],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert verify.returncode == 0, verify.stderr
    assert "verified" in verify.stdout
    cat = subprocess.run(
        [sys.executable, "-m", "crawlfleet", "output", "cat", destination],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    lines = [json.loads(line) for line in cat.stdout.splitlines()]
    assert len(lines) == len({line["url"] for line in lines})  # one per URL
    assert {line["url"] for line in lines if line["status"] == 200} == expected

    # One object gone: verify says which and fails.
    page = next(key for key in stored if key.startswith("crawls/to-s3/pages/"))
    stored[page].unlink()
    broken = subprocess.run(
        [sys.executable, "-m", "crawlfleet", "output", "verify", destination],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert broken.returncode == 1
    assert f"missing: {page}" in broken.stderr
    assert "FAILED" in broken.stdout


@pytest.mark.parametrize("case", ["unreachable", "wrong secret", "missing bucket", "read only"])
def test_an_unusable_destination_is_refused_before_anything_is_fetched(
    s3_server: S3Server, tmp_path: Path, case: str
) -> None:
    bucket = f"refused-{case.replace(' ', '-')}"
    env = aws_env(s3_server)
    if case != "missing bucket":
        s3_server.create_bucket(bucket)
    if case == "unreachable":
        env["AWS_ENDPOINT_URL"] = "http://127.0.0.1:9"
    if case == "wrong secret":
        env["AWS_SECRET_ACCESS_KEY"] = "not-the-secret-at-all"
    if case == "read only":
        reader = s3_server.create_user(f"reader-{os.getpid()}")
        bucket = s3_server.create_bucket(bucket + "-ro", grant_read=(reader.access_key_id,))
        env = aws_env(s3_server, reader)
    expected = {
        "unreachable": "cannot connect to the store",
        "wrong secret": "the secret access key does not match the access key id"
        " (SignatureDoesNotMatch)",
        "missing bucket": "the bucket does not exist (NoSuchBucket)",
        "read only": "the credentials may not write to it (AccessDenied)",
    }[case]
    with TestSite(SiteConfig(hosts=1, pages_per_host=5, hostile=False)) as site:
        job = job_file(tmp_path, site, "refused")
        run = crawlfleet(
            "run", str(job), "--output", f"s3://{bucket}/x/", "--out", str(tmp_path / "run"),
            cwd=tmp_path, env=env,
        )  # fmt: skip
        _, err = run.communicate(timeout=120)
        assert run.returncode == 2, err[-3000:]
        assert site.all_requests() == []  # nothing crawled into the void
    (line,) = err.strip().splitlines()  # one sentence
    where = f"s3://{bucket}/x/ at http://127.0.0.1:"
    assert line.startswith(f"crawlfleet: output destination {where}")
    assert line.endswith(expected)
    assert "not-the-secret" not in err
    assert "Traceback" not in err


def test_credentials_in_the_destination_are_refused(s3_server: S3Server, tmp_path: Path) -> None:
    with TestSite(SiteConfig(hosts=1, pages_per_host=5, hostile=False)) as site:
        job = job_file(tmp_path, site, "keys")
        run = crawlfleet(
            "run", str(job), "--output", "s3://AKIAEXAMPLE:s3cret@crawls/x/",
            cwd=tmp_path, env=aws_env(s3_server),
        )  # fmt: skip
        _, err = run.communicate(timeout=60)
    assert run.returncode == 2
    assert "--output: must not hold a user name, password or key" in err
    assert "s3cret" not in err


def test_workers_killed_repeatedly_lose_no_record_in_the_bucket(
    s3_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    """SIGKILL chaos: every page acked has its record in the bucket; a record appears twice
    only for a page whose lease was requeued."""
    config = SiteConfig(hosts=2, pages_per_host=500, hostile=False, latency_seconds=0.02)
    with TestSite(config) as site:
        job = job_file(tmp_path, site, "chaos", concurrency={"perWorker": 8, "perHost": 4})
        run = crawlfleet(
            "run", str(job), "--output", f"s3://{s3_bucket}/chaos/", "--workers", "3",
            "--out", str(tmp_path / "run"), "--json",
            cwd=tmp_path, env=aws_env(s3_server),
        )  # fmt: skip
        kills = 0
        deadline = time.monotonic() + 120
        while kills < 4 and run.poll() is None and time.monotonic() < deadline:
            served = len(site.all_requests())
            if served >= 150 * (kills + 1):
                for worker in ("local-1", "local-2", "local-3", "local-4", "local-5", "local-6"):
                    pid = worker_pid(job, worker)
                    if pid is not None:
                        os.kill(pid, signal.SIGKILL)
                        kills += 1
                        break
            time.sleep(0.05)
        stdout, err = run.communicate(timeout=300)
        assert run.returncode == 0, err[-3000:]
        assert kills >= 2
        summary = summary_of(stdout)
        expected = {canonicalize(u) for u in site.expected_pages()}

    records = crawled_urls(bucket_records(s3_server, s3_bucket, "chaos/"))
    assert set(records) == expected  # every acked page, nothing missing
    assert summary["crawled"] == len(expected)
    duplicates = sum(count - 1 for count in records.values())
    assert duplicates <= summary["requeued"], (duplicates, summary["requeued"])


def test_a_store_down_for_ten_seconds_pauses_the_crawl_and_loses_nothing(
    private_s3_server: S3Server, tmp_path: Path
) -> None:
    server = private_s3_server
    bucket = server.create_bucket("outage")
    # 4 requests at a time, 0.1 s each: ~40 pages/s, so 400 pages outlast the outage's start.
    config = SiteConfig(hosts=2, pages_per_host=200, hostile=False, latency_seconds=0.1)
    with TestSite(config) as site:
        job = job_file(tmp_path, site, "outage")
        run = crawlfleet(
            "run", str(job), "--output", f"s3://{bucket}/", "--workers", "2",
            "--out", str(tmp_path / "run"), "--json",
            cwd=tmp_path, env=aws_env(server),
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while len(site.all_requests()) < 60:
            assert time.monotonic() < deadline, "the crawl did not start"
            assert run.poll() is None, run.communicate()[1][-3000:]
            time.sleep(0.05)
        server.stop()
        # The first upload that fails (within a second or two: files are sealed each second)
        # stops claiming; what was in flight then finishes.
        time.sleep(4)
        paused_at = len(site.all_requests())
        time.sleep(6)
        still_paused_at = len(site.all_requests())
        server.start()
        stdout, err = run.communicate(timeout=240)
        assert run.returncode == 0, err[-3000:]
        summary = summary_of(stdout)
        expected = {canonicalize(u) for u in site.expected_pages()}

    # Paused: nothing was claimed in the outage's last six seconds, and pages were left.
    assert still_paused_at - paused_at <= 2 * 4, (paused_at, still_paused_at)
    assert still_paused_at < len(expected)
    records = crawled_urls(bucket_records(server, bucket, ""))
    assert set(records) == expected
    assert summary["crawled"] == len(expected)
    events = [
        json.loads(line) for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()
    ]
    kinds = [event["kind"] for event in events]
    assert "OutputBlocked" in kinds
    assert kinds.index("OutputResumed") > kinds.index("OutputBlocked")
    assert "output destination is failing" in err


def test_workers_that_cannot_start_end_the_run_with_their_error_and_it_resumes(
    s3_server: S3Server, tmp_path: Path
) -> None:
    """The crash-loop cap: the bucket vanishes mid-crawl and the worker dies, so every new
    worker's test write is refused at start. After three such deaths in a row the run stops
    (exit 2) with the workers' own sentence instead of starting workers forever; nothing is
    lost, and once the bucket is back ``--resume`` completes the crawl into it."""
    bucket = s3_server.create_bucket("vanishing")
    config = SiteConfig(hosts=2, pages_per_host=40, hostile=False, latency_seconds=0.1)
    with TestSite(config) as site:
        job = job_file(tmp_path, site, "vanishing")
        out = tmp_path / "run"
        args = ("run", str(job), "--output", f"s3://{bucket}/", "--workers", "1")
        run = crawlfleet(*args, "--out", str(out), cwd=tmp_path, env=aws_env(s3_server))
        deadline = time.monotonic() + 60
        while len(site.all_requests()) < 10:
            assert time.monotonic() < deadline, "the crawl did not start"
            assert run.poll() is None, run.communicate()[1][-3000:]
            time.sleep(0.05)
        bucket_dir = s3_server.data_dir / bucket
        hidden = bucket_dir.rename(bucket_dir.with_name(bucket + ".away"))  # NoSuchBucket
        pid = worker_pid(job, "local-1")
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        _, err = run.communicate(timeout=120)
        assert run.returncode == 2, err[-3000:]
        assert "crawlfleet: workers fail at start: 3 workers in a row died at start" in err
        assert "the bucket does not exist (NoSuchBucket)" in err
        assert f"crawlfleet run {job} --resume --out {out}" in err
        # Three workers after the one killed, each refused, each saying why in its file.
        for worker in ("local-2", "local-3", "local-4"):
            said = (out / "logs" / f"{worker}.exit").read_text()
            assert said.startswith(f"OutputUnavailable: output destination s3://{bucket}/")
        assert not (out / "logs" / "local-5.log").exists()  # and no more were started
        events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
        (failing,) = [e for e in events if e["kind"] == "OutputUnavailable"]
        assert failing["deaths"] == 3
        assert "NoSuchBucket" in failing["message"]
        assert json.loads((out / "state.json").read_text())["phase"] == "Failed"

        hidden.rename(bucket_dir)
        resumed = crawlfleet(
            *args, "--out", str(out), "--resume", "--json", cwd=tmp_path, env=aws_env(s3_server)
        )
        stdout, err = resumed.communicate(timeout=240)
        assert resumed.returncode == 0, err[-3000:]
        expected = {canonicalize(u) for u in site.expected_pages()}
    assert set(crawled_urls(bucket_records(s3_server, bucket, ""))) == expected
    assert summary_of(stdout)["crawled"] == len(expected)
