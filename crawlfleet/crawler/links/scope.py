"""Crawl scope: which discovered URLs a job may enqueue.

A worker extracts ~100 links per page and must drop the out-of-scope ones before they cost a
Bloom-filter round trip, so ``Scope`` is a frozen value built once per job from plain values
(the CrawlJob's ``scope``) with everything precompiled: domains in a dict looked up by host
suffix, ``include`` and ``exclude`` each compiled into one RE2 set, and the host verdict
remembered per ``scheme://netloc`` prefix, so a URL costs at most one split (none for a host
seen before) and two regex searches whatever the number of patterns.

Domain rule: an entry ``example.com`` allows ``example.com`` and every subdomain
(``www.example.com``) but not ``badexample.com``; an IP entry allows exactly that address. An
entry with a port (``127.0.0.2:8080``, ``[::1]:8080``) allows only that port (the scheme's
default port counts: ``example.com:443`` allows ``https://example.com/``); an entry without a
port allows any port.

Checks run in a fixed order and the first failing one is the verdict: URL syntax, scheme,
depth, domain, the trap rules, ``exclude``, ``include``.

Trap rules, as Heritrix's ``TooManyPathSegmentsDecideRule`` and ``PathologicalPathDecideRule``
have them: a path of more than ``max_path_segments`` segments (``/a/b/c`` has three), and a path
where one directory segment, or a run of them, appears more than ``max_repeated_segments`` times
in a row (``/a/a/a/`` three times, ``/x/y/x/y/x/y/`` a run of two three times): what relative
links on a misconfigured server (``href="a/"`` on every page) and calendars that link ever
onwards produce. 0 turns a rule off. Both cost a ``count("/")`` per URL; only a path of enough
segments is split. Patterns are RE2, searched anywhere in the whole URL
(as Scrapy's link extractor does), and compiled by ``crawlfleet.patterns`` exactly as the
CrawlJob model validated them: linear time whatever the pattern, one scan per list. Hosts are
spelled by ``crawlfleet.hosts``, as the model spells ``allowedDomains``. ``max_pages`` is
carried for the worker, not checked here.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from crawlfleet.errors import ConfigError, InvalidURL, UnsupportedScheme
from crawlfleet.hosts import normalize_host, split_host_port
from crawlfleet.patterns import PatternError, URLPatterns, compile_patterns
from crawlfleet.urls import Authority, authority_of, authority_prefix

if TYPE_CHECKING:
    from crawlfleet.crawljob import ScopeSpec

__all__ = ["Scope", "ScopeVerdict"]

# Verdicts of the hosts of one batch's URLs that offer no authority prefix.
_HostVerdicts = dict[Authority, "ScopeVerdict | None"]

# Ports allowed for one host: None means any port.
_Ports = frozenset[int] | None
# What an absent host maps to: no port at all is allowed.
_NO_PORTS: frozenset[int] = frozenset()
# Prefix verdicts a Scope keeps before it starts over (a crawl meets few hosts; a hostile
# page must not grow the cache without bound).
_PREFIX_VERDICTS_MAX = 4096


class ScopeVerdict(StrEnum):
    """Why a URL is out of scope. Values are stable strings, fit for metrics and logs."""

    INVALID_URL = "invalid_url"
    BAD_SCHEME = "bad_scheme"
    TOO_DEEP = "too_deep"
    OUT_OF_DOMAIN = "out_of_domain"
    EXCLUDED = "excluded"
    NOT_INCLUDED = "not_included"
    TOO_MANY_PATH_SEGMENTS = "too_many_path_segments"
    REPEATED_PATH_SEGMENTS = "repeated_path_segments"


@dataclass(frozen=True, slots=True)
class Scope:
    """Which URLs a crawl may follow; see the module docstring for the rules.

    ``max_depth`` counts links from a seed (seeds are depth 0); ``None`` means no limit.
    ``max_pages`` 0 means no limit. An empty ``allowed_domains`` allows every host.
    ``max_path_segments`` and ``max_repeated_segments`` are the trap rules (0: off).
    Invalid entries or patterns raise ``ConfigError`` naming the field.
    """

    allowed_domains: tuple[str, ...]
    max_depth: int | None = 3
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    max_pages: int = 0
    max_path_segments: int = 0
    max_repeated_segments: int = 0
    _domains: dict[str, _Ports] = field(init=False, repr=False, compare=False)
    _addresses: dict[str, _Ports] = field(init=False, repr=False, compare=False)
    _include: URLPatterns | None = field(init=False, repr=False, compare=False)
    _exclude: URLPatterns | None = field(init=False, repr=False, compare=False)
    # Host verdicts per scheme://netloc prefix, across calls (bounded: see _prefix_verdict).
    _prefix_verdicts: dict[str, ScopeVerdict | None] = field(init=False, repr=False, compare=False)

    @classmethod
    def from_spec(cls, scope: ScopeSpec) -> Scope:
        """The scope a CrawlJob's ``scope`` section asks for."""
        return cls(
            allowed_domains=tuple(scope.allowed_domains),
            max_depth=scope.max_depth,
            include=tuple(scope.include),
            exclude=tuple(scope.exclude),
            max_pages=scope.max_pages,
            max_path_segments=scope.max_path_segments,
            max_repeated_segments=scope.max_repeated_segments,
        )

    def __post_init__(self) -> None:
        # Accept any iterable of strings, store tuples so the value stays hashable and frozen.
        for name, spec_name in (
            ("allowed_domains", "allowedDomains"),
            ("include", "include"),
            ("exclude", "exclude"),
        ):
            value = getattr(self, name)
            if isinstance(value, str):
                raise ConfigError(f"scope.{spec_name}: expected a list of strings, got a string")
            object.__setattr__(self, name, tuple(value))
        if self.max_depth is not None and self.max_depth < 0:
            raise ConfigError(f"scope.maxDepth: must be >= 0, got {self.max_depth}")
        if self.max_pages < 0:
            raise ConfigError(f"scope.maxPages: must be >= 0, got {self.max_pages}")
        if self.max_path_segments < 0 or self.max_repeated_segments < 0:
            raise ConfigError("scope.maxPathSegments, maxRepeatedSegments: must be >= 0")
        domains: dict[str, _Ports] = {}
        addresses: dict[str, _Ports] = {}
        for index, entry in enumerate(self.allowed_domains):
            host, port = _parse_domain_entry(entry, f"scope.allowedDomains[{index}]")
            target = addresses if _ip_text(host) is not None else domains
            target[host] = _merge_ports(target.get(host, _NO_PORTS), port)
        object.__setattr__(self, "_domains", domains)
        object.__setattr__(self, "_addresses", addresses)
        object.__setattr__(self, "_include", _compiled(self.include, "scope.include"))
        object.__setattr__(self, "_exclude", _compiled(self.exclude, "scope.exclude"))
        object.__setattr__(self, "_prefix_verdicts", {})

    def check(self, url: str, depth: int) -> ScopeVerdict | None:
        """Return None when ``url`` found at ``depth`` is in scope, else the reason it is not."""
        if self.max_depth is not None and depth > self.max_depth:
            # Depth needs no parsing, but a malformed URL is reported as such first.
            return self._url_verdict(url) or ScopeVerdict.TOO_DEEP
        return self._check_url(url)

    def filter(self, urls: Iterable[str], depth: int) -> tuple[list[str], dict[ScopeVerdict, int]]:
        """Keep the in-scope URLs of one page's batch; return them and the refusals by reason.

        All links of a page share a depth, so a batch past ``max_depth`` is refused without
        looking at a single URL; and most share a few hosts, so the host verdict is computed
        once per (scheme, netloc) of the batch.
        """
        if self.max_depth is not None and depth > self.max_depth:
            refused = sum(1 for _ in urls)
            return [], {ScopeVerdict.TOO_DEEP: refused} if refused else {}
        kept: list[str] = []
        refusals: dict[ScopeVerdict, int] = {}
        check = self._check_url
        host_verdicts: _HostVerdicts = {}
        for url in urls:
            verdict = check(url, host_verdicts)
            if verdict is None:
                kept.append(url)
            else:
                refusals[verdict] = refusals.get(verdict, 0) + 1
        return kept, refusals

    def allows_host(self, host: str, port: int) -> bool:
        """True when ``host`` (no brackets) on ``port`` is in ``allowed_domains``.

        For the worker's redirect and robots checks, where host and port are already known.
        """
        if not self._domains and not self._addresses:
            return True
        host = host.rstrip(".").lower()
        if not host:
            return False
        if _looks_like_ip(host):
            address = _ip_text(host)
            if address is not None:
                return _port_allowed(self._addresses.get(address, _NO_PORTS), port)
        if not host.isascii():
            try:
                host = normalize_host(host)
            except ValueError:
                return False
        domains = self._domains
        # Walk the suffixes at label boundaries: a.b.example.com, b.example.com, example.com, com.
        candidate = host
        while True:
            if _port_allowed(domains.get(candidate, _NO_PORTS), port):
                return True
            dot = candidate.find(".")
            if dot < 0:
                return False
            candidate = candidate[dot + 1 :]

    def _url_verdict(self, url: str) -> ScopeVerdict | None:
        """INVALID_URL or BAD_SCHEME when the URL itself is unusable, else None."""
        try:
            authority_of(url)
        except UnsupportedScheme:
            return ScopeVerdict.BAD_SCHEME
        except InvalidURL:
            return ScopeVerdict.INVALID_URL
        return None

    def _check_url(
        self,
        url: str,
        host_verdicts: _HostVerdicts | None = None,
    ) -> ScopeVerdict | None:
        """Every check except depth, in the documented order; ``host_verdicts`` memoises hosts.

        Most URLs offer an ``authority_prefix``, whose verdict (scheme, host and port) is
        remembered across calls; the others are split here.
        """
        prefix = authority_prefix(url)
        if prefix is not None:
            verdict = self._prefix_verdict(prefix)
        else:
            verdict = self._split_verdict(url, host_verdicts)
        if verdict is not None:
            return verdict
        if self.max_path_segments or self.max_repeated_segments:
            verdict = self._trap_verdict(url)
            if verdict is not None:
                return verdict
        if self._exclude is not None and self._exclude.search(url):
            return ScopeVerdict.EXCLUDED
        if self._include is not None and not self._include.search(url):
            return ScopeVerdict.NOT_INCLUDED
        return None

    def _trap_verdict(self, url: str) -> ScopeVerdict | None:
        """TOO_MANY_PATH_SEGMENTS or REPEATED_PATH_SEGMENTS for a trap-shaped path, else None."""
        start = url.find("/", url.find("://") + 3)
        if start < 0:
            return None
        end = len(url)
        for stop in "?#":
            found = url.find(stop, start, end)
            if found >= 0:
                end = found
        slashes = url.count("/", start, end)
        if self.max_path_segments and slashes > self.max_path_segments:
            return ScopeVerdict.TOO_MANY_PATH_SEGMENTS
        repeats = self.max_repeated_segments
        if repeats and slashes > repeats + 1:  # enough directories for repeats + 1 in a row
            directories = url[start + 1 : end].split("/")[:-1]
            if _repeats_in_a_row(directories, repeats + 1):
                return ScopeVerdict.REPEATED_PATH_SEGMENTS
        return None

    def _prefix_verdict(self, prefix: str) -> ScopeVerdict | None:
        """``_split_verdict`` of a URL's ``scheme://netloc``, cached (a crawl meets few)."""
        verdicts = self._prefix_verdicts
        try:
            return verdicts[prefix]
        except KeyError:
            pass
        if len(verdicts) >= _PREFIX_VERDICTS_MAX:
            verdicts.clear()
        verdict = verdicts[prefix] = self._split_verdict(prefix, None)
        return verdict

    def _split_verdict(self, url: str, host_verdicts: _HostVerdicts | None) -> ScopeVerdict | None:
        """INVALID_URL, BAD_SCHEME, OUT_OF_DOMAIN or None, from the URL's scheme and netloc."""
        try:
            authority = authority_of(url)
        except UnsupportedScheme:
            return ScopeVerdict.BAD_SCHEME
        except InvalidURL:
            return ScopeVerdict.INVALID_URL
        if host_verdicts is not None and authority in host_verdicts:
            return host_verdicts[authority]
        verdict = (
            None if self.allows_host(authority.host, authority.port) else ScopeVerdict.OUT_OF_DOMAIN
        )
        if host_verdicts is not None:
            host_verdicts[authority] = verdict
        return verdict


