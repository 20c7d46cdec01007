"""SSRF guard (DESIGN §6): never fetch from private, loopback, link-local or metadata addresses.

A crawler follows links written by strangers, so a page can point it at
``http://169.254.169.254/`` (cloud credentials), ``http://localhost:6379/`` (its own Redis) or
any service inside the cluster. The guard runs after DNS and on every redirect hop, on the
addresses the name actually resolves to, and returns those addresses so that the caller
connects to exactly them: resolving again at connect time would reopen the door to DNS
rebinding (a name that answers "public" to the check and "private" to the connect).

A name is refused when ANY of its addresses is forbidden, not only the first: otherwise a host
publishing one public and one private record would win half of the time.

``allow_private`` (the CrawlJob's ``allowPrivateNetworks``) lets a job crawl an intranet or a
test server on loopback. It deliberately does not open the cloud metadata addresses
(``169.254.169.254``, ``fd00:ec2::254``, ``100.100.100.200``, Azure's ``168.63.129.16``, ...):
no crawl needs them and they hand out the node's credentials.

What is forbidden is written out below rather than taken from ``ipaddress``'s ``is_private``
family alone, whose lists changed between CPython patch releases (3.11.10, 3.12.4); the
``is_*`` flags are still consulted as a second net. Addresses embedding an IPv4 address
(IPv4-mapped ``::ffff:a.b.c.d``, NAT64 ``64:ff9b::/96``, 6to4 ``2002::/16``) are judged by
the IPv4 address they lead to.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import socket
import time
from collections.abc import Awaitable, Callable

from crawlfleet.errors import FetchError, InvalidURL, UnsupportedScheme
from crawlfleet.networks import METADATA_ADDRESSES, IPAddress
from crawlfleet.urls import authority_of, per_authority

__all__ = [
    "DEFAULT_CACHE_MAX_ENTRIES",
    "DEFAULT_CACHE_TTL_SECONDS",
    "DEFAULT_DNS_TIMEOUT_SECONDS",
    "METADATA_ADDRESSES",
    "AddressGuard",
    "IPAddress",
    "Resolver",
    "is_forbidden_address",
    "is_metadata_address",
]

#: How long a host's allowed addresses are reused without asking DNS again.
DEFAULT_CACHE_TTL_SECONDS = 60.0
#: getaddrinfo runs in a thread and can hang on a dead resolver; bound the wait.
DEFAULT_DNS_TIMEOUT_SECONDS = 10.0
#: Hosts remembered at most; past it the oldest entries go (per-process memory bound).
DEFAULT_CACHE_MAX_ENTRIES = 10_000

_FORBIDDEN_V4 = tuple(
    ipaddress.IPv4Network(network)
    for network in (
        "0.0.0.0/8",  # "this network"; 0.0.0.0 reaches localhost on Linux
        "10.0.0.0/8",  # private
        "100.64.0.0/10",  # shared address space (carrier NAT), holds 100.100.100.200
        "127.0.0.0/8",  # loopback
        "169.254.0.0/16",  # link-local, holds 169.254.169.254
        "172.16.0.0/12",  # private
        "192.0.0.0/24",  # IETF protocol assignments
        "192.0.2.0/24",  # documentation
        "192.88.99.0/24",  # 6to4 relay anycast (deprecated)
        "192.168.0.0/16",  # private
        "198.18.0.0/15",  # benchmarking
        "198.51.100.0/24",  # documentation
        "203.0.113.0/24",  # documentation
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, and 255.255.255.255 broadcast
    )
)

_FORBIDDEN_V6 = tuple(
    ipaddress.IPv6Network(network)
    for network in (
        "::/96",  # unspecified, loopback and deprecated IPv4-compatible addresses
        "64:ff9b:1::/48",  # local-use NAT64
        "100::/64",  # discard-only
        "2001::/23",  # IETF protocol assignments, incl. Teredo (2001::/32)
        "2001:db8::/32",  # documentation
        "3fff::/20",  # documentation
        "fc00::/7",  # unique local, holds fd00:ec2::254
        "fe80::/10",  # link-local
        "fec0::/10",  # site-local (deprecated)
        "ff00::/8",  # multicast
    )
)

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_SIX_TO_FOUR = ipaddress.IPv6Network("2002::/16")

# A resolver returns the IP address strings a host name resolves to for a TCP connection.
Resolver = Callable[[str, int], Awaitable[list[str]]]


def is_forbidden_address(ip: IPAddress) -> bool:
    """True when a crawler must not connect to ``ip`` (see the module docstring for the list)."""
    embedded = _embedded_ipv4(ip)
    if embedded is not None:
        return is_forbidden_address(embedded)
    if isinstance(ip, ipaddress.IPv4Address):
        if any(ip in network for network in _FORBIDDEN_V4):
            return True
    elif any(ip in network for network in _FORBIDDEN_V6):
        return True
    return (
        ip in METADATA_ADDRESSES
        or ip.is_private
        or ip.is_loopback
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
        or not ip.is_global
    )


def is_metadata_address(ip: IPAddress) -> bool:
    """True for a cloud metadata endpoint, also in IPv4-mapped, NAT64 or 6to4 form."""
    embedded = _embedded_ipv4(ip)
    return (embedded if embedded is not None else ip) in METADATA_ADDRESSES


def _embedded_ipv4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address leads to (mapped, NAT64, 6to4), else None."""
    if isinstance(ip, ipaddress.IPv4Address):
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in _SIX_TO_FOUR:
        return ip.sixtofour
    return None


