"""The proxies a crawl's requests go through (``spec.proxy``), which one a host uses, and when
one is taken out.

Networks that allow no direct egress, sites that answer only from some regions, and crawls that
spread their load over addresses all send traffic through proxies. Three decisions live here,
pure, so the transport (``crawler/fetching/transport.py``) only carries them out:

- **The list.** Proxy URLs (``http``, ``https``, ``socks5``, ``socks5h``) come from a Secret
  when they carry credentials, or from the spec when they do not (a corporate proxy). One
  parser reads both, and every message it writes names the proxy without its credentials.
- **Exceptions.** ``noProxy`` entries work as curl's and Go's ``NO_PROXY``: a name matches itself
  and its subdomains (``example.org`` and ``.example.org`` alike), an IP address or CIDR block
  matches literal addresses in it, ``*`` matches everything.
- **Affinity and ejection.** A host keeps the proxy rendezvous hashing gives it among the
  proxies in service, so its cookies-less session, its rate limits and its logs stay on one exit
  while that exit works (Crawlee pins sessions to proxies the same way); hosts move only when
  their proxy is taken out. A proxy that fails ``max_failures`` times in a row (it refused the
  connection, answered 407, or could not reach anything) is out for ``eject_seconds``; when
  every proxy is out, requests fail as ``proxy_error`` (retried later) rather than going
  direct, which the network may forbid.
"""

from __future__ import annotations

import hashlib
import ipaddress
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import unquote, urlsplit

from crawlfleet.hosts import normalize_host

__all__ = [
    "MAX_PROXIES",
    "PROXY_ENV",
    "PROXY_SCHEMES",
    "InvalidProxy",
    "NoProxy",
    "Proxy",
    "ProxyChooser",
    "ProxyPlan",
    "matches_no_proxy",
    "parse_no_proxy",
    "parse_proxy",
    "parse_proxy_list",
]

#: The schemes a proxy URL may have: HTTP proxies (``https`` speaks TLS to the proxy itself)
#: and SOCKS5 (``socks5h`` leaves name resolution to the proxy; ``socks5`` too, here: the
#: worker checks the target's addresses itself, DESIGN §6, and sends the name).
PROXY_SCHEMES: Final = ("http", "https", "socks5", "socks5h")
#: The most proxies one job names.
MAX_PROXIES: Final = 1000
#: The worker's environment variable with the Secret's proxy list (a Pod takes it through a
#: ``secretKeyRef``; ``crawlfleet run`` hands its own environment down).
PROXY_ENV: Final = "CRAWLFLEET_PROXIES"
_DEFAULT_PORTS: Final = {"http": 80, "https": 443, "socks5": 1080, "socks5h": 1080}
#: Hosts whose proxy ranking is remembered; past it the memory starts over (a ranking is a
#: few hashes away).
_RANKINGS_KEPT: Final = 100_000


class InvalidProxy(ValueError):
    """A proxy URL or a noProxy entry that cannot be used; the message names no credentials."""


