"""Output benchmark: the same crawl into a folder and into a bucket, then a kill into a bucket.

    python -m bench.output [--quick] [--json]

Serves the test site as static files (bench/static_site.py, as bench.crawl does) and crawls
it to the end with one ``crawlfleet worker`` (private redis-server, everything on) twice:

- ``file``: into a folder (each sealed file fsynced, renamed, its folder fsynced);
- ``s3``: into a bucket of the tests' real S3-compatible server (versitygw on loopback,
  tests/s3server/build.sh), credentials from the AWS environment as a user sets them.

Both ack a page only once its file is durable (docs/output.md), so the ratio
``s3_vs_file_rate`` is what a bucket costs against a local disk (target ≥ 0.9). Then a kill
run: two workers into a bucket, one SIGKILLed mid-crawl, the other finishing the job (short
leases, so the dead one's come back within seconds). ``acked_missing_after_kill`` counts pages
the frontier counts as crawled (acked) whose record is not in the bucket (target 0), read from
the server's own disk; ``duplicates_after_kill`` beside the ``requeued`` leases that explain
them. Rates are pages per second of wall time, start-up included, after one unmeasured warm-up
crawl; one run of each, in a row: run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench.crawl import job_document
from bench.static_site import StaticSite
from crawlfleet.crawljob import parse_crawljob
from crawlfleet.frontier import Frontier, FrontierSettings, FrontierStats
from crawlfleet.local.redis_server import RedisServer
from tests.support.s3 import REGION, S3Server, versitygw_binary

HOSTS = 4


def _job(name: str, setup: dict[str, Any], **spec: Any) -> dict[str, Any]:
    document = job_document(name, setup)
    document["spec"].update(spec)
    return document


def _worker(
    job_file: Path, redis_url: str, worker_id: str, output: str, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable, "-m", "crawlfleet", "--log-level", "warning", "worker",
            str(job_file), "--redis-url", redis_url, "--worker-id", worker_id,
            "--output", output,
        ],
        env=env,
    )  # fmt: skip


async def _stats(redis_url: str, document: dict[str, Any]) -> FrontierStats:
    job = parse_crawljob(document)
    frontier = await Frontier.connect(redis_url, FrontierSettings.from_spec(job.job_id, job.spec))
    try:
        return await frontier.stats()
    finally:
        await frontier.aclose()


async def crawl_rate(
    setup: dict[str, Any], redis_url: str, name: str, output: str, env: dict[str, str], tmp: Path
) -> tuple[float, int]:
    """Pages/s of one worker crawling the whole site into ``output``, and pages crawled."""
    document = _job(name, setup)
    job_file = tmp / f"{name}.yaml"
    job_file.write_text(yaml.safe_dump(document))
    started = time.perf_counter()
    proc = _worker(job_file, redis_url, f"{name}-0", output, env)
    if proc.wait(900) != 0:
        raise RuntimeError(f"{name}: the worker exited with {proc.returncode}")
    elapsed = time.perf_counter() - started
    stats = await _stats(redis_url, document)
    if not stats.complete:
        raise RuntimeError(f"{name}: the crawl did not complete: {stats}")
    return stats.crawled / elapsed, stats.crawled


def bucket_urls(server: S3Server, bucket: str, prefix: str) -> dict[str, int]:
    """Successful page records in the bucket by URL, from the server's own disk."""
    found: dict[str, int] = {}
    for key, path in server.stored_objects(bucket).items():
        if key.startswith(prefix + "pages/"):
            for line in path.read_text().splitlines():
                record = json.loads(line)
                if not record["failure_class"]:
                    found[record["url"]] = found.get(record["url"], 0) + 1
    return found


