"""The test sites' hosts: one listening socket per host on consecutive loopback addresses.

Every loopback site (:mod:`~crawlfleet.testsite.server`, :mod:`~crawlfleet.testsite.news`,
:mod:`~crawlfleet.testsite.files`) is several hosts, each an address of its own (politeness is
per host) on a free port, each an aiohttp low-level server. Binding first and serving second
lets a site learn every host's netloc before it builds the handlers that link across hosts.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable

from aiohttp import web

__all__ = ["bind_hosts", "netlocs", "serve"]


def bind_hosts(base: ipaddress.IPv4Address, count: int) -> list[socket.socket]:
    """``count`` sockets bound to free ports on ``base``, ``base + 1``, …; closed again if
    one of them cannot be bound."""
    socks: list[socket.socket] = []
    try:
        for k in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((str(base + k), 0))
            sock.setblocking(False)
    except BaseException:
        for sock in socks:
            sock.close()
        raise
    return socks


def netlocs(socks: Iterable[socket.socket]) -> list[str]:
    """Each socket's ``address:port``."""
    return ["{}:{}".format(*sock.getsockname()[:2]) for sock in socks]


async def serve(
    servers: Iterable[tuple[web.Server, socket.socket]],
    *,
    shutdown_timeout: float = 0.5,
    backlog: int = 128,
) -> list[web.ServerRunner]:
    """Serve each server on its socket; the runners, to clean up at stop. When one fails to
    start, the ones started are cleaned up and every socket is closed before the error
    goes on, so a failed start leaks no listener."""
    pairs = list(servers)
    runners: list[web.ServerRunner] = []
    try:
        for server, sock in pairs:
            runner = web.ServerRunner(server, shutdown_timeout=shutdown_timeout)
            await runner.setup()
            runners.append(runner)
            await web.SockSite(runner, sock, backlog=backlog).start()
    except BaseException:
        for runner in runners:
            await runner.cleanup()
        for _, sock in pairs:
            sock.close()
        raise
    return runners