@functools.lru_cache(maxsize=4096)
def _parse_ip(host: str) -> IPAddress | None:
    """``host`` as an IP address when it is a literal, else None; without any DNS.

    Cached: every request checks its host twice (before the request and at connect time),
    and parsing an address is a measurable share of a page's CPU time on a fast site.

    Besides the canonical forms this accepts what the C library's ``inet_aton`` accepts
    (``127.1``, ``0x7f.0.0.1``, ``2130706433``), because ``getaddrinfo`` would turn those into
    addresses too: the guard must see them as the address they are.
    """
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if host and all(char in "0123456789abcdefxABCDEFX." for char in host):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def _target(url: str) -> tuple[str, int]:
    """(host, port) of an absolute http(s) URL; FetchError when it has no usable one."""
    try:
        authority = authority_of(url)
    except UnsupportedScheme as error:
        raise FetchError("bad_scheme", str(error)) from error
    except InvalidURL as error:
        raise FetchError("invalid_url", str(error)) from error
    return authority.host, authority.port


# Pure functions of their arguments, asked before every request (see check_url, check_host).
_host_and_port = per_authority(_target, errors=FetchError, maxsize=4096)


@functools.lru_cache(maxsize=4096)
def _allowed(ip: IPAddress, allow_private: bool) -> bool:
    """The guard's one rule: never metadata; nothing non-public unless ``allow_private``."""
    return not is_metadata_address(ip) and (allow_private or not is_forbidden_address(ip))


@functools.lru_cache(maxsize=4096)
def _address_text(ip: IPAddress) -> str:
    return ip.compressed


async def _getaddrinfo_resolver(host: str, port: int) -> list[str]:
    """Resolve with the event loop's ``getaddrinfo`` (a thread), TCP addresses only."""
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )
    addresses: list[str] = []
    for _family, _type, _proto, _canonname, sockaddr in infos:
        address = str(sockaddr[0])
        if address not in addresses:
            addresses.append(address)
    return addresses


