"""Requests through proxies (``spec.proxy``): each host's request goes through the proxy the
chooser gives it, direct for noProxy hosts, and a proxy that keeps failing is taken out.

The decisions are ``crawlfleet.proxies``'s (pure); this module carries them out over aiohttp:

- **HTTP(S) proxies** share the direct session (its pool, its header limits): aiohttp takes the
  proxy per request, the credentials as ``proxy_auth`` (never in a URL that could be logged).
  aiohttp resolves the proxy's name through the connector's resolver, the guard's
  (``transport.GuardResolver``): a proxy on a private address is refused unless
  ``proxy.allowPrivate`` says otherwise (the resolver then asks the proxies' own guard).
- **SOCKS5 proxies** each get a session over aiohttp-socks's connector, which sends the target's
  name to the proxy; the proxy's own address is checked by the proxies' guard first and the
  connector dials that address.

**The target is still judged** (DESIGN §6): the fetcher asks the target guard before every
request, as without a proxy. What the proxy then resolves is its own business, which is what a
proxy is for; a name whose DNS answers differently to the proxy than to the worker is the one
gap, named in docs/security.md.

A failure counts against a proxy only when it is the proxy's: its connection refused or timed
out, a SOCKS or CONNECT refusal, or a 407 (our credentials refused). A 502 the proxy sends
because the site is down is the site's answer, and counts for the site.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

import aiohttp
import httpx
from aiohttp_socks import ProxyConnector, ProxyError, ProxyType
from httpx_aiohttp import AiohttpTransport

from crawlfleet.crawler.fetching.failures import FailureClass
from crawlfleet.crawler.fetching.safety import AddressGuard
from crawlfleet.errors import FetchError
from crawlfleet.proxies import Proxy, ProxyChooser, ProxyPlan, matches_no_proxy

__all__ = ["ProxyObserver", "ProxyRouter"]

logger = logging.getLogger(__name__)

_PROXY_AUTH_REQUIRED: Final = 407
#: aiohttp's and aiohttp-socks's errors that mean the proxy itself failed.
_PROXY_FAULTS: Final = (
    aiohttp.ClientProxyConnectionError,
    aiohttp.ClientHttpProxyError,
    ProxyError,
)

#: Told of each request sent through a proxy (its label and "ok", "failed" or "out") and of each
#: proxy taken out of service (its label): the worker's metrics.
ProxyObserver = Callable[[str, str], None]


def _noop(_label: str, _event: str) -> None:
    pass


class ProxyRouter(httpx.AsyncBaseTransport):
    """An httpx transport that sends each request direct or through its host's proxy."""

    def __init__(
        self,
        direct: AiohttpTransport,
        session: Callable[[], aiohttp.ClientSession],
        plan: ProxyPlan,
        *,
        session_over: Callable[[aiohttp.BaseConnector], aiohttp.ClientSession],
        proxy_guard: AddressGuard,
        observe: ProxyObserver = _noop,
    ) -> None:
        self._direct = direct
        self._plan = plan
        self._guard = proxy_guard
        self._observe = observe
        self._session_over = session_over
        self.chooser = ProxyChooser(
            plan.proxies, max_failures=plan.max_failures, eject_seconds=plan.eject_seconds
        )
        self._routes: dict[str, AiohttpTransport] = {}
        for proxy in plan.proxies:
            if not proxy.is_socks:
                # The credentials as a header (aiohttp's proxy_auth is deprecated): on the
                # CONNECT of an https target here, on an http target's request in
                # handle_async_request. Either way only the proxy sees it: proxies strip it.
                self._routes[proxy.label] = AiohttpTransport(
                    client=session,
                    proxy=httpx.Proxy(proxy.url, headers=_authorization(proxy)),
                )

    @property
    def proxy_hosts(self) -> frozenset[str]:
        return frozenset(proxy.host for proxy in self._plan.proxies)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host
        if matches_no_proxy(host, self._plan.no_proxy):
            return await self._direct.handle_async_request(request)
        proxy = self.chooser.choose(host)
        if proxy is None:
            out = self.chooser.out_of_service()
            back = min(seconds for _, seconds in out)
            raise FetchError(
                FailureClass.PROXY_ERROR,
                f"every proxy is out of service after repeated failures ({len(out)} of"
                f" {len(self._plan.proxies)}); the first is back in {back:.0f} s",
            )
        try:
            # The proxy's own address, by the proxies' guard: aiohttp dials an IP literal
            # without asking any resolver. Cached by the guard, so a name costs one lookup a
            # minute.
            await self._guard.check_host(proxy.host, proxy.port)
            route = await self._route(proxy)
            if request.url.scheme == "http" and not proxy.is_socks:
                request.headers.update(_authorization(proxy))
            response = await route.handle_async_request(request)
        except FetchError as error:
            if error.failure_class == FailureClass.FORBIDDEN_ADDRESS:
                self._failed(proxy)
                raise FetchError(
                    FailureClass.PROXY_ERROR,
                    f"proxy {proxy.label}: {error.message} (proxy.allowPrivate allows it)",
                ) from error
            raise
        except Exception as error:
            fault = _proxy_fault(error)
            if fault is None:
                raise
            self._failed(proxy)
            raise FetchError(FailureClass.PROXY_ERROR, f"proxy {proxy.label}: {fault}") from error
        if response.status_code == _PROXY_AUTH_REQUIRED:
            await response.aclose()
            self._failed(proxy)
            raise FetchError(
                FailureClass.PROXY_ERROR,
                f"proxy {proxy.label} refused the credentials (407 Proxy Authentication Required)",
            )
        self.chooser.succeeded(proxy)
        self._observe(proxy.label, "ok")
        return response

    async def aclose(self) -> None:
        for route in self._routes.values():
            await route.aclose()
        await self._direct.aclose()

    def _failed(self, proxy: Proxy) -> None:
        self._observe(proxy.label, "failed")
        if self.chooser.failed(proxy):
            self._observe(proxy.label, "ejected")
            logger.warning(
                "proxy %s taken out of service for %.0f s after %d failures in a row",
                proxy.label,
                self._plan.eject_seconds,
                self._plan.max_failures,
            )

    async def _route(self, proxy: Proxy) -> AiohttpTransport:
        route = self._routes.get(proxy.label)
        if route is not None:
            return route
        # A SOCKS proxy: dial the address the proxies' guard approved (the connector would
        # otherwise resolve the name itself, past the guard).
        (address, *_) = await self._guard.check_host(proxy.host, proxy.port)

        def socks_session() -> aiohttp.ClientSession:
            # the direct session's settings (no cookies kept, head limits, no silent resend)
            return self._session_over(
                ProxyConnector(
                    host=address,
                    port=proxy.port,
                    proxy_type=ProxyType.SOCKS5,
                    username=proxy.username,
                    password=proxy.password,
                    rdns=True,
                    limit=0,
                )
            )

        route = AiohttpTransport(client=socks_session)
        self._routes[proxy.label] = route
        return route


def _proxy_fault(error: BaseException) -> str | None:
    """What the proxy did wrong, if ``error`` (or what caused it) was the proxy's failure."""
    cause: BaseException | None = error
    for _ in range(8):
        if cause is None:
            return None
        if isinstance(cause, _PROXY_FAULTS):
            return f"{type(cause).__name__}: {cause}".rstrip(": ")
        cause = cause.__cause__ or cause.__context__
    return None


def _authorization(proxy: Proxy) -> dict[str, str]:
    """The Basic ``Proxy-Authorization`` header of ``proxy``'s credentials, if it has any."""
    if proxy.username is None:
        return {}
    return {"Proxy-Authorization": aiohttp.encode_basic_auth(proxy.username, proxy.password or "")}
