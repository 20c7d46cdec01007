"""The test site's pages as static files behind nginx, for benchmarks.

The Python test site costs CPU on the same two cores the crawlers run on; nginx serving the
same pages (rendered once by :class:`crawlfleet.testsite.SiteGraph`) costs almost none, so
the crawlers, not the site, set the pace. Falls back to the Python site when nginx is not
installed (``apt-get install nginx-light``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from crawlfleet.local.redis_server import free_port
from crawlfleet.testsite import SiteConfig, SiteGraph
from crawlfleet.testsite.graph import page_path


class StaticSite:
    """``with StaticSite(hosts, pages_per_host, root) as setup:`` — setup has hosts and seeds."""

    def __init__(self, hosts: int, pages_per_host: int, root: Path) -> None:
        self.hosts, self.pages_per_host, self.root = hosts, pages_per_host, root
        self.process: subprocess.Popen[Any] | None = None

    def __enter__(self) -> dict[str, Any]:
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        if not Path(nginx).exists():
            return self._python_site()
        addresses = [f"127.0.0.{2 + h}" for h in range(self.hosts + 1)]
        netlocs = [f"{a}:{free_port(a)}" for a in addresses]
        config = SiteConfig(hosts=self.hosts, pages_per_host=self.pages_per_host, hostile=False)
        graph = SiteGraph(config, netlocs[:-1], netlocs[-1])
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
        conf.write_text(
            f"{user}worker_processes 1; pid {self.root}/nginx.pid; error_log {self.root}/error.log;"
            " daemon off; events { worker_connections 4096; } http { access_log off;"
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
        self.process = subprocess.Popen(
            [
                sys.executable, "-m", "crawlfleet.testsite", "--hosts", str(self.hosts),
                "--pages-per-host", str(self.pages_per_host), "--no-hostile",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        assert self.process.stdout is not None
        return {**json.loads(self.process.stdout.readline()), "server": "python"}

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)
