"""A real master and its replica on loopback: two redis-servers joined with REPLICAOF.

What a managed Redis with one replica is, without a cluster: the master takes the writes and
streams them to the replica, which confirms them (what ``WAIT`` counts). A replica can be
made to fall behind for real by stopping its process (SIGSTOP): it then confirms nothing
until it is continued (SIGCONT), while the master keeps taking writes.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

import redis

from crawlfleet.local.redis_server import RedisServer

__all__ = ["ReplicatedPair"]

_READY_SECONDS = 30.0


class ReplicatedPair:
    """Start a master and one replica of it; :meth:`start` returns once the replica is in
    sync (its first full copy done) and the master counts it online."""

    def __init__(self, data_dir: Path) -> None:
        self.master = RedisServer(data_dir / "master")
        self.replica = RedisServer(data_dir / "replica")

    @property
    def url(self) -> str:
        """The master's URL: where the frontier writes."""
        return self.master.url

    def start(self) -> ReplicatedPair:
        try:
            self.master.start()
            self.replica.start()
            with _client(self.replica) as replica:
                replica.execute_command("REPLICAOF", self.master.host, self.master.port)
            self.wait_in_sync()
        except BaseException:
            self.stop()
            raise
        return self

    def wait_in_sync(self, timeout_seconds: float = _READY_SECONDS) -> None:
        """Until the replica's link is up and the master lists it online."""
        deadline = time.monotonic() + timeout_seconds
        with _client(self.master) as master, _client(self.replica) as replica:
            while True:
                seen = master.info("replication")
                link = replica.info("replication")
                online = str(seen.get("slave0", {}).get("state", "")) == "online"
                if online and link.get("master_link_status") == "up":
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the replica did not come in sync: {seen} / {link}")
                time.sleep(0.02)

    @contextmanager
    def replica_stopped(self) -> Iterator[None]:
        """The replica's process stopped (SIGSTOP) for the block: it confirms nothing."""
        process = self.replica.process
        assert process is not None, "start() first"
        process.send_signal(signal.SIGSTOP)
        try:
            yield
        finally:
            process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        for server in (self.replica, self.master):
            if server.process is not None:
                server.process.send_signal(signal.SIGCONT)  # a stopped one cannot shut down
            server.stop()

    def __enter__(self) -> ReplicatedPair:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@contextmanager
def _client(server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis(host=server.host, port=server.port, decode_responses=True)
    try:
        yield client
    finally:
        client.close()
