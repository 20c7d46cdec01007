"""A test double of a network that fails at the worst moment: a loopback TCP proxy to Redis
that, once armed, forwards a command, lets Redis answer it, and hangs up on the client
instead of passing the answer on. The client saw its connection break mid-call; Redis applied
the command. This is the one case no real part produces on demand (CLIENT KILL from another
connection cannot land between a script's execution and its reply).

Everything else is relayed byte for byte; one proxy serves any number of connections.
"""

from __future__ import annotations

import asyncio
import contextlib

__all__ = ["DroppingProxy"]


class DroppingProxy:
    """``async with DroppingProxy(host, port) as proxy``: clients connect to ``proxy.url``."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self._upstream = (upstream_host, upstream_port)
        self._server: asyncio.Server | None = None
        self._armed: bytes | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        #: How many replies were swallowed (a test asserts the drop really happened).
        self.dropped = 0

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.sockets[0].getsockname()[:2]
        return f"redis://{host}:{port}/0"

    def drop_reply_to_next(self, command: bytes) -> None:
        """The next request holding ``command`` (e.g. ``b"EVALSHA"``) is forwarded; its reply
        is swallowed and the client's connection closed. A NOSCRIPT error reply passes (the
        script was not run; the frontier sends it again with EVAL, whose reply is dropped
        instead)."""
        self._armed = command

    async def __aenter__(self) -> DroppingProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        upstream_r, upstream_w = await asyncio.open_connection(*self._upstream)
        # Set when this connection forwarded the armed command: its next reply is dropped.
        doomed = asyncio.Event()
        fired: list[bytes] = []

        async def requests() -> None:
            while data := await client_r.read(65536):
                if self._armed is not None and self._armed in data:
                    fired.append(self._armed)
                    self._armed = None
                    doomed.set()
                upstream_w.write(data)
                await upstream_w.drain()
            upstream_w.close()

        async def replies() -> None:
            while data := await upstream_r.read(65536):
                if doomed.is_set():
                    doomed.clear()
                    if not data.startswith(b"-NOSCRIPT"):
                        self.dropped += 1
                        break
                    # not run: wait for it sent again (EVALSHA comes back as EVAL, whose
                    # name both share)
                    again = fired.pop()
                    self._armed = b"EVAL" if again == b"EVALSHA" else again
                client_w.write(data)
                await client_w.drain()
            for writer in (client_w, upstream_w):
                writer.close()

        tasks = [asyncio.create_task(requests()), asyncio.create_task(replies())]
        self._tasks.update(tasks)
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._tasks.difference_update(tasks)
            for writer in (client_w, upstream_w):
                with contextlib.suppress(Exception):
                    writer.close()
