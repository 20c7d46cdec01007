"""A local run's Redis password: generated, and never in a command line (``/proc/<pid>/cmdline``
and ``ps`` show every process's arguments to every user of the machine).

The run's private redis-server gets it as configuration on its stdin; workers, forked by the
zygote or started as interpreters, get the URL in their environment (readable by their user
only); ``crawlfleet enqueue`` reads it from a 0600 file beside the Redis's data.
"""

from __future__ import annotations

import json
import stat
import time
from pathlib import Path

import pytest
import redis
import yaml

from crawlfleet.config import DrainConfig
from crawlfleet.local.processes import REDIS_URL_VARIABLE, LocalProcessBackend
from crawlfleet.local.redis_server import RedisServer
from crawlfleet.testsite import SiteConfig, TestSite
from tests.support.runs import crawlfleet, job_for_site, no_stray_runs  # noqa: F401

pytestmark = [pytest.mark.usefixtures("no_stray_runs")]

#: Long enough that the run is still crawling while the test looks at its processes.
SLOW_SITE = SiteConfig(hosts=1, pages_per_host=60, hostile=False, latency_seconds=0.05)


def descendants(root: int) -> dict[int, str]:
    """Every process below ``root``, with its command line as ``ps`` shows it."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # gone meanwhile
            parents[int(entry.name)] = int(fields[1])
    found: dict[int, str] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in found:
                try:
                    found[pid] = (
                        Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                    )
                except OSError:
                    continue
                frontier.append(pid)
    return found


def test_a_local_run_keeps_its_redis_password_out_of_every_command_line(tmp_path: Path) -> None:
    with TestSite(SLOW_SITE) as site:
        job = job_for_site(
            site, "secrets", concurrency={"perWorker": 2, "perHost": 1, "hostDelaySeconds": 0.1}
        )
        job_file = tmp_path / "job.yaml"
        job_file.write_text(yaml.safe_dump(job))
        out = tmp_path / "out"
        run = crawlfleet("run", str(job_file), "--out", str(out), "--workers", "2", cwd=tmp_path)
        deadline = time.monotonic() + 60
        processes: dict[int, str] = {}
        while len([r for r in site.all_requests() if r.status == 200]) < 5 or not any(
            " worker " in line for line in processes.values()
        ):
            assert time.monotonic() < deadline, "the crawl did not start"
            assert run.poll() is None, run.communicate()[1][-3000:]
            time.sleep(0.05)
            processes = descendants(run.pid)
        processes = descendants(run.pid)  # every worker and the server, mid-crawl
        state = json.loads((out / "state.json").read_text())
        password_file = Path(state["redisPasswordFile"])
        password = password_file.read_text().strip()
        port = int(state["redisUrl"].rsplit(":", 1)[1].split("/")[0])
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=port).ping()  # loopback is everyone's: a password is needed
        assert redis.Redis(port=port, password=password).ping()
        run.terminate()
        run.communicate(timeout=90)

    assert len(password) >= 32
    assert stat.S_IMODE(password_file.stat().st_mode) == 0o600
    assert password not in (out / "state.json").read_text()
    assert state["redisUrl"] == f"redis://127.0.0.1:{port}/0"
    servers = [line for line in processes.values() if "redis-server" in line]
    workers = [line for line in processes.values() if " worker " in line]
    assert servers, processes
    assert workers, processes
    for line in processes.values():
        assert password not in line, line
        assert "requirepass" not in line, line


def test_a_worker_started_without_the_zygote_gets_the_url_in_its_environment(
    tmp_path: Path,
) -> None:
    """The backend's fallback path (an interpreter per worker): the URL, password included, is
    in the worker's environment, which only its user may read, and nowhere in its argv."""
    password = "not-in-argv-7d1f"
    with RedisServer(tmp_path / "redis", password=password) as server:
        assert password not in " ".join(server.command())
        job = tmp_path / "job.yaml"
        job.write_text("apiVersion: crawlfleet.io/v1alpha1\nkind: CrawlJob\nmetadata: {name: x}\n")
        backend = LocalProcessBackend(job, server.url, tmp_path, drain=DrainConfig())
        try:
            worker_id = backend.start()
            pid = backend._children[worker_id].process.pid
            argv = Path(f"/proc/{pid}/cmdline").read_bytes()
            environ_file = Path(f"/proc/{pid}/environ")
            environ = environ_file.read_bytes().split(b"\0")
            mode = stat.S_IMODE(environ_file.stat().st_mode)
        finally:
            backend.stop_all()
    assert b"worker" in argv
    assert password.encode() not in argv
    assert f"{REDIS_URL_VARIABLE}={server.url}".encode() in environ
    assert mode == 0o400
