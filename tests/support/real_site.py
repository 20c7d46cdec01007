"""A site nobody here wrote: a Debian ``*-doc`` HTML tree served by nginx on loopback, with a
robots.txt written the way real sites write them.

Our test site only has the corners we thought of; PostgreSQL's manual (``postgresql-doc-15``,
about 1,170 pages, relative links, ``index.html`` at the root) has the shapes a real
documentation site has. ``scripts/test`` installs nginx and the package; a machine without them
fails here with the command that installs them, never skips.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import time
from collections import Counter
from pathlib import Path
from types import TracebackType

from crawlfleet.local.redis_server import free_port

__all__ = ["ROBOTS_TXT", "DocSite", "postgresql_manual"]

#: As a real site writes it: a group for everyone with an Allow carved out of a Disallow (the
#: longest match wins, RFC 9309), search and print views kept out, and a group for one bad
#: bot. Every ``sql-*`` page but ``sql-commands.html`` is disallowed: most manual pages link
#: one of them (the SQL command reference), as real sites' pages link their search and edit
#: views.
ROBOTS_TXT = """\
# robots.txt of the manual
User-agent: *
Disallow: /sql-
Allow: /sql-commands.html
Disallow: /search
Disallow: /*?print=

User-agent: BadBot
Disallow: /
"""

_INSTALL = "apt-get install nginx-light postgresql-doc-15 (scripts/test does)"


def postgresql_manual() -> Path:
    """The HTML tree of Debian's PostgreSQL manual; AssertionError naming the package if absent."""
    found = sorted(glob.glob("/usr/share/doc/postgresql-doc-*/html/index.html"))
    assert found, f"PostgreSQL's manual is not installed: {_INSTALL}"
    return Path(found[-1]).parent


class DocSite:
    """nginx serving ``root`` on 127.0.0.5 with :data:`ROBOTS_TXT`, logging every request.

    With ``mirror``, the same tree is served on 127.0.0.6 too, as a site's mirror serves the
    same files under other URLs (``mirror_netloc``; its requests in a log of their own).
    """

    def __init__(self, root: Path, work: Path, *, mirror: bool = False) -> None:
        self.root = root
        self.work = work
        self.mirror = mirror
        self.netloc = ""
        self.mirror_netloc = ""
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> Path:
        return self.work / "access.log"

    @property
    def mirror_log(self) -> Path:
        return self.work / "mirror.log"

    def __enter__(self) -> DocSite:
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        assert Path(nginx).exists(), f"nginx is not installed: {_INSTALL}"
        self.work.mkdir(parents=True, exist_ok=True)
        (self.work / "robots.txt").write_text(ROBOTS_TXT)
        self.netloc = f"127.0.0.5:{free_port('127.0.0.5')}"
        servers = [self._server(self.netloc, self.log)]
        if self.mirror:
            self.mirror_netloc = f"127.0.0.6:{free_port('127.0.0.6')}"
            servers.append(self._server(self.mirror_netloc, self.mirror_log))
        user = "user root root; " if os.geteuid() == 0 else ""
        conf = self.work / "nginx.conf"
        conf.write_text(
            f"{user}worker_processes 1; pid {self.work}/nginx.pid; error_log {self.work}/error.log;"
            " daemon off; events { worker_connections 256; } http {"
            " log_format plain '$request_uri $status $http_if_none_match|$http_if_modified_since';"
            " types { text/html html; text/css css;"
            f" image/png png; image/svg+xml svg; text/plain txt; }} {' '.join(servers)} }}\n"
        )
        self._process = subprocess.Popen([nginx, "-c", str(conf), "-p", str(self.work)])
        deadline = time.monotonic() + 10
        while not self.log.exists():  # nginx opens its log once it listens
            assert self._process.poll() is None, (self.work / "error.log").read_text()
            assert time.monotonic() < deadline, "nginx did not start"
            time.sleep(0.02)
        return self

    def _server(self, netloc: str, log: Path) -> str:
        """One nginx ``server`` block: the tree and robots.txt on ``netloc``, logged to ``log``."""
        return (
            f"server {{ listen {netloc}; root {self.root}; access_log {log} plain;"
            f" location = /robots.txt {{ alias {self.work}/robots.txt; }} }}"
        )

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(10)

    def requests(self, *, mirror: bool = False) -> Counter[str]:
        """Paths requested so far (of the mirror with ``mirror``), robots.txt included, with
        how many times."""
        log = self.mirror_log if mirror else self.log
        return Counter(line.split(" ", 1)[0] for line in log.read_text().splitlines())

    def entries(self) -> list[tuple[str, int, bool]]:
        """Every request in order: (path, status, whether it was conditional: it carried
        ``If-None-Match`` or ``If-Modified-Since``)."""
        found = []
        for line in self.log.read_text().splitlines():
            path, status, conditions = line.split(" ", 2)
            found.append((path, int(status), conditions.strip() not in ("", "|", "-|-")))
        return found

    def pages(self) -> set[str]:
        """Every HTML page of the tree, as the path a crawler requests."""
        return {"/" + path.name for path in self.root.glob("*.html")}
