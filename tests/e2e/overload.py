"""A test double of an overloaded API server: a loopback proxy in front of the real kube-apiserver.

The real API server cannot be made to throttle one client on cue (its priority-and-fairness
limits are shared by the whole test bed), so the operator under test is pointed at this proxy
instead (a kubeconfig of its own, plain HTTP on loopback). The proxy forwards every request,
watch streams included, to the real API server with the cluster's own credentials; while
:attr:`OverloadedApiServer.overloaded` is set it answers as a busy API server does instead:
429 with ``Retry-After: 1`` and 503, in turn, as Kubernetes Status objects. Going overloaded
also cuts the streams in progress, as an API server restart would. Every refusal is recorded,
so a test can show which of the operator's calls met the outage.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

# Hop-by-hop headers and those aiohttp sets itself: never copied across the proxy.
_DROPPED = {
    "connection",
    "content-length",
    "content-encoding",
    "host",
    "keep-alive",
    "transfer-encoding",
    "upgrade",
}


@dataclass(frozen=True)
class Refusal:
    method: str
    path: str
    status: int


class OverloadedApiServer:
    """Start with :meth:`start`, point a client at :attr:`kubeconfig`, flip :attr:`overloaded`."""

    def __init__(self, kubeconfig: Path, directory: Path) -> None:
        config = json.loads(kubeconfig.read_text())
        cluster = config["clusters"][0]["cluster"]
        user = config["users"][0]["user"]
        self._upstream = cluster["server"].rstrip("/")
        self._ssl = ssl.create_default_context(cafile=cluster["certificate-authority"])
        self._ssl.load_cert_chain(user["client-certificate"], user["client-key"])
        self._config = config
        self.kubeconfig = directory / "kubeconfig-overloaded"
        self.refused: list[Refusal] = []
        self._overloaded = False
        self._turn = itertools.count()
        self._streams: set[asyncio.Task[Any]] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    @property
    def overloaded(self) -> bool:
        return self._overloaded

    @overloaded.setter
    def overloaded(self, value: bool) -> None:
        self._overloaded = value
        if value:  # streams in progress are cut, as a restarting API server cuts them
            self._loop.call_soon_threadsafe(self._cut_streams)

    def _cut_streams(self) -> None:
        for task in list(self._streams):
            task.cancel()

    def start(self) -> OverloadedApiServer:
        self._thread.start()
        port = asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(10)
        config = json.loads(json.dumps(self._config))
        config["clusters"][0]["cluster"] = {"server": f"http://127.0.0.1:{port}"}
        self.kubeconfig.write_text(json.dumps(config))
        return self

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _serve(self) -> int:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self._ssl),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
            auto_decompress=False,
        )
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port: int = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return port

    async def _shutdown(self) -> None:
        self._cut_streams()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if self._overloaded:
            return self._refuse(request)
        task = asyncio.current_task()
        assert task is not None
        self._streams.add(task)
        try:
            return await self._forward(request)
        finally:
            self._streams.discard(task)

    def _refuse(self, request: web.Request) -> web.Response:
        if next(self._turn) % 2 == 0:
            code, message, headers = (
                429,
                "Too many requests, please try again later.",
                {"Retry-After": "1"},
            )
        else:
            code, message, headers = 503, "The server is currently unable to handle the request", {}
        self.refused.append(Refusal(request.method, request.path, code))
        body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
                "code": code}  # fmt: skip
        return web.json_response(body, status=code, headers=headers)

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROPPED}
        body = await request.read()
        async with self._session.request(
            request.method,
            self._upstream + request.path_qs,
            headers=headers,
            data=body or None,
        ) as upstream:
            response = web.StreamResponse(
                status=upstream.status,
                headers={k: v for k, v in upstream.headers.items() if k.lower() not in _DROPPED},
            )
            if upstream.headers.get("Content-Encoding"):
                response.headers["Content-Encoding"] = upstream.headers["Content-Encoding"]
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response
