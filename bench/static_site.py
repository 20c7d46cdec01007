"""The test site's pages as static files behind nginx, for benchmarks.

The Python test site costs CPU on the same two cores the crawlers run on; nginx serving the
same pages (rendered once by :class:`crawlfleet.testsite.SiteGraph`) costs almost none, so
the crawlers, not the site, set the pace. Falls back to the Python site when nginx is not
installed (``apt-get install nginx-light``).

With ``record_requests`` the site also keeps a log of what it served (nginx's access log, or
the Python site's record file), so a benchmark can count the reachable pages a crawl never
requested from the server's side, whatever the crawler itself claims.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from crawlfleet.frontier import canonicalize
from crawlfleet.local.redis_server import free_port
from crawlfleet.testsite import SiteConfig, SiteGraph
from crawlfleet.testsite.graph import page_path

#: One access-log line per request: ``127.0.0.2:40123/d1/p8.html 200 1796094000.123``
#: (netloc+URI, status, the time the response was logged).
_LOG_FORMAT = "log_format served '$server_addr:$server_port$request_uri $status $msec';"

#: A page as the site knows it, whatever port it listened on: (host index, path).
ServedPage = tuple[int, str]


class StaticSite:
    """``with StaticSite(hosts, pages_per_host, root) as setup:`` — setup has hosts and seeds."""

    def __init__(
        self, hosts: int, pages_per_host: int, root: Path, *, record_requests: bool = False
    ) -> None:
        self.hosts, self.pages_per_host, self.root = hosts, pages_per_host, root
        self.record_requests = record_requests
        self.process: subprocess.Popen[Any] | None = None
        self.config = SiteConfig(hosts=hosts, pages_per_host=pages_per_host, hostile=False)
        self.graph: SiteGraph | None = None
        self._requests_file = root / "requests.log"
        self._python = False
        self._served_at: list[float] = []

    def __enter__(self) -> dict[str, Any]:
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        self.root.mkdir(parents=True, exist_ok=True)
        if not Path(nginx).exists():
            return self._python_site()
        addresses = [f"127.0.0.{2 + h}" for h in range(self.hosts + 1)]
        netlocs = [f"{a}:{free_port(a)}" for a in addresses]
        graph = self.graph = SiteGraph(self.config, netlocs[:-1], netlocs[-1])
        servers = []
        for h, netloc in enumerate(netlocs[:-1]):
            docroot = self.root / f"host{h}"
            for i in range(self.pages_per_host):
                path = page_path(i)
                target = docroot / ("index.html" if path == "/" else path.lstrip("/"))
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(graph.render_page(h, i))
            robots = graph.robots_txt(h)
            if robots is not None:
                (docroot / "robots.txt").write_bytes(robots)
            servers.append(
                f"server {{ listen {netloc}; root {docroot}; location / {{ try_files $uri "
                f"$uri/index.html =404; }} types {{ text/html html; text/plain txt; }} "
                f"default_type text/html; charset utf-8; }}"
            )
        conf = self.root / "nginx.conf"
        # Our temporary folders are private to us: nginx's workers must run as us to read them.
        user = "user root root; " if os.geteuid() == 0 else ""
        # Unbuffered: a line per request, written before nginx answers the next one, so the
        # log is complete however nginx is stopped. A write(2) per page is noise next to a fetch.
        access_log = (
            f"{_LOG_FORMAT} access_log {self._requests_file} served;"
            if self.record_requests
            else "access_log off;"
        )
        conf.write_text(
            f"{user}worker_processes 1; pid {self.root}/nginx.pid; error_log {self.root}/error.log;"
            f" daemon off; events {{ worker_connections 4096; }} http {{ {access_log}"
            " keepalive_requests 100000; sendfile on; " + " ".join(servers) + " }\n"
        )
        self.process = subprocess.Popen([nginx, "-c", str(conf), "-p", str(self.root)])
        time.sleep(0.5)
        return {
            "hosts": netlocs[:-1],
            "seeds": graph.seeds(),
            "pages": graph.page_count,
            "server": "nginx",
        }

    def _python_site(self) -> dict[str, Any]:
        self._python = True
        record = ["--record-file", str(self._requests_file)] if self.record_requests else []
        self.process = subprocess.Popen(
            [
                sys.executable, "-m", "crawlfleet.testsite", "--hosts", str(self.hosts),
                "--pages-per-host", str(self.pages_per_host), "--no-hostile", *record,
            ],
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        assert self.process.stdout is not None
        ready = json.loads(self.process.stdout.readline())
        self.graph = SiteGraph(self.config, ready["hosts"], ready["out_of_scope_host"])
        return {**ready, "server": "python"}

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)

    def reachable(self) -> set[ServedPage]:
        """Every page a complete crawl must request: the graph's BFS from the seeds."""
        assert self.graph is not None, "the site was never started"
        return {(h, page_path(i)) for h, i in self.graph.expected_refs()}

    def page_of(self, url: str) -> ServedPage | None:
        """The in-scope normal page a URL names, as (host index, path); None for any other."""
        assert self.graph is not None, "the site was never started"
        netloc, _, path = canonicalize(url).split("://", 1)[1].partition("/")
        host = self._host_index.get(netloc)
        if host is None or path == "robots.txt":
            return None
        return host, "/" + path

    @functools.cached_property
    def _host_index(self) -> dict[str, int]:
        """Canonical netloc -> host index; computed once the site has its ports."""
        assert self.graph is not None, "the site was never started"
        netlocs = self.graph.netlocs[: self.hosts]
        return {canonicalize(f"http://{n}/").split("/")[2]: h for h, n in enumerate(netlocs)}

    def served(self) -> set[ServedPage]:
        """Pages answered with 200 (robots.txt aside); read once the site has stopped."""
        if not self.record_requests:
            raise RuntimeError("StaticSite(record_requests=True) keeps the log served() reads")
        self._served_at = []
        served = set()
        for url, status, at in self._requests():
            page = self.page_of(url)
            if status == 200 and page is not None:
                served.add(page)
                if at is not None:
                    self._served_at.append(at)
        return served

    def served_span(self) -> tuple[float, float] | None:
        """Wall-clock times of the first and last page served (nginx only; after served()).

        What lies outside the span is the crawler's start-up and its completion tail, so a
        benchmark can state the crawl rate and the fixed costs apart.
        """
        at = self._served_at
        return (min(at), max(at)) if at else None

    def first_refetch_after(self, moment: float) -> float | None:
        """Wall-clock time of the first request at or after ``moment`` for a page requested
        before it (nginx only): after a worker is killed at ``moment``, the first of its
        requeued pages fetched again by another worker -- the crawl moving on without it."""
        before: set[str] = set()
        after: list[tuple[float, str]] = []
        for url, _status, at in self._requests():
            if at is None or self.page_of(url) is None:
                continue
            if at < moment:
                before.add(url)
            else:
                after.append((at, url))
        return min((at for at, url in after if url in before), default=None)

    def _requests(self) -> Iterator[tuple[str, int | None, float | None]]:
        """(absolute URL, status, time logged) of every request, from whichever server ran."""
        if not self._requests_file.exists():
            return
        with open(self._requests_file) as f:
            for line in f:
                if self._python:  # its record file has no wall-clock times
                    record = json.loads(line)
                    yield record["url"], record["status"], None
                else:
                    target, status, at = line.split()
                    yield f"http://{target}", int(status), float(at)
