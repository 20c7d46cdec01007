"""File downloads: crawlfleet's rate against curl's, what a kill costs, memory per download.

    python -m bench.files [--quick] [--json]

Serves generated files from the file test site (crawlfleet/testsite/files.py, its ``ranges``
host: 206 with ETag and Last-Modified) in this process, on loopback, and downloads them:

- ``curl``: Debian's curl writing one large file (``--quick``: 256 MiB, else 1 GiB) into a
  temporary folder; ``curl_fsync`` is the same file then fsynced (what crawlfleet promises:
  bytes on the disk, not in the page cache);
- ``crawlfleet``: ``crawlfleet run`` of a pure batch download (the file's URL as the only
  seed, ``maxDepth: 0``, a ``files`` rule matching it) into a temporary folder on the same
  disk: streamed into its ``.part``, checkpointed every ``partSizeBytes``, verified, finished
  into ``files/sha256/<ab>/<sha256>``.

A rate is the file's size over the time from the site receiving the request to the file being
complete: curl exiting (or its file fsynced), crawlfleet's file present at its content address
(the bench polls for it). Start-up (the private Redis, the worker) is not in it: both are timed
from the request. Interleaved rounds, best of each. ``files_vs_curl_rate`` is crawlfleet's over
plain curl's (target ≥ 0.8); ``files_vs_curl_fsync_rate`` against curl plus an fsync.

Then the kill: the same download with the site throttled (so that it lasts seconds), the worker
SIGKILLed once the site has sent half of the file, the run left to go on (it starts a worker
and requeues the lease, the new worker resumes from the part's last checkpoint with ``Range``
and ``If-Range``). ``resume_bytes_ratio`` is the bytes the site sent for the file over its size
(target ≤ 1.2: at most a part and the socket buffers are sent twice); the stored file's
sha256 is checked against the site's, and the resuming request's ``Range`` is reported.

Then memory: four files downloaded at once by one worker (``files.perHost: 4``, each response
throttled so that they overlap); ``peak_rss_per_download_mib`` is the worker's peak RSS
(VmHWM, sampled) minus its RSS just before the first file request, over the downloads seen
in flight together. The load average at the start and end is reported: run it on a quiet
machine.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from crawlfleet.crawljob import CrawlJobSpec
from crawlfleet.local.processes import WORKER_PREFIX
from crawlfleet.testsite.files import FileRequestRecord, FileSite, FileSiteConfig
from tests.support.processes import worker_pid

MIB: Final = 1 << 20
TARGET_RATE_RATIO: Final = 0.8
TARGET_RESUME_RATIO: Final = 1.2
#: The kill lands once the site has sent this share of the file.
KILL_AT: Final = 0.5
#: How long the throttled download of the kill run would take whole (so the kill finds it
#: mid-way whatever the machine's speed).
KILL_RUN_SECONDS: Final = 8.0
CONCURRENT: Final = 4
#: How long each of the concurrent downloads lasts (throttled), so that they overlap.
CONCURRENT_SECONDS: Final = 4.0
#: A run that has not finished by then failed.
RUN_TIMEOUT_SECONDS: Final = 300.0
_TICKS: Final = os.sysconf("SC_CLK_TCK")
WORKER: Final = f"{WORKER_PREFIX}1"  # the first worker `crawlfleet run` starts


@dataclass(frozen=True, slots=True)
class Scale:
    size: int
    rounds: int


QUICK: Final = Scale(size=256 * MIB, rounds=2)
FULL: Final = Scale(size=1024 * MIB, rounds=3)


def pipeline_unavailable() -> str | None:
    """Why crawlfleet cannot download files on this checkout; None when it can."""
    if "files" not in CrawlJobSpec.model_fields:
        return "this checkout's CrawlJob has no spec.files (issue 24's spec part)"
    for module in ("crawlfleet.crawler.files.download", "crawlfleet.crawler.worker.files"):
        try:
            __import__(module)
        except ImportError as error:
            return f"this checkout has no {module} (issue 24's pipeline): {error}"
    return None


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def _file_request(site: FileSite, path: str, nth: int = 0) -> FileRequestRecord | None:
    matching = [r for r in site.requests("ranges") if r.path == path]
    return matching[nth] if len(matching) > nth else None


def _wait_for(
    condition: Callable[[], bool], timeout: float, poll: float = 0.005, what: str = ""
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what or 'condition'} after {timeout:.0f} s")
        time.sleep(poll)


# ---------------------------------------------------------------------------- curl


def curl_binary() -> str:
    """Debian's curl: found on PATH, else installed with apt (it is in every Debian)."""
    found = shutil.which("curl")
    if found is None:
        subprocess.run(["apt-get", "install", "-y", "-q", "curl"], check=True)
        found = shutil.which("curl")
    if found is None:
        raise RuntimeError("curl is not installed and apt-get could not install it")
    return found


