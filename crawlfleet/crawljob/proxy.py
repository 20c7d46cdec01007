"""``spec.proxy``: the proxies the workers send their requests through (``crawlfleet.proxies``).

Proxies with credentials come from a Secret (``secretRef``: the workers take its key as an
environment variable, so the URLs are in no ConfigMap, argv, log or Event); a proxy without
credentials may be written in the spec (``urls``). Both are read by the same parser, so the
operator refuses a bad Secret with the words ``crawlfleet validate`` uses for a bad ``urls``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, ClassVar, Final

from pydantic import AfterValidator, Field

from crawlfleet.crawljob.base import Cel, MaxLength, Range, Rule, Section
from crawlfleet.crawljob.durations import DurationRange, format_duration
from crawlfleet.crawljob.fields import LIST_FROM_YAML, OBJECT_NAME, SECRET_KEY, unique
from crawlfleet.crawljob.validation import problem, show, without_userinfo
from crawlfleet.errors import ConfigError
from crawlfleet.proxies import (
    MAX_PROXIES,
    PROXY_ENV,
    PROXY_SCHEMES,
    InvalidProxy,
    ProxyPlan,
    parse_no_proxy,
    parse_proxy,
    parse_proxy_list,
)

__all__ = ["ProxySecretRef", "ProxySpec", "checked_proxies", "proxy_plan"]

_MAX_URL_LENGTH: Final = 2048
_MAX_NO_PROXY: Final = 1000
_MAX_NO_PROXY_LENGTH: Final = 259
_CREDENTIALS: Final = (
    "must not carry credentials: put proxies with a user and password in the Secret that"
    " proxy.secretRef names"
)
_SCHEME_RULE: Final = f"self.matches(r'^({'|'.join(PROXY_SCHEMES)})://')"
_SCHEME_MESSAGE: Final = "must be an http, https, socks5 or socks5h URL (scheme://host[:port])"
DEFAULT_EJECT_SECONDS: Final = 60.0


def _proxy_url(text: str) -> str:
    if text.partition("://")[0].lower() not in PROXY_SCHEMES or "://" not in text:
        raise problem(f"{_SCHEME_MESSAGE} (got {show(without_userinfo(text))})")
    try:
        proxy = parse_proxy(text)
    except InvalidProxy as error:
        raise problem(str(error)) from None
    if proxy.username is not None or proxy.password is not None:
        raise problem(_CREDENTIALS)
    return text


def _no_proxy_entry(entry: str) -> str:
    try:
        parse_no_proxy([entry])
    except InvalidProxy as error:
        raise problem(str(error)) from None
    return entry


_ProxyURL = Annotated[
    str,
    MaxLength(_MAX_URL_LENGTH),
    AfterValidator(_proxy_url),
    Cel(_SCHEME_RULE, _SCHEME_MESSAGE),
    Cel(r"!self.matches(r'^[a-z0-9]+://[^/]*@')", _CREDENTIALS),
]
_NoProxyEntry = Annotated[str, MaxLength(_MAX_NO_PROXY_LENGTH), AfterValidator(_no_proxy_entry)]


class ProxySecretRef(Section):
    """A key of a Secret in the job's namespace whose value lists proxy URLs."""

    name: Annotated[str, OBJECT_NAME]
    """Name of the Secret, in the CrawlJob's namespace, labelled for CrawlJobs
    (crawlfleet.io/crawljob-secret=true by default; docs/security.md)."""
    key: Annotated[str, SECRET_KEY] = "proxies"
    """Key whose value lists the proxies: one URL per line (or separated by commas), such as
    `http://user:password@proxy.example:3128` or `socks5://user:password@10.0.0.5:1080`."""