@dataclass(frozen=True, slots=True)
class Proxy:
    """One proxy. ``label`` is how logs, metrics and Events name it: never its credentials."""

    scheme: str
    host: str
    port: int
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)

    @property
    def label(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    @property
    def url(self) -> str:
        """The URL without credentials (they travel apart, as aiohttp's ``proxy_auth``)."""
        return self.label

    @property
    def is_socks(self) -> bool:
        return self.scheme.startswith("socks")

    def __str__(self) -> str:
        return self.label


def _redacted(text: str) -> str:
    """``text`` with whatever could be credentials (before an ``@``) replaced."""
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "", text
    if "@" in rest.split("/", 1)[0]:
        rest = "***@" + rest.split("@", 1)[1]
    shown = f"{scheme}{sep}{rest}" if sep else rest
    return repr(shown[:120])


def parse_proxy(text: str) -> Proxy:
    """One proxy URL: ``scheme://[user:password@]host[:port]``, nothing after the port."""
    text = text.strip()
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        raise InvalidProxy(f"{_redacted(text)} is not a URL with a valid port") from None
    scheme = parts.scheme.lower()
    if scheme not in PROXY_SCHEMES:
        raise InvalidProxy(
            f"{_redacted(text)}: unknown scheme {scheme or '(none)'!r}; a proxy is"
            f" {', '.join(PROXY_SCHEMES[:-1])} or {PROXY_SCHEMES[-1]}"
        )
    if not parts.hostname:
        raise InvalidProxy(f"{_redacted(text)}: names no host")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise InvalidProxy(f"{_redacted(text)}: a proxy URL has no path, query or fragment")
    if any(char.isspace() or ord(char) < 32 for char in text):
        raise InvalidProxy(f"{_redacted(text)}: contains whitespace or control characters")
    try:
        host = normalize_host(parts.hostname)
    except ValueError:
        raise InvalidProxy(f"{_redacted(text)}: {parts.hostname!r} is not a host name") from None
    username = unquote(parts.username) if parts.username is not None else None
    password = unquote(parts.password) if parts.password is not None else None
    return Proxy(scheme, host, port or _DEFAULT_PORTS[scheme], username, password)


def parse_proxy_list(text: str) -> tuple[Proxy, ...]:
    """The proxies of a Secret's value: one URL per line (or separated by commas); blank lines
    and ``#`` comments are skipped. A mistake names its line, never the credentials on it."""
    found: list[Proxy] = []
    seen: set[str] = set()
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.split("#", 1)[0] if line.lstrip().startswith("#") else line
        for entry in line.split(","):
            if not entry.strip():
                continue
            try:
                proxy = parse_proxy(entry)
            except InvalidProxy as error:
                raise InvalidProxy(f"line {number}: {error}") from None
            if proxy.label in seen:
                raise InvalidProxy(f"line {number}: {proxy.label} is listed twice")
            seen.add(proxy.label)
            found.append(proxy)
    if not found:
        raise InvalidProxy("names no proxy (one URL per line, such as http://proxy:3128)")
    if len(found) > MAX_PROXIES:
        raise InvalidProxy(f"names {len(found)} proxies; at most {MAX_PROXIES}")
    return tuple(found)


@dataclass(frozen=True, slots=True)
class NoProxy:
    """``noProxy``, parsed: names (a suffix match on labels), networks, or everything."""

    names: frozenset[str] = frozenset()
    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    everything: bool = False


def parse_no_proxy(entries: Iterable[str]) -> NoProxy:
    """``noProxy`` entries: ``*``, a host name (itself and its subdomains; a leading ``.`` or
    ``*.`` changes nothing), an IP address or a CIDR block."""
    names: set[str] = set()
    networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    for raw in entries:
        entry = raw.strip()
        if entry == "*":
            return NoProxy(everything=True)
        try:
            networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
            continue
        except ValueError:
            pass
        name = entry.removeprefix("*").removeprefix(".")
        try:
            names.add(normalize_host(name, strict=True))
        except ValueError:
            raise InvalidProxy(
                f"is not a host name, IP address, CIDR block or '*' (got {entry!r})"
            ) from None
    return NoProxy(frozenset(names), tuple(networks))


def matches_no_proxy(host: str, rules: NoProxy) -> bool:
    """Whether requests to ``host`` (normalised, without port) go direct."""
    if rules.everything:
        return True
    if rules.networks:
        try:
            address = ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            pass
        else:
            return any(address in network for network in rules.networks)
    if not rules.names:
        return False
    labels = host.split(".")
    return any(".".join(labels[i:]) in rules.names for i in range(len(labels)))


def _score(host: str, proxy: Proxy) -> int:
    digest = hashlib.blake2b(f"{host}\n{proxy.label}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


@dataclass(slots=True)
class _Health:
    failures: int = 0
    out_until: float = 0.0


class ProxyChooser:
    """Which proxy each host uses: rendezvous hashing over the proxies in service.

    Rendezvous (highest-random-weight) hashing keeps every host on its proxy while that proxy
    works, and moves only the hosts of a proxy taken out, each to its own next choice, so one
    dead exit does not reshuffle the whole crawl. ``clock`` is monotonic seconds.
    """

    def __init__(
        self,
        proxies: tuple[Proxy, ...],
        *,
        max_failures: int,
        eject_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not proxies:
            raise ValueError("a ProxyChooser needs at least one proxy")
        self._proxies = proxies
        self._max_failures = max_failures
        self._eject_seconds = eject_seconds
        self._clock = clock
        self._health = {proxy.label: _Health() for proxy in proxies}
        self._rankings: dict[str, tuple[Proxy, ...]] = {}

    @property
    def proxies(self) -> tuple[Proxy, ...]:
        return self._proxies

    def choose(self, host: str) -> Proxy | None:
        """The proxy for ``host``: its first choice in service; None when all are out."""
        ranking = self._rankings.get(host)
        if ranking is None:
            if len(self._rankings) >= _RANKINGS_KEPT:
                self._rankings.clear()
            ranking = tuple(sorted(self._proxies, key=lambda p: _score(host, p), reverse=True))
            self._rankings[host] = ranking
        now = self._clock()
        for proxy in ranking:
            if self._health[proxy.label].out_until <= now:
                return proxy
        return None

    def succeeded(self, proxy: Proxy) -> None:
        """A request went through ``proxy``: its run of failures ends."""
        self._health[proxy.label].failures = 0

    def failed(self, proxy: Proxy) -> bool:
        """``proxy`` failed a request; True when that takes it out of service (ejection)."""
        health = self._health[proxy.label]
        now = self._clock()
        if health.out_until > now:
            return False  # already out: requests sent before it was taken out, failing now
        health.failures += 1
        if health.failures < self._max_failures:
            return False
        health.failures = 0
        health.out_until = now + self._eject_seconds
        return True

    def out_of_service(self) -> list[tuple[Proxy, float]]:
        """The proxies taken out, with the seconds until each is back."""
        now = self._clock()
        return [
            (proxy, self._health[proxy.label].out_until - now)
            for proxy in self._proxies
            if self._health[proxy.label].out_until > now
        ]


@dataclass(frozen=True, slots=True)
class ProxyPlan:
    """Everything the transport needs to route requests through proxies, as plain values
    (``crawljob.proxy.proxy_plan`` makes one from ``spec.proxy``)."""

    proxies: tuple[Proxy, ...]
    no_proxy: NoProxy
    allow_private: bool
    max_failures: int
    eject_seconds: float