@dataclass(frozen=True, slots=True)
class Timed:
    """One download: seconds from the request's arrival to the file complete, and the CPU
    seconds the downloading process spent meanwhile (None when it could not be read)."""

    seconds: float
    cpu_seconds: float | None


def curl_round(site: FileSite, name: str, size: int, folder: Path) -> tuple[Timed, float]:
    """curl's download, and the seconds until its file was also fsynced."""
    site.reset()
    url = site.file_url("ranges", name, size)
    target = folder / "curl.bin"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([curl_binary(), "-sS", "--fail", "-o", str(target), url], check=True)
    done = time.monotonic()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(target, "rb") as written:
        os.fsync(written.fileno())
    synced = time.monotonic()
    record = _file_request(site, _path(name, size))
    if record is None or not record.completed:
        raise RuntimeError(f"the site did not send the whole file to curl: {record}")
    if target.stat().st_size != size:
        raise RuntimeError(f"curl wrote {target.stat().st_size} bytes of {size}")
    target.unlink()
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return Timed(done - record.at, cpu), synced - record.at


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a live process (/proc/<pid>/stat), None once gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICKS


# ---------------------------------------------------------------------------- crawlfleet


def _path(name: str, size: int) -> str:
    return f"/files/{name}?size={size}"


def batch_job(name: str, site: FileSite, urls: list[str], **files: Any) -> dict[str, Any]:
    """A pure batch download: the file URLs as seeds, maxDepth 0, a rule that takes them."""
    return {
        "apiVersion": "crawlfleet.io/v1alpha1",
        "kind": "CrawlJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "seeds": urls,
            "scope": {
                "allowedDomains": [site.hosts["ranges"]],
                "maxDepth": 0,
                "allowPrivateNetworks": True,
            },
            "files": {"rules": [{"match": r"/files/"}], **files},
            "concurrency": {"perWorker": 8, "perHost": CONCURRENT, "hostDelaySeconds": 0},
            # A killed worker's lease comes back in seconds, not the default minute.
            "lease": {"ttlSeconds": 4, "heartbeatSeconds": 0.5, "deadAfterSeconds": 3},
            "retry": {"backoffBaseSeconds": 0.2, "backoffMaxSeconds": 1},
            "output": {"format": "jsonl", "maxFileAgeSeconds": 1},
        },
    }


@dataclass
class Run:
    """One ``crawlfleet run`` of a batch job, in its own folder."""

    folder: Path
    job_file: Path
    destination: Path
    process: subprocess.Popen[bytes]

    @classmethod
    def start(cls, tmp: Path, job: dict[str, Any]) -> Run:
        folder = tmp / job["metadata"]["name"]
        folder.mkdir()
        job_file = folder / "job.yaml"
        job_file.write_text(yaml.safe_dump(job))
        destination = folder / "destination"
        command = [
            sys.executable, "-m", "crawlfleet", "--log-level", "warning", "run", str(job_file),
            "--out", str(folder / "run"), "--output", str(destination), "--workers", "1",
        ]  # fmt: skip
        with open(folder / "run.log", "wb") as log:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        return cls(folder, job_file, destination, process)

    def stored(self, sha256: str) -> Path:
        return self.destination / "files" / "sha256" / sha256[:2] / sha256

    def worker(self, timeout: float = 60) -> int:
        pid: list[int] = []

        def found() -> bool:
            got = worker_pid(self.job_file, WORKER)
            if got is not None:
                pid.append(got)
            self._check_running()
            return bool(pid)

        _wait_for(found, timeout, poll=0.02, what="worker process")
        return pid[0]

    def _check_running(self) -> None:
        if self.process.poll() is not None:
            raise RuntimeError(
                f"crawlfleet run exited with {self.process.returncode}: {self.tail()}"
            )

    def wait(self, timeout: float = RUN_TIMEOUT_SECONDS) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired as expired:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(60)
            raise RuntimeError(
                f"crawlfleet run did not finish in {timeout:.0f} s: {self.tail()}"
            ) from expired

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def tail(self) -> str:
        lines = (self.folder / "run.log").read_text(errors="replace").strip().splitlines()
        return " | ".join(lines[-3:])[-600:]


