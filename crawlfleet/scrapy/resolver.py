"""Twisted's name resolution in a Scrapy process, answered by the address guard.

The runtime asks the guard before each download (``LeaseDownloaderMiddleware``), but that check
alone would leave Twisted to resolve the name again when it connects: a name that answers
"public" to the check and "private" to the connect (DNS rebinding) would get through. So the
Scrapy process's reactor resolves every name through :class:`GuardNameResolver` (installed by
``process.py`` before the crawl starts), which asks the same :class:`AddressGuard` as the
check: within the guard's cache lifetime the connect gets the very addresses the check approved
from one lookup, and past it a new answer is checked again, never trusted. IP literals pass
through it too (Twisted's ``HostnameEndpoint`` resolves every host, and ``connectTCP``'s simple
resolver is a view of this one). This is what crawlfleet's own worker does with aiohttp's
resolver (``crawler/fetching/transport.py``). A proxy would resolve the name itself, so the
runtime sends nothing through one (``runtime.py``).

A refused name completes with no address, which Scrapy reports as a failed host lookup
(``CannotResolveHostError``, Twisted's ``DNSLookupError`` before 2.19): the refusal itself is
kept (a bounded number, :meth:`GuardNameResolver.refusal`), so that the lease fails with the
guard's class (``forbidden_address``) rather than ``dns_error``.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final, Protocol

from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.interfaces import IHostnameResolver, IHostResolution
from zope.interface import classImplements  # type: ignore[import-untyped]

from crawlfleet.crawler.fetching.failures import FailureClass
from crawlfleet.errors import FetchError
from crawlfleet.hosts import normalize_host

if TYPE_CHECKING:
    from crawlfleet.crawler.fetching.safety import AddressGuard

__all__ = ["GuardNameResolver"]

log = logging.getLogger(__name__)

#: Connect-time refusals kept for the lease's failure class (the oldest go first).
_REFUSALS_KEPT: Final = 1024


class _Receiver(Protocol):
    """Twisted's ``IResolutionReceiver``, as this module calls it (zope interfaces are not
    types mypy understands without a plugin)."""

    def resolutionBegan(self, resolutionInProgress: object) -> None: ...
    def addressResolved(self, address: object) -> None: ...
    def resolutionComplete(self) -> None: ...


class _PluggableReactor(Protocol):
    """Twisted's ``IReactorPluggableNameResolver``, as this module uses it."""

    @property
    def nameResolver(self) -> object: ...
    def installNameResolver(self, resolver: object) -> object: ...


class _Resolution:
    """One resolution in progress; cancelling it stops the guard's lookup."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.task: asyncio.Task[list[str]] | None = None

    def cancel(self) -> None:
        if self.task is not None:
            self.task.cancel()


class GuardNameResolver:
    """See the module docstring. One per Scrapy process, over the process's guard, on the
    reactor's asyncio loop (``loop``: the running loop when installed)."""

    def __init__(self, guard: AddressGuard, loop: asyncio.AbstractEventLoop) -> None:
        self._guard = guard
        self._loop = loop
        self._refusals: OrderedDict[str, FetchError] = OrderedDict()
        self._reactor: _PluggableReactor | None = None

    def install_on_reactor(self, reactor: _PluggableReactor) -> None:
        """Make this the reactor's only name resolution (Twisted makes its simple ``resolve``,
        which ``connectTCP`` uses, a view of it)."""
        reactor.installNameResolver(self)
        self._reactor = reactor

    def is_installed(self) -> bool:
        """Whether the reactor still resolves through this (a project's extension could
        install a resolver of its own; the runtime then sends nothing)."""
        return self._reactor is not None and self._reactor.nameResolver is self

    def refusal(self, host: str) -> FetchError | None:
        """The guard's refusal of ``host`` at connect time, once (None when there was none)."""
        return self._refusals.pop(_host_key(host), None)

    def resolveHostName(
        self,
        resolutionReceiver: _Receiver,
        hostName: str,
        portNumber: int = 0,
        addressTypes: Sequence[type[object]] | None = None,
        transportSemantics: str = "TCP",
    ) -> _Resolution:
        """Twisted's ``IHostnameResolver``: the guard's addresses for ``hostName``, delivered
        to ``resolutionReceiver`` once the guard has answered (none when it refused)."""
        resolution = _Resolution(hostName)
        resolutionReceiver.resolutionBegan(resolution)
        if transportSemantics != "TCP":
            resolutionReceiver.resolutionComplete()
            return resolution
        host = _host_key(hostName)
        task = self._loop.create_task(self._guard.check_host(host, portNumber))
        resolution.task = task

        def deliver(done: asyncio.Task[list[str]]) -> None:
            try:
                for address in self._addresses(done, host, portNumber, addressTypes):
                    resolutionReceiver.addressResolved(address)
            finally:
                resolutionReceiver.resolutionComplete()

        task.add_done_callback(deliver)
        return resolution

    def _addresses(
        self,
        done: asyncio.Task[list[str]],
        host: str,
        port: int,
        address_types: Sequence[type[object]] | None,
    ) -> list[IPv4Address | IPv6Address]:
        if done.cancelled():
            return []
        error = done.exception()
        if isinstance(error, FetchError):
            self._remember(host, error)
            log.info("not connecting to %s: %s", host, error.message, extra={"layer": "task"})
            return []
        if error is not None:  # a bug: no address rather than an unchecked one
            log.error("the address guard failed on %s", host, exc_info=error)
            return []
        self._refusals.pop(host, None)
        addresses: list[IPv4Address | IPv6Address] = []
        for text in done.result():
            address = (
                IPv6Address("TCP", text, port) if ":" in text else IPv4Address("TCP", text, port)
            )
            if address_types is None or type(address) in address_types:
                addresses.append(address)
        return addresses

    def _remember(self, host: str, error: FetchError) -> None:
        if error.failure_class == FailureClass.DNS_ERROR:
            return  # Twisted's DNSLookupError says as much
        self._refusals[host] = error
        self._refusals.move_to_end(host)
        while len(self._refusals) > _REFUSALS_KEPT:
            self._refusals.popitem(last=False)


classImplements(_Resolution, IHostResolution)
classImplements(GuardNameResolver, IHostnameResolver)


def _host_key(host: str) -> str:
    """The host spelled as in the canonical URL the check saw (``crawlfleet.hosts``: lower
    case, IDNA, no trailing dot), so that check and connect share the guard's cache entry:
    Twisted hands over an international name in Unicode."""
    host = host.strip()
    try:
        return normalize_host(host)
    except ValueError:  # the guard refuses it as it is
        return host.lower()