class ProxySpec(Section):
    """Where requests go on their way to the sites: through one of these proxies, a host
    always through the same one while it works, except the hosts of noProxy."""

    urls: Annotated[
        tuple[_ProxyURL, ...], LIST_FROM_YAML, MaxLength(MAX_PROXIES), AfterValidator(unique)
    ] = ()
    """Proxies without credentials (http, https, socks5 or socks5h URLs). A proxy with a user
    and password belongs in the Secret of secretRef."""
    secret_ref: ProxySecretRef | None = None
    """A Secret listing the proxies, credentials included. The workers read it as the
    environment variable CRAWLFLEET_PROXIES; `crawlfleet run` reads the same variable."""
    no_proxy: Annotated[
        tuple[_NoProxyEntry, ...],
        LIST_FROM_YAML,
        MaxLength(_MAX_NO_PROXY),
        AfterValidator(unique),
    ] = ()
    """Hosts requested directly, as NO_PROXY names them: a host name matches itself and its
    subdomains (`example.org`, `.example.org`), an IP address or CIDR block the addresses in
    it, `*` every host."""
    allow_private: bool = False
    """Allow proxies on private, loopback or link-local addresses (a proxy inside the
    cluster). Off: such a proxy is refused like any request to a private address. The
    targets are judged apart, by scope.allowPrivateNetworks."""
    max_failures: Annotated[int, Range(ge=1, le=1000)] = 3
    """Failures in a row (connection refused, 407, no answer) that take a proxy out of
    service; its hosts move to their next proxy meanwhile."""
    eject_for: Annotated[float, DurationRange(ge=1.0, le=24 * 3600.0)] = Field(
        default=format_duration(DEFAULT_EJECT_SECONDS), validate_default=True
    )
    """How long a proxy taken out stays out, as a Go duration (`60s`), before it is tried
    again."""

    cross_field_rules: ClassVar[tuple[Rule[ProxySpec], ...]] = (
        Rule(
            field=None,
            message="urls and secretRef are alternatives: set exactly one",
            cel="[has(self.urls) && size(self.urls) > 0, has(self.secretRef)]"
            ".filter(x, x).size() == 1",
            holds=lambda proxy: (bool(proxy.urls)) != (proxy.secret_ref is not None),
        ),
    )


def proxy_plan(spec: ProxySpec, environ: Mapping[str, str]) -> ProxyPlan:
    """The plan of ``spec.proxy``: its ``urls``, or the Secret's list, which reaches a worker
    (and ``crawlfleet run``) as :data:`~crawlfleet.proxies.PROXY_ENV`. Raises
    :class:`~crawlfleet.proxies.InvalidProxy` with a sentence that names where the mistake is,
    never the credentials."""
    if spec.urls:
        proxies = tuple(parse_proxy(url) for url in spec.urls)
    else:
        listed = environ.get(PROXY_ENV, "")
        assert spec.secret_ref is not None  # the section's rule: urls or secretRef
        if not listed.strip():
            raise InvalidProxy(
                f"spec.proxy.secretRef: the environment variable {PROXY_ENV} is not set;"
                f" in a cluster the operator sets it from Secret {spec.secret_ref.name}"
                f" (key {spec.secret_ref.key}); locally, export it with the proxy URLs"
            )
        try:
            proxies = parse_proxy_list(listed)
        except InvalidProxy as error:
            raise InvalidProxy(f"{PROXY_ENV} (spec.proxy.secretRef): {error}") from None
    return ProxyPlan(
        proxies=proxies,
        no_proxy=parse_no_proxy(spec.no_proxy),
        allow_private=spec.allow_private,
        max_failures=spec.max_failures,
        eject_seconds=spec.eject_for,
    )


def checked_proxies(spec: ProxySpec | None, environ: Mapping[str, str]) -> ProxyPlan | None:
    """The job's proxy plan (None without ``spec.proxy``); one that cannot be made is a
    ``ConfigError`` (one sentence, exit 2) before anything starts."""
    if spec is None:
        return None
    try:
        return proxy_plan(spec, environ)
    except InvalidProxy as error:
        raise ConfigError(str(error)) from None