def crawlfleet_round(site: FileSite, name: str, size: int, tmp: Path, n: int) -> Timed:
    """crawlfleet's download: until the file is at its content address."""
    site.reset()
    sha, path = site.sha256(name, size), _path(name, size)
    run = Run.start(tmp, batch_job(f"rate-{n}", site, [site.file_url("ranges", name, size)]))
    try:
        pid = run.worker()
        _wait_for(lambda: _file_request(site, path) is not None or run.process.poll() is not None,
                  RUN_TIMEOUT_SECONDS, what="file request")  # fmt: skip
        cpu_before = _cpu_seconds(pid)
        _wait_for(lambda: run.stored(sha).exists() or run.process.poll() is not None,
                  RUN_TIMEOUT_SECONDS, what="stored file")  # fmt: skip
        done = time.monotonic()
        cpu_after = _cpu_seconds(pid)
        if not run.stored(sha).exists():
            raise RuntimeError(f"crawlfleet run ended without the file: {run.tail()}")
        record = _file_request(site, path)
        if record is None:
            raise RuntimeError("the site saw no request for the file")
        if run.wait() != 0:
            raise RuntimeError(f"crawlfleet run exited with {run.process.returncode}")
    finally:
        run.stop()
    shutil.rmtree(run.folder)
    cpu = None if cpu_before is None or cpu_after is None else cpu_after - cpu_before
    return Timed(done - record.at, cpu)


def kill_run(site: FileSite, name: str, size: int, tmp: Path) -> dict[str, Any]:
    """The throttled download, its worker SIGKILLed at half, resumed by the run."""
    site.reset()
    path = _path(name, size)
    site.throttle(int(size / KILL_RUN_SECONDS))
    run = Run.start(tmp, batch_job("kill", site, [site.file_url("ranges", name, size)]))
    try:
        pid = run.worker()
        _wait_for(lambda: site.bytes_sent(path) >= KILL_AT * size, RUN_TIMEOUT_SECONDS,
                  what="half of the file sent")  # fmt: skip
        os.kill(pid, signal.SIGKILL)
        sent_at_kill = site.bytes_sent(path)
        site.throttle(0)
        code = run.wait()
    finally:
        site.throttle(0)
        run.stop()
    requests = [r for r in site.requests("ranges") if r.path == path]
    sha = site.sha256(name, size)
    stored = run.stored(sha)
    digest = _sha256(stored) if stored.exists() else None
    ranges = [r.range_header for r in requests]
    figures = {
        "exit_code": code,
        "requests": len(requests),
        "ranges": ranges,
        "if_ranges": [r.if_range for r in requests],
        "sent_at_kill_mib": round(sent_at_kill / MIB, 1),
        "bytes_sent_mib": round(site.bytes_sent(path) / MIB, 1),
        "resume_bytes_ratio": site.bytes_sent(path) / size,
        "resumed_from_mib": _resumed_from(ranges),
        "sha256_matches": digest == sha,
    }
    shutil.rmtree(run.folder)
    return figures


def _resumed_from(ranges: list[str | None]) -> float | None:
    for header in ranges:
        match = re.fullmatch(r"bytes=(\d+)-", header or "")
        if match is not None:
            return round(int(match[1]) / MIB, 1)
    return None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as data:
        while chunk := data.read(4 * MIB):
            digest.update(chunk)
    return digest.hexdigest()


def _status_kib(pid: int, field: str) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def memory_run(site: FileSite, size: int, tmp: Path) -> dict[str, Any]:
    """``CONCURRENT`` throttled downloads at once in one worker: its peak RSS per download."""
    site.reset()
    each = size // CONCURRENT
    names = [f"parallel-{k}.mp4" for k in range(CONCURRENT)]
    site.throttle(int(each / CONCURRENT_SECONDS))
    urls = [site.file_url("ranges", n, each) for n in names]
    run = Run.start(tmp, batch_job("memory", site, urls, perHost=CONCURRENT))
    try:
        pid = run.worker()
        before = _status_kib(pid, "VmRSS")
        while not any(r.path.startswith("/files/") for r in site.requests("ranges")):
            before = _status_kib(pid, "VmRSS") or before
            run._check_running()
            time.sleep(0.01)
        peak = 0
        while run.process.poll() is None and not all(
            run.stored(site.sha256(n, each)).exists() for n in names
        ):
            peak = max(peak, _status_kib(pid, "VmHWM"))
            time.sleep(0.05)
        peak = max(peak, _status_kib(pid, "VmHWM"))
        code = run.wait()
    finally:
        site.throttle(0)
        run.stop()
    together = _most_at_once([r for r in site.requests("ranges") if r.path.startswith("/files/")])
    shutil.rmtree(run.folder)
    return {
        "exit_code": code,
        "file_mib": each / MIB,
        "in_flight_together": together,
        "worker_rss_before_mib": round(before / 1024, 1),
        "worker_peak_rss_mib": round(peak / 1024, 1),
        "peak_rss_per_download_mib": round((peak - before) / 1024 / max(together, 1), 2),
    }


