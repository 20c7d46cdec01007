"""A private redis-server process: the embedded default's Redis, and the tests' real one.

It listens on loopback only, on a free port, with its data in a directory of ours, so it
never touches a system Redis. With ``appendonly`` an interrupted crawl resumes from disk.

Its password (``crawlfleet run`` generates one: loopback is shared by every user and process of
the machine) reaches it as configuration on its stdin (``redis-server -``), never in argv:
``/proc/<pid>/cmdline`` and ``ps`` show every process's arguments to every user.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import BinaryIO
from urllib.parse import quote

from crawlfleet.errors import ConfigError, FrontierUnavailable
from crawlfleet.local.lifetime import die_with_parent

__all__ = ["RedisServer", "Reply", "find_redis_server", "free_port"]

#: A parsed RESP2 reply: a status or bulk string, an integer, nil, or an array of them.
Reply = str | int | None | list["Reply"]

INSTALL_HINT = (
    "redis-server was not found on PATH. Install it (Debian/Ubuntu: apt-get install "
    "redis-server; macOS: brew install redis) or pass --redis-url to use an existing Redis."
)


def find_redis_server() -> str:
    path = shutil.which("redis-server")
    if path is None:
        raise ConfigError(INSTALL_HINT)
    return path


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """Start, wait for and stop one redis-server bound to ``host`` (127.0.0.1)."""

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        appendonly: bool = False,
        modules: tuple[Path, ...] = (),
        password: str | None = None,
        executable: str | None = None,
        die_with_parent: bool = False,
        own_session: bool = False,
        host: str = "127.0.0.1",
    ) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.port = port or free_port(host)
        self.appendonly = appendonly
        self.modules = modules
        self.password = password
        self.executable = executable or find_redis_server()
        #: SIGKILLed by the kernel when the thread that started it ends (local/lifetime.py):
        #: a run's own server; start it from the main thread.
        self.die_with_parent = die_with_parent
        #: In a session (and process group) of its own: the terminal's Ctrl-C, sent to the
        #: foreground process group, does not reach it, so the run that owns it stops it
        #: last, after its workers, with a SHUTDOWN that completes the AOF.
        self.own_session = own_session
        #: The address it binds (the e2e real node's pods need one that is not loopback).
        self.host = host
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        auth = f":{quote(self.password, safe='')}@" if self.password else ""
        return f"redis://{auth}{self.host}:{self.port}/0"

    @property
    def address(self) -> str:
        """The URL without the password: what may be written down or shown."""
        return f"redis://{self.host}:{self.port}/0"

    def write_password(self, path: Path) -> None:
        """The password in a file only this user can read (0600), for ``crawlfleet enqueue``
        (a process of the same user) to find; nothing if there is none."""
        if not self.password:
            return
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as file:
            os.fchmod(descriptor, 0o600)  # one left by an earlier run keeps its old mode
            file.write(self.password + "\n")

    def __repr__(self) -> str:
        return f"RedisServer(port={self.port}, data_dir={str(self.data_dir)!r})"

    def command(self) -> list[str]:
        args = [
            self.executable,
            "--bind", self.host,
            "--port", str(self.port),
            "--dir", str(self.data_dir),
            "--daemonize", "no",
            "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", "everysec",
            "--logfile", str(self.data_dir / "redis.log"),
        ]  # fmt: skip
        for module in self.modules:
            args += ["--loadmodule", str(module)]
        if self.password:
            args.append("-")  # the rest of the configuration (the password) from stdin: last
        return args

    def start(self, timeout_seconds: float = 10.0) -> RedisServer:
        self.launch()
        return self.wait_ready(timeout_seconds)

    def launch(self) -> None:
        """Start the process, without waiting: from the thread that should be its parent."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            self.command(),
            stdin=subprocess.PIPE if self.password else subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            preexec_fn=die_with_parent() if self.die_with_parent else None,
            start_new_session=self.own_session,
        )
        if self.password and self.process.stdin is not None:
            # A quoted config value: redis' own escapes, so any generated text survives.
            quoted = self.password.replace("\\", "\\\\").replace('"', '\\"')
            with self.process.stdin:
                self.process.stdin.write(f'requirepass "{quoted}"\n'.encode())

    def wait_ready(self, timeout_seconds: float = 10.0) -> RedisServer:
        """Wait until the launched server answers PING (its AOF loaded); FrontierUnavailable
        with its log's end when it exits or stays silent."""
        assert self.process is not None, "launch() first"
        deadline = time.monotonic() + timeout_seconds
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                log = (self.data_dir / "redis.log").read_text(errors="replace")[-2000:]
                raise FrontierUnavailable(
                    f"redis-server exited with {self.process.returncode}: {log}"
                )
            if self._ping():
                return self
            time.sleep(0.005)
        self.stop()
        raise FrontierUnavailable(f"redis-server on port {self.port} did not answer PING")

    def exited(self) -> int | None:
        """The exit code of a server that was started and is gone (one waitpid), else None."""
        return None if self.process is None else self.process.poll()

    def _ping(self) -> bool:
        try:
            return b"PONG" in self._command(b"PING")
        except OSError:
            return False

    def _auth(self) -> bytes:
        return _request(b"AUTH", self.password.encode()) if self.password else b""

    def _command(self, name: bytes) -> bytes:
        """One argument-less command on a fresh connection (AUTH first): the raw reply.

        Plain sockets, not redis-py: start and stop are synchronous and must work before
        (and after) anything async exists.
        """
        with socket.create_connection((self.host, self.port), timeout=0.5) as sock:
            sock.sendall(self._auth() + _request(name))
            return sock.recv(256)

    def call(self, *args: str, timeout_seconds: float = 5.0) -> Reply:
        """One command on a fresh connection (AUTH first), its reply parsed: for the few
        administrative commands a local run sends (a cluster's CLUSTER ...). An error reply
        is :class:`FrontierUnavailable` naming the command."""
        with socket.create_connection((self.host, self.port), timeout=timeout_seconds) as sock:
            sock.sendall(self._auth() + _request(*(arg.encode() for arg in args)))
            with sock.makefile("rb") as stream:
                try:
                    if self.password:
                        _read_reply(stream)
                    return _read_reply(stream)
                except FrontierUnavailable as error:
                    raise FrontierUnavailable(
                        f"redis-server on port {self.port} refused {args[0]}: {error}"
                    ) from None

    def stop(self, timeout_seconds: float = 10.0) -> None:
        """SHUTDOWN, then SIGTERM if refused, then SIGKILL if it hangs.

        Both SHUTDOWN and SIGTERM sync the AOF and exit, but SIGTERM is only acted on at
        redis' next cron tick (up to 100 ms later, at the default hz of 10); SHUTDOWN at once.
        """
        if self.process is None or self.process.poll() is not None:
            return
        try:
            reply = self._command(b"SHUTDOWN")  # on success redis closes without a reply
        except OSError:
            reply = b"-"
        if b"\r\n-" in b"\r\n" + reply:  # an error line: AUTH or SHUTDOWN refused
            self.process.terminate()
        try:
            self.process.wait(timeout_seconds)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _request(*args: bytes) -> bytes:
    """A command as RESP: an array of bulk strings."""
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def _read_reply(stream: BinaryIO) -> Reply:
    """One RESP2 reply read from ``stream``."""
    line = stream.readline()
    if not line.endswith(b"\r\n"):
        raise ConnectionError("redis-server closed the connection mid-reply")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        raise FrontierUnavailable(rest.decode(errors="replace"))  # call() names the command
    if kind == b":":
        return int(rest)
    if kind == b"$":
        size = int(rest)
        return None if size < 0 else stream.read(size + 2)[:-2].decode(errors="replace")
    if kind == b"*":
        count = int(rest)
        return None if count < 0 else [_read_reply(stream) for _ in range(count)]
    raise ConnectionError(f"not a RESP reply: {line[:40]!r}")
