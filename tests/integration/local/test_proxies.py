"""``crawlfleet run`` of a job with ``spec.proxy``: the proxy list comes from the environment
(in a cluster, from the job's Secret), every request the site sees came through a proxy, the
credentials are in no file the run writes, and a dead proxy is taken out and avoided.

The proxies are real (tests/support/proxies.py): tinyproxy with Basic authentication in front
of the test site, and a dead one (a port nobody listens on)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from crawlfleet.frontier import canonicalize
from crawlfleet.proxies import PROXY_ENV, ProxyChooser, parse_proxy
from crawlfleet.testsite import SiteConfig, TestSite
from tests.support.proxies import HttpProxy, free_port
from tests.support.runs import (  # noqa: F401 (no_stray_runs: a fixture)
    crawlfleet,
    crawlfleet_done,
    job_for_site,
    no_stray_runs,
)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_stray_runs")]


def _a_dead_proxy_some_host_prefers(site: TestSite, live: HttpProxy) -> tuple[int, str]:
    """A port nobody listens on, as a proxy that at least one of the site's hosts ranks first
    (rendezvous hashing depends on the port), so the crawl must meet it and go around it."""
    hosts = [netloc.rsplit(":", 1)[0] for netloc in site.hosts]
    for _ in range(100):
        port = free_port()
        url = f"http://crawler:dead-pw-41@127.0.0.1:{port}"
        chooser = ProxyChooser(
            (parse_proxy(url), parse_proxy(live.url)), max_failures=1, eject_seconds=1
        )
        if any(chooser.choose(host) == parse_proxy(url) for host in hosts):
            return port, url
    raise AssertionError("no port made a host prefer the dead proxy")


def test_a_crawl_goes_through_its_proxies_and_around_a_dead_one(tmp_path: Path) -> None:
    with (
        TestSite(SiteConfig(hosts=3, pages_per_host=15, hostile=False)) as site,
        HttpProxy(tmp_path / "proxy") as proxy,
    ):
        dead_port, dead = _a_dead_proxy_some_host_prefers(site, proxy)
        document = job_for_site(
            site,
            "proxied",
            proxy={
                "secretRef": {"name": "crawl-proxies"},
                "allowPrivate": True,
                "maxFailures": 1,
                "ejectFor": "10m",
            },
            retry={"requestAttempts": 3, "backoffBaseSeconds": 0.05},
        )
        job = tmp_path / "job.yaml"
        job.write_text(yaml.safe_dump(document))
        env = {**os.environ, PROXY_ENV: f"{dead}\n{proxy.url}"}

        missing = crawlfleet_done("run", str(job), "--out", str(tmp_path / "none"), cwd=tmp_path)
        assert missing.returncode == 2
        assert f"{PROXY_ENV} is not set" in missing.stderr

        run = crawlfleet("run", str(job), "--out", str(tmp_path / "out"), cwd=tmp_path, env=env)
        stdout, stderr = run.communicate(timeout=120)
        assert run.returncode == 0, stderr

        seen = [r for r in site.log.all_requests()]
        assert {canonicalize(r.url) for r in seen if r.path != "/robots.txt"} == {
            canonicalize(url) for url in site.expected_pages()
        }
        assert all(HttpProxy.via_name in (r.via or "") for r in seen)  # none came direct
        assert sorted(proxy.requests()) == sorted(r.url for r in seen)

    out = tmp_path / "out"
    written = [path for path in out.rglob("*") if path.is_file()]
    logs = "\n".join(p.read_text(errors="replace") for p in written if p.suffix == ".log")
    assert f"proxy http://127.0.0.1:{dead_port} taken out of service" in logs
    for path in written:
        data = path.read_bytes()
        assert proxy.password.encode() not in data, path
        assert b"dead-pw-41" not in data, path
    assert proxy.password not in stdout + stderr