def _figures(rounds: list[Timed], size: int) -> dict[str, Any]:
    """Best rate and least CPU per MiB over the rounds, and each round's seconds."""
    cpu = [r.cpu_seconds for r in rounds if r.cpu_seconds is not None]
    return {
        "rate_mib_per_s": round(size / MIB / min(r.seconds for r in rounds), 1),
        "cpu_ms_per_mib": round(1000 * min(cpu) / (size / MIB), 2) if cpu else None,
        "seconds": [round(r.seconds, 3) for r in rounds],
    }


def _most_at_once(records: list[FileRequestRecord]) -> int:
    events = sorted([(r.at, 1) for r in records] + [(r.ended or float("inf"), -1) for r in records])
    most = current = 0
    for _, step in events:
        current += step
        most = max(most, current)
    return most


# ---------------------------------------------------------------------------- report


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.files", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a 256 MiB file, two rounds")
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    parser.add_argument(
        "--folder", type=Path, help="where the downloads go (curl's and crawlfleet's) [$TMPDIR]"
    )
    args = parser.parse_args()
    scale = QUICK if args.quick else FULL
    name = "large.mp4"
    results: dict[str, Any] = {
        "quick": args.quick,
        "file_mib": scale.size / MIB,
        "load_average": [_load()],
    }
    started = time.perf_counter()
    reason = pipeline_unavailable()
    with (
        FileSite(FileSiteConfig()) as site,
        tempfile.TemporaryDirectory(dir=args.folder) as tmp_name,
    ):
        tmp = Path(tmp_name).resolve()
        site.sha256(name, scale.size)  # cached before any timing
        curl: list[Timed] = []
        curl_synced: list[float] = []
        ours: list[Timed] = []
        for n in range(scale.rounds):
            plain, synced = curl_round(site, name, scale.size, tmp)
            curl.append(plain)
            curl_synced.append(synced)
            if reason is None:
                ours.append(crawlfleet_round(site, name, scale.size, tmp, n))
        results["curl"] = _figures(curl, scale.size)
        rate = results["curl"]["rate_mib_per_s"]
        rate_fsync = round(scale.size / MIB / min(curl_synced), 1)
        results["curl"]["fsync_rate_mib_per_s"] = rate_fsync
        print(f"curl: {rate:.0f} MiB/s ({rate_fsync:.0f} MiB/s with an fsync)")
        if reason is None:
            results["crawlfleet"] = _figures(ours, scale.size)
            ours_rate = results["crawlfleet"]["rate_mib_per_s"]
            results["files_vs_curl_rate"] = ours_rate / rate
            results["files_vs_curl_fsync_rate"] = ours_rate / rate_fsync
            print(f"crawlfleet: {ours_rate:.0f} MiB/s")
            kill = kill_run(site, name, scale.size, tmp)
            results["kill"] = kill
            results["resume_bytes_ratio"] = kill["resume_bytes_ratio"]
            print(
                f"kill at {kill['sent_at_kill_mib']} MiB: {kill['requests']} requests"
                f" ({kill['ranges']}), {kill['bytes_sent_mib']} MiB sent,"
                f" sha256 {'right' if kill['sha256_matches'] else 'WRONG'}"
            )
            memory = memory_run(site, scale.size, tmp)
            results["memory"] = memory
            results["peak_rss_per_download_mib"] = memory["peak_rss_per_download_mib"]
            print(
                f"memory: {memory['in_flight_together']} downloads at once,"
                f" worker RSS {memory['worker_rss_before_mib']} -> "
                f"{memory['worker_peak_rss_mib']} MiB"
            )
        else:
            results["not_measured"] = {
                "reason": reason,
                "figures": [
                    "files_vs_curl_rate",
                    "resume_bytes_ratio",
                    "peak_rss_per_download_mib",
                ],
            }
            print(f"crawlfleet not measured: {reason}")
    results["load_average"].append(_load())
    results["seconds"] = round(time.perf_counter() - started, 1)
    for key, target, better in (
        ("files_vs_curl_rate", TARGET_RATE_RATIO, "≥"),
        ("resume_bytes_ratio", TARGET_RESUME_RATIO, "≤"),
        ("peak_rss_per_download_mib", None, ""),
    ):
        value = results.get(key)
        shown = "not measured" if value is None else f"{value:.2f}"
        print(f"{key}: {shown}" + (f" (target {better} {target})" if target else ""))
    if args.json:
        print(json.dumps(results, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