async def kill_run(
    setup: dict[str, Any],
    redis_url: str,
    server: S3Server,
    bucket: str,
    env: dict[str, str],
    tmp: Path,
) -> dict[str, int]:
    """Two workers into the bucket, one SIGKILLed once a third of the site is fetched."""
    name = "kill"
    document = _job(
        name, setup, lease={"ttlSeconds": 5, "heartbeatSeconds": 0.5, "deadAfterSeconds": 3}
    )
    job_file = tmp / f"{name}.yaml"
    job_file.write_text(yaml.safe_dump(document))
    output = f"s3://{bucket}/{name}/"
    victim = _worker(job_file, redis_url, f"{name}-0", output, env)
    survivor = _worker(job_file, redis_url, f"{name}-1", output, env)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and victim.poll() is None:
        stats = await _stats(redis_url, document)
        if stats.fetched + stats.crawled >= setup["pages"] // 3:
            break
        await asyncio.sleep(0.05)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    if survivor.wait(900) != 0:
        raise RuntimeError(f"kill run: the survivor exited with {survivor.returncode}")
    stats = await _stats(redis_url, document)
    if not stats.complete:
        raise RuntimeError(f"kill run did not complete: {stats}")
    stored = bucket_urls(server, bucket, f"{name}/")
    return {
        "crawled": stats.crawled,
        "acked_missing": max(0, stats.crawled - len(stored)),
        "duplicates": sum(count - 1 for count in stored.values()),
        "requeued": stats.requeued,
    }


def server_version(binary: Path) -> str:
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, check=True)
    for line in out.stdout.splitlines():
        if line.startswith("Version"):
            return line.split(":", 1)[1].strip()
    return "unknown"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smaller site; about a minute")
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    args = parser.parse_args()
    pages_per_host = 1000 if args.quick else 5000
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        binary = versitygw_binary()
        with (
            StaticSite(HOSTS, pages_per_host, tmp / "site") as setup,
            S3Server(tmp / "s3", binary=binary) as server,
            RedisServer(tmp / "redis") as redis,
        ):
            bucket = server.create_bucket("bench")
            keys = server.root_credentials
            env = {
                **os.environ,
                "AWS_ACCESS_KEY_ID": keys.access_key_id,
                "AWS_SECRET_ACCESS_KEY": keys.secret_access_key,
                "AWS_ENDPOINT_URL": server.endpoint_url,
                "AWS_REGION": REGION,
            }
            # Unmeasured: the first crawl warms the site's page cache and the interpreter's.
            await crawl_rate(setup, redis.url, "warm-up", str(tmp / "out-warm"), env, tmp)
            file_rate, file_pages = await crawl_rate(
                setup, redis.url, "file", str(tmp / "out-file"), env, tmp
            )
            print(f"file destination: {file_rate:.0f} pages/s ({file_pages} pages)")
            s3_rate, s3_pages = await crawl_rate(
                setup, redis.url, "s3", f"s3://{bucket}/s3/", env, tmp
            )
            print(f"s3 destination:   {s3_rate:.0f} pages/s ({s3_pages} pages)")
            killed = await kill_run(setup, redis.url, server, bucket, env, tmp)
            print(
                f"kill run: {killed['acked_missing']} acked pages missing from the bucket,"
                f" {killed['duplicates']} duplicates, {killed['requeued']} requeued"
            )
            results: dict[str, Any] = {
                "quick": args.quick,
                "pages": setup["pages"],
                "site_server": setup["server"],
                "s3_server": {"name": "versitygw", "version": server_version(binary)},
                "file_pages_per_s": round(file_rate, 1),
                "s3_pages_per_s": round(s3_rate, 1),
                "s3_vs_file_rate": round(s3_rate / file_rate, 3),
                "acked_missing_after_kill": killed["acked_missing"],
                "duplicates_after_kill": killed["duplicates"],
                "requeued_after_kill": killed["requeued"],
                "crawled_after_kill": killed["crawled"],
            }
    print(f"s3/file rate: {results['s3_vs_file_rate']:.2f} (target ≥ 0.9)")
    if args.json:
        print(json.dumps(results, sort_keys=True))


if __name__ == "__main__":
    asyncio.run(main())
