"""An asyncio server run in a background thread with its own event loop.

Why a thread: tests (sync or async) and the crawler under test keep their own event loop, so a
site's timing is not distorted by the code it is measuring. Both loopback sites
(:class:`~crawlfleet.testsite.server.TestSite`, :class:`~crawlfleet.testsite.news.NewsSite`)
run their server through one of these.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Protocol, Self, TypeVar

__all__ = ["BackgroundSite", "LoopThread", "Startable"]

T = TypeVar("T")


class Startable(Protocol):
    """What the thread runs: a server that starts and stops on its loop."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class LoopThread:
    """Runs ``server`` on a daemon thread's event loop; :meth:`call` runs code on that loop."""

    def __init__(self, server: Startable, *, name: str, start_timeout: float = 30.0) -> None:
        self._server = server
        self._name = name
        self._start_timeout = start_timeout
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        """Start serving; returns only after ``server.start()`` has returned (or raises its
        error)."""
        if self._thread is not None:
            raise RuntimeError("already started")
        ready = threading.Event()
        errors: list[BaseException] = []
        loop = asyncio.new_event_loop()

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._server.start())
            except BaseException as exc:  # surfaced to the caller of start()
                errors.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                tasks = asyncio.all_tasks(loop)
                for task in tasks:
                    task.cancel()
                loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.run_until_complete(loop.shutdown_default_executor())
                loop.close()

        thread = threading.Thread(target=run, name=self._name, daemon=True)
        thread.start()
        if not ready.wait(self._start_timeout):
            raise TimeoutError(f"{self._name} did not start in time")
        if errors:
            thread.join()
            raise errors[0]
        self._thread, self._loop = thread, loop

    def stop(self) -> None:
        """Stop the server, then the loop, and join the thread. Idempotent."""
        thread, loop = self._thread, self._loop
        if thread is None or loop is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._server.stop(), loop).result(timeout=15)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=15)
            self._thread = self._loop = None

    def call(self, function: Callable[[], T]) -> T:
        """``function()`` on the server's loop (at once when the loop is not running), so that
        it never races a request being handled."""
        loop = self._loop
        if loop is None:
            return function()

        async def on_loop() -> T:
            return function()

        return asyncio.run_coroutine_threadsafe(on_loop(), loop).result(timeout=15)


class BackgroundSite:
    """A site served by a :class:`LoopThread`: start/stop, or use it as a context manager."""

    _thread: LoopThread

    def start(self) -> Self:
        """Start serving; returns (self) only after every host is listening."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, release hanging requests and join the thread.  Idempotent."""
        self._thread.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
