"""Real forward proxies on loopback for spec.proxy's tests, each with authentication and a log
of what went through it.

- :class:`HttpProxy`: tinyproxy (Debian's package), ``BasicAuth``, a log line per request and a
  ``Via`` header on each request it forwards, which is how a test proves that every request the
  site saw came through the proxy.
- :class:`SocksProxy`: microsocks (Debian's package), SOCKS5 with a user and password, one log
  line per connection (``connected to 127.0.0.1:8000``).

Neither is a test double: both are the programs people run.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Final, Self

USER: Final = "crawler"
PASSWORD: Final = "pr0xy-s3cret-7f3a"
_START_SECONDS: Final = 20.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_listening(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + _START_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the proxy exited ({process.returncode}): {log.read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"the proxy did not listen on {port}: {log.read_text()}")


class _Proxy:
    scheme: str

    def __init__(self, workdir: Path, *, password: str = PASSWORD) -> None:
        self.workdir = workdir
        self.password = password
        self.port = 0
        self.log_path = workdir / f"{type(self).__name__.lower()}.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The URL a Secret holds: credentials included."""
        return f"{self.scheme}://{USER}:{self.password}@127.0.0.1:{self.port}"

    @property
    def label(self) -> str:
        """How crawlfleet names it: without credentials."""
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def _command(self) -> list[str]:
        raise NotImplementedError

    def start(self) -> Self:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                self._command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        _wait_listening(self.port, self._process, self.log_path)
        return self

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()


class HttpProxy(_Proxy):
    """tinyproxy (Debian's package) with Basic authentication: one request per connection, each
    logged, and a ``Via`` header on what it forwards, so the site can tell what came through."""

    scheme = "http"
    #: What tinyproxy writes into the ``Via`` header of each request it forwards.
    via_name = "crawlfleet-test-proxy"

    def _command(self) -> list[str]:
        config = self.workdir / "tinyproxy.conf"
        config.write_text(
            f"Port {self.port}\nListen 127.0.0.1\nTimeout 60\nMaxClients 100\n"
            f'LogFile "{self.log_path}"\nLogLevel Connect\n'
            f'BasicAuth {USER} {self.password}\nViaProxyName "{self.via_name}"\n'
        )
        binary = shutil.which("tinyproxy") or "/usr/bin/tinyproxy"
        return [binary, "-d", "-c", str(config)]

    def requests(self) -> list[str]:
        """The URL of each request the proxy took (``http://127.0.0.1:8000/path``)."""
        return re.findall(r"Request \(file descriptor \d+\): [A-Z]+ (\S+) HTTP/", self.log())


class SocksProxy(_Proxy):
    """microsocks, SOCKS5 with a user and password."""

    scheme = "socks5"

    def _command(self) -> list[str]:
        binary = shutil.which("microsocks") or "/usr/bin/microsocks"
        return [
            binary, "-i", "127.0.0.1", "-p", str(self.port), "-u", USER, "-P", self.password,
        ]  # fmt: skip

    def connections(self) -> list[str]:
        """``host:port`` of each connection the proxy made for a client."""
        return re.findall(r"connected to (\S+)", self.log())
