"""Output benchmark: what a bucket and fsync cost a crawl, and what a SIGKILL costs the bucket.

    python -m bench.output [--quick] [--json]

Serves the test site as static files (bench/static_site.py, as bench.crawl does) and crawls
it to the end, again and again, with one ``crawlfleet worker`` (private redis-server,
everything on), each crawl a fresh job, into one of three destinations:

- ``file``: a folder (each sealed file fsynced, renamed, its folder fsynced);
- ``s3``: a bucket of the tests' real S3-compatible server (versitygw on loopback,
  tests/s3server/build.sh), credentials from the AWS environment as a user sets them;
- ``file_nofsync``: the same folder store with ``os.fsync`` a no-op (bench/output_worker.py),
  the baseline that says what durability on a local disk costs.

All three ack a page only once its file is "durable" (docs/output.md). One crawl takes a few
seconds, and a shared machine moves a single crawl's rate by ±30 %, so the variants run in
interleaved rounds (the order rotated each round) after one unmeasured warm-up crawl of each;
every figure is a median over the rounds, with its spread beside it, and each ratio is the
median of the rounds' own ratios (the two crawls of a round ran seconds apart, under the same
load). ``s3_vs_file_rate`` is what a bucket costs against a local disk (target ≥ 0.9);
``file_fsync_vs_nofsync_rate`` what fsync costs the folder (target ≥ 0.9: it is batched, one
per sealed file and one per folder, never one per page).

Then a kill run: two workers into a bucket, one SIGKILLed mid-crawl *by construction* -- once
the frontier counts pages crawled, leases are outstanding and the victim's heartbeat shows
pages in its hands -- and its leases requeued at once, as ``crawlfleet run`` does when a worker
dies. The leases that requeue finds are ``kill_found_leases``: the bench's own check fails when
it is 0 (the kill proved nothing) or when ``acked_missing_after_kill`` (pages the frontier
counts as crawled with no record in the bucket, read from the server's own disk) is not 0.
``duplicates_after_kill`` are records of pages crawled twice. Rates are pages per second of
wall time, start-up included; worker CPU per page (user + system of the worker process) is the
steadier figure on a shared machine. The load average at the start and the end is reported:
run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from bench.crawl import job_document
from bench.static_site import StaticSite
from crawlfleet.crawljob import parse_crawljob
from crawlfleet.frontier import Frontier, FrontierSettings
from crawlfleet.local.redis_server import RedisServer
from tests.support.s3 import REGION, S3Server, versitygw_binary

HOSTS: Final = 4
VARIANTS: Final = ("file", "s3", "file_nofsync")
TARGET_RATIO: Final = 0.9
#: The kill lands once this share of the site is crawled (and leases are out), and must land
#: before KILL_LATEST of it is: the rest of the crawl is what the survivor has to redo.
KILL_EARLIEST: Final = 0.2
KILL_LATEST: Final = 0.7
KILL_HOST_DELAY: Final = 0.008
#: Every crawl seals its files each second (output.maxFileAgeSeconds' minimum): a crawl of a
#: few seconds then commits a file as often as a long one does per 30 s or 10,000 records,
#: more commits per page than the defaults make, so the costs measured are upper bounds; and
#: pages are acked while the crawl runs, which is what gives the kill something to find.
OUTPUT: Final = {"format": "jsonl", "maxFileAgeSeconds": 1}


@dataclass(frozen=True, slots=True)
class Crawl:
    """One measured crawl: one worker, the whole site, into one destination."""

    variant: str
    pages: int
    seconds: float
    cpu_seconds: float
    files: int

    @property
    def rate(self) -> float:
        return self.pages / self.seconds

    @property
    def cpu_ms_per_page(self) -> float:
        return 1000 * self.cpu_seconds / self.pages


def _job(name: str, setup: dict[str, Any], **spec: Any) -> dict[str, Any]:
    document = job_document(name, setup)
    document["spec"].update(output=OUTPUT, **spec)
    return document


def _worker(
    job_file: Path,
    redis_url: str,
    worker_id: str,
    output: str,
    env: dict[str, str],
    *,
    fsync: bool = True,
) -> subprocess.Popen[bytes]:
    switch = [] if fsync else ["--no-fsync"]
    return subprocess.Popen(
        [
            sys.executable, "-m", "bench.output_worker", *switch, "--log-level", "warning",
            "worker", str(job_file), "--redis-url", redis_url, "--worker-id", worker_id,
            "--output", output,
        ],
        env=env,
    )  # fmt: skip


def _children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def _frontier(redis_url: str, document: dict[str, Any]) -> Frontier:
    job = parse_crawljob(document)
    return await Frontier.connect(redis_url, FrontierSettings.from_spec(job.job_id, job.spec))


class Bench:
    """The site, the bucket, the Redis and the environment every crawl shares."""

    def __init__(
        self,
        setup: dict[str, Any],
        redis_url: str,
        server: S3Server,
        bucket: str,
        env: dict[str, str],
        tmp: Path,
    ) -> None:
        self.setup, self.redis_url, self.server, self.bucket = setup, redis_url, server, bucket
        self.env, self.tmp = env, tmp

    def _job_file(self, name: str, **spec: Any) -> tuple[Path, dict[str, Any]]:
        document = _job(name, self.setup, **spec)
        job_file = self.tmp / f"{name}.yaml"
        job_file.write_text(yaml.safe_dump(document))
        return job_file, document

    async def crawl(self, variant: str, name: str) -> Crawl:
        """One worker crawling the whole site into ``variant``'s destination, as job ``name``."""
        job_file, document = self._job_file(name)
        folder = self.tmp / f"out-{name}"
        output = f"s3://{self.bucket}/{name}/" if variant == "s3" else str(folder)
        cpu_before = _children_cpu_seconds()
        started = time.perf_counter()
        proc = _worker(
            job_file, self.redis_url, f"{name}-0", output, self.env, fsync=variant != "file_nofsync"
        )
        if proc.wait(900) != 0:
            raise RuntimeError(f"{name}: the worker exited with {proc.returncode}")
        elapsed = time.perf_counter() - started
        cpu = _children_cpu_seconds() - cpu_before
        frontier = await _frontier(self.redis_url, document)
        try:
            stats = await frontier.stats()
        finally:
            await frontier.aclose()
        if not stats.complete:
            raise RuntimeError(f"{name}: the crawl did not complete: {stats}")
        if variant == "s3":
            keys = self.server.stored_objects(self.bucket)
            files = sum(key.startswith(f"{name}/pages/") for key in keys)
        else:
            files = len(list((folder / "pages").iterdir()))
        return Crawl(variant, stats.crawled, elapsed, cpu, files)

    def bucket_urls(self, prefix: str) -> dict[str, int]:
        """Successful page records in the bucket by URL, from the server's own disk."""
        found: dict[str, int] = {}
        for key, path in self.server.stored_objects(self.bucket).items():
            if key.startswith(prefix + "pages/"):
                for line in path.read_text().splitlines():
                    record = json.loads(line)
                    if not record["failure_class"]:
                        found[record["url"]] = found.get(record["url"], 0) + 1
        return found

    async def kill_run(self) -> dict[str, Any]:
        """Two workers into the bucket; one SIGKILLed mid-crawl, its leases requeued at once."""
        name = "kill"
        # Paced (a few ms between two pages of a host: ~8 s for the quick site), so the files
        # sealed each second give the kill a window of several seconds to land in.
        concurrency = {"perWorker": 64, "perHost": 16, "hostDelaySeconds": KILL_HOST_DELAY}
        job_file, document = self._job_file(
            name,
            lease={"ttlSeconds": 5, "heartbeatSeconds": 0.5, "deadAfterSeconds": 3},
            concurrency=concurrency,
        )
        pages = self.setup["pages"]
        output = f"s3://{self.bucket}/{name}/"
        victim_id = f"{name}-0"
        victim = _worker(job_file, self.redis_url, victim_id, output, self.env)
        survivor = _worker(job_file, self.redis_url, f"{name}-1", output, self.env)
        frontier = await _frontier(self.redis_url, document)
        try:
            deadline = time.monotonic() + 300
            while True:
                if victim.poll() is not None:
                    raise RuntimeError(f"kill run: the victim exited ({victim.returncode}) first")
                if time.monotonic() > deadline:
                    raise RuntimeError("kill run: the crawl never reached the kill point")
                stats = await frontier.stats()
                holds = any(
                    beat.worker == victim_id
                    and beat.number("in_flight") + beat.number("output_waiting")
                    for beat in await frontier.workers()
                )
                late = stats.crawled >= KILL_LATEST * pages
                if late or (stats.crawled >= KILL_EARLIEST * pages and stats.leased and holds):
                    break
                await asyncio.sleep(0.02)
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            crawled_at_kill = stats.crawled
            # What crawlfleet run does the moment a worker dies: its leases go back now.
            moved = await frontier.requeue_owner(victim_id)
            await frontier.forget_worker(victim_id)
            if survivor.wait(900) != 0:
                raise RuntimeError(f"kill run: the survivor exited with {survivor.returncode}")
            stats = await frontier.stats()
        finally:
            await frontier.aclose()
        if not stats.complete:
            raise RuntimeError(f"kill run did not complete: {stats}")
        stored = self.bucket_urls(f"{name}/")
        return {
            "crawled_at_kill": crawled_at_kill,
            "kill_found_leases": moved.requeued + moved.dead,
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


def filesystem_of(path: Path) -> str:
    """The type of the filesystem ``path`` is on (ext4, tmpfs...): on tmpfs fsync is free."""
    resolved, best, kind = str(path.resolve()), "", "unknown"
    with open("/proc/self/mounts") as mounts:
        for line in mounts:
            fields = line.split()
            point = fields[1]
            inside = resolved == point or resolved.startswith(point.rstrip("/") + "/")
            if inside and len(point) >= len(best):
                best, kind = point, fields[2]
    return kind


def summarize(crawls: list[Crawl], rounds: int) -> dict[str, Any]:
    """Medians and spreads of each variant, and each ratio as the median of its rounds'."""
    by_variant = {v: [c for c in crawls if c.variant == v] for v in VARIANTS}
    results: dict[str, Any] = {}
    for variant, runs in by_variant.items():
        rates = [c.rate for c in runs]
        results[f"{variant}_pages_per_s"] = round(statistics.median(rates), 1)
        results[f"{variant}_pages_per_s_rounds"] = [round(r, 1) for r in rates]
        results[f"{variant}_pages_per_s_spread"] = round((max(rates) - min(rates)) / min(rates), 3)
        results[f"{variant}_worker_cpu_ms_per_page"] = round(
            statistics.median(c.cpu_ms_per_page for c in runs), 3
        )
        results[f"{variant}_files_per_crawl"] = statistics.median(c.files for c in runs)
    for key, top, bottom in (
        ("s3_vs_file_rate", "s3", "file"),
        ("file_fsync_vs_nofsync_rate", "file", "file_nofsync"),
    ):
        ratios = [by_variant[top][r].rate / by_variant[bottom][r].rate for r in range(rounds)]
        results[key] = round(statistics.median(ratios), 3)
        results[f"{key}_rounds"] = [round(ratio, 3) for ratio in ratios]
    return results


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smaller site, 5 rounds (~2 min)")
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    parser.add_argument("--rounds", type=int, help="measured rounds (default 5 quick, 7 full)")
    args = parser.parse_args()
    pages_per_host = 1000 if args.quick else 5000
    rounds = args.rounds or (5 if args.quick else 7)
    load_before = os.getloadavg()
    started = time.perf_counter()
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
            bench = Bench(setup, redis.url, server, bucket, env, tmp)
            # Unmeasured: warms the site's page cache, the server and the interpreter's files.
            for variant in VARIANTS:
                await bench.crawl(variant, f"warm-{variant}".replace("_", "-"))
            crawls: list[Crawl] = []
            for r in range(rounds):
                order = VARIANTS[r % len(VARIANTS) :] + VARIANTS[: r % len(VARIANTS)]
                for variant in order:
                    crawl = await bench.crawl(variant, f"r{r}-{variant}".replace("_", "-"))
                    crawls.append(crawl)
                    print(
                        f"round {r + 1}/{rounds} {variant:<13} {crawl.rate:7.0f} pages/s"
                        f" ({crawl.pages} pages, {crawl.cpu_ms_per_page:.2f} ms worker CPU/page,"
                        f" {crawl.files} page files)",
                        flush=True,
                    )
            killed = await bench.kill_run()
            print(
                f"kill run: killed at {killed['crawled_at_kill']} of {setup['pages']} pages"
                f" crawled holding {killed['kill_found_leases']} leases;"
                f" {killed['acked_missing']} acked pages missing from the bucket,"
                f" {killed['duplicates']} duplicates, {killed['requeued']} requeued"
            )
            checks = {
                "kill_found_leases": killed["kill_found_leases"] > 0,
                "kill_mid_crawl": killed["crawled_at_kill"] < KILL_LATEST * setup["pages"],
                "acked_missing_zero": killed["acked_missing"] == 0,
            }
            results: dict[str, Any] = {
                "quick": args.quick,
                "rounds": rounds,
                "pages": setup["pages"],
                "site_server": setup["server"],
                "s3_server": {"name": "versitygw", "version": server_version(binary)},
                "output_filesystem": filesystem_of(tmp),
                **summarize(crawls, rounds),
                "acked_missing_after_kill": killed["acked_missing"],
                "duplicates_after_kill": killed["duplicates"],
                "requeued_after_kill": killed["requeued"],
                "kill_found_leases": killed["kill_found_leases"],
                "crawled_at_kill": killed["crawled_at_kill"],
                "crawled_after_kill": killed["crawled"],
                "checks": checks,
                "checks_passed": all(checks.values()),
            }
    results["load_average"] = [round(load_before[0], 2), round(os.getloadavg()[0], 2)]
    results["seconds"] = round(time.perf_counter() - started, 1)
    print(
        f"s3/file rate: {results['s3_vs_file_rate']:.2f}, fsync/no-fsync rate:"
        f" {results['file_fsync_vs_nofsync_rate']:.2f} (targets ≥ {TARGET_RATIO});"
        f" load average {results['load_average'][0]} -> {results['load_average'][1]}"
    )
    for check, passed in checks.items():
        if not passed:
            print(f"bench.output: check failed: {check}", file=sys.stderr)
    if args.json:
        print(json.dumps(results, sort_keys=True))
    return 0 if results["checks_passed"] else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