class AddressGuard:
    """Resolves hosts and refuses forbidden addresses; one per worker process.

    ``check_host`` returns the resolved IP strings to connect to, raises
    ``FetchError("forbidden_address")`` when any is forbidden and ``FetchError("dns_error")``
    when the name does not resolve. Allowed results are cached per (host, port) for
    ``cache_ttl_seconds`` so a host crawled at a steady rate costs one lookup a minute; refusals
    and failures are not cached (a refusal is cheap to repeat, a DNS failure may be transient).
    ``clock`` and ``resolver`` are injectable for tests.
    """

    def __init__(
        self,
        *,
        allow_private: bool = False,
        cache_ttl_seconds: float = DEFAULT_CACHE_TTL_SECONDS,
        dns_timeout_seconds: float = DEFAULT_DNS_TIMEOUT_SECONDS,
        cache_max_entries: int = DEFAULT_CACHE_MAX_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
        resolver: Resolver | None = None,
    ) -> None:
        self.allow_private = allow_private
        self._cache_ttl_seconds = cache_ttl_seconds
        self._dns_timeout_seconds = dns_timeout_seconds
        self._cache_max_entries = cache_max_entries
        self._clock = clock
        self._resolver: Resolver = resolver if resolver is not None else _getaddrinfo_resolver
        self._cache: dict[tuple[str, int], tuple[float, list[str]]] = {}

    async def check_url(self, url: str) -> list[str]:
        """Check the host of an absolute http(s) URL; see ``check_host``.

        Raises ``FetchError("bad_scheme")`` for any other scheme and
        ``FetchError("invalid_url")`` when the URL has no usable host or port. Asked before
        every request: the host and port are cached per ``authority_prefix``.
        """
        return await self.check_host(*_host_and_port(url))

    async def check_host(self, host: str, port: int) -> list[str]:
        """Resolve ``host`` and return its IP addresses if every one of them may be fetched.

        An IP literal (also in brackets) is checked without DNS.
        """
        host = host.strip().lower()
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        if not host:
            # getaddrinfo would take an empty name for "this machine".
            raise FetchError("invalid_url", "empty host name")
        literal = _parse_ip(host)
        if literal is not None:
            self._refuse_if_forbidden(host, [literal])
            return [_address_text(literal)]

        key = (host, port)
        now = self._clock()
        cached = self._cache.get(key)
        if cached is not None:
            expires_at, addresses = cached
            if now < expires_at:
                return list(addresses)
            del self._cache[key]

        addresses = await self._resolve(host, port)
        parsed: list[IPAddress] = []
        for address in addresses:
            ip = _parse_ip(address)
            if ip is None:
                raise FetchError("dns_error", f"{host} resolved to a non-address {address!r}")
            parsed.append(ip)
        self._refuse_if_forbidden(host, parsed)
        self._remember(key, now, addresses)
        return list(addresses)

    def _refuse_if_forbidden(self, host: str, addresses: list[IPAddress]) -> None:
        for ip in addresses:
            if not _allowed(ip, self.allow_private):
                raise FetchError(
                    "forbidden_address", f"{host} resolves to {ip}, a non-public address"
                )

    async def _resolve(self, host: str, port: int) -> list[str]:
        try:
            async with asyncio.timeout(self._dns_timeout_seconds):
                addresses = await self._resolver(host, port)
        except TimeoutError as error:
            raise FetchError(
                "dns_error", f"resolving {host} took over {self._dns_timeout_seconds} s"
            ) from error
        except (OSError, UnicodeError) as error:  # socket.gaierror is an OSError
            raise FetchError("dns_error", f"cannot resolve {host}: {error}") from error
        if not addresses:
            raise FetchError("dns_error", f"{host} has no address")
        return addresses

    def _remember(self, key: tuple[str, int], now: float, addresses: list[str]) -> None:
        if self._cache_ttl_seconds <= 0 or self._cache_max_entries <= 0:
            return
        if len(self._cache) >= self._cache_max_entries:
            # Drop expired entries first, then the oldest (dicts keep insertion order).
            for stale in [k for k, (expires_at, _) in self._cache.items() if expires_at <= now]:
                del self._cache[stale]
            while len(self._cache) >= self._cache_max_entries:
                del self._cache[next(iter(self._cache))]
        self._cache[key] = (now + self._cache_ttl_seconds, list(addresses))
