"""A loopback HTTP server that logs every request: what the address guard must keep a crawl from.

It listens on ``127.0.0.1``, the address the system's resolver gives ``localhost`` (the hosts
file), so a connection that resolved ``localhost`` again by itself, past the guard, lands here
and is seen. It serves what a hostile site serves to steer a crawler somewhere else:

* ``/redirect/<target>``: a 302 to the target;
* ``/refresh/<target>``: a 200 page whose ``<meta http-equiv="refresh">`` names it, its query
  in non-ASCII letters (:data:`COMPACT_QUERY`): Scrapy reads a refresh in a page's first 4,096
  characters only, so a hostile page writes 1,500 letters that percent-encode to 9,000;
* ``/files/<target>``: a 200 page linking the target as a file (``<a class="file">``, what the
  test project's graph spider hands Scrapy's FilesPipeline with ``-a files=1``);
* anything else: a small 200 page.

Targets (:data:`TARGETS`): ``metadata``, the cloud metadata address with a query that takes the
URL past the frontier's 8,192 characters (``crawlfleet.frontier``'s bound on a URL), and
``here``, this server's own ``/watched`` with the same query, so that a request the guard let
through would be seen in :attr:`WatchedServer.paths`.
"""

from __future__ import annotations

import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Final

__all__ = ["COMPACT_QUERY", "OVER_LONG_QUERY", "WatchedServer"]

#: A query that takes any URL past 8,192 characters.
OVER_LONG_QUERY: Final = "pad=" + "a" * 9000
#: One that does once percent-encoded (each letter is six characters then).
COMPACT_QUERY: Final = "pad=" + "\u00e9" * 1500
_METADATA: Final = "http://169.254.169.254/latest/meta-data/iam/security-credentials/"


class WatchedServer:
    """See the module docstring; a context manager (start, stop)."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def target(self, name: str, query: str = OVER_LONG_QUERY) -> str:
        """``metadata`` or ``here`` (see the module docstring), with ``query``."""
        return f"{_METADATA if name == 'metadata' else self.url('/watched')}?{query}"

    def reachable_as(self, name: str) -> bool:
        """Whether a client resolving ``name`` by itself (the system's resolver) reaches this
        server: what a connect past the guard would do, so a rebinding test can fail."""
        before = len(self.paths)
        with urllib.request.urlopen(self.url("/probe", host=name), timeout=5) as response:
            response.read()
        return self.paths[before:] == ["/probe"]

    def watched(self) -> list[str]:
        """The requests that reached ``/watched``: none, unless the guard let one through."""
        with self._lock:
            return [path for path in self.paths if path.startswith("/watched")]

    def __enter__(self) -> WatchedServer:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with server._lock:
                    server.paths.append(self.path)
                kind, _, name = self.path.strip("/").partition("/")
                if kind == "redirect":
                    self._answer(302, b"", location=server.target(name))
                elif kind == "refresh":
                    target = server.target(name, COMPACT_QUERY)
                    self._page(f'<meta http-equiv="refresh" content="0; url={target}">')
                elif kind == "files":
                    target = server.target(name)
                    self._page(f'<a class="file" href="{target}">the report</a>')
                else:
                    self._page("<p>nothing here</p>")

            def _page(self, head: str) -> None:
                body = f"<html><head><title>t</title>{head}</head><body></body></html>"
                self._answer(200, body.encode())

            def _answer(self, status: int, body: bytes, location: str | None = None) -> None:
                self.send_response(status)
                if location is not None:
                    self.send_header("Location", location)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                """Quiet: the test reads ``paths``."""

        return Handler