def _repeats_in_a_row(segments: list[str], times: int) -> bool:
    """Whether a run of one or more segments appears ``times`` times in a row."""
    count = len(segments)
    for run in range(1, count // times + 1):
        span = run * times
        for first in range(count - span + 1):
            unit = segments[first : first + run]
            if all(
                segments[first + k * run : first + (k + 1) * run] == unit for k in range(1, times)
            ):
                return True
    return False


def _parse_domain_entry(entry: str, field_name: str) -> tuple[str, int | None]:
    """Split an ``allowedDomains`` entry into a normalised host and an optional port.

    ``crawlfleet.hosts.split_host_port`` does it, as it does for the CrawlJob model, so an entry
    is spelled here exactly as the model (and the frontier's canonical URLs) spell hosts.
    """
    try:
        return split_host_port(entry)
    except ValueError as error:
        raise ConfigError(
            f"{field_name}: {entry!r} is not a host name or address, optionally with :port"
            f" ({error})"
        ) from error


def _merge_ports(existing: _Ports, port: int | None) -> _Ports:
    """Union of allowed ports for one host; any entry without a port allows every port."""
    if existing is None or port is None:
        return None
    return existing | {port}


def _port_allowed(ports: _Ports, port: int) -> bool:
    return ports is None or port in ports


def _looks_like_ip(host: str) -> bool:
    """Cheap pre-test: IPv6 has a colon; IPv4 (and nothing valid as a domain) ends in a digit."""
    return ":" in host or host[-1:].isdigit()


def _ip_text(host: str) -> str | None:
    """The canonical text of ``host`` when it is an IP address, else None."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return None


def _compiled(patterns: tuple[str, ...], field_name: str) -> URLPatterns | None:
    """The list compiled by ``crawlfleet.patterns``, its refusal worded with the field's path."""
    try:
        return compile_patterns(patterns)
    except PatternError as error:
        where = field_name if error.index is None else f"{field_name}[{error.index}]"
        raise ConfigError(f"{where}: {error.message}") from error
