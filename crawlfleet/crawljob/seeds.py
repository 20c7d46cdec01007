"""``spec.seeds`` and ``spec.seedsFrom``: where a crawl starts, and the lists that hold more.

A seed is refused here for whatever the frontier would refuse later (it is canonicalised as the
frontier canonicalises it), while the user still has the file open. A seedsFrom list is read once
(a file for ``crawlfleet run``, a ConfigMap for the operator) by ``seed_list.py``, streamed and
bounded, and each line is checked as an entry of ``spec.seeds`` is.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import Annotated, ClassVar, Final
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field

from crawlfleet.crawljob.base import Cel, MaxLength, Rule, Section
from crawlfleet.crawljob.fields import LIST_FROM_YAML, OBJECT_NAME, SECRET_KEY, unique
from crawlfleet.crawljob.validation import problem, show, without_userinfo
from crawlfleet.hosts import normalize_host
from crawlfleet.urls import try_canonicalize

__all__ = [
    "ConfigMapKeyRef",
    "Seeds",
    "SeedsFrom",
    "seed_hosts",
    "seed_problem",
]

# Seed limits. The API server accepts CEL rules over every seed only when their estimated cost
# (rules x items x characters) fits its budget, so both bounds are needed; these are the largest
# round pair that fits (measured on kube-apiserver 1.34). 10,000 URLs fill most of the 1.5 MB a
# Kubernetes object may hold, and 2,048 characters is the sitemaps protocol's URL limit.
_MAX_SEEDS: Final = 10_000
_MAX_SEED_LENGTH: Final = 2048
_MAX_PATH_LENGTH: Final = 4096

_SEED_MEANING: Final = f"an absolute http(s) URL with a host, at most {_MAX_SEED_LENGTH} characters"
_SEED_CREDENTIALS: Final = (
    "must not hold a user name or password: a crawl sends no credentials, and the spec is"
    " readable by anyone who can read the CrawlJob"
)

# A seed list repeats its hosts: each is checked once (a refused one is not cached, it raises).
_strict_host: Final = functools.lru_cache(maxsize=4096)(
    functools.partial(normalize_host, strict=True)
)
_SPACE_OR_CONTROL: Final = re.compile(r"[\s\x00-\x1f\x7f]")


def seed_problem(url: str) -> str | None:
    """Why the frontier would refuse ``url`` later (None: it would not), in words that quote
    nothing of it: a seed list's reader says this beside a line number, where the line may come
    from a ConfigMap the job's author cannot read (seed_list.py).

    ``_SEED_CEL`` says the same for the API server, as far as CEL's URL library can. The seed is
    canonicalised here as the frontier will canonicalise it, so a seed that passes cannot fail
    there.
    """
    try:
        parts = urlsplit(url)
        valid = (
            len(url) <= _MAX_SEED_LENGTH
            and parts.scheme.lower() in ("http", "https")
            and bool(parts.hostname)
            and _SPACE_OR_CONTROL.search(url) is None
        )
        if valid and parts.hostname is not None:
            _strict_host(parts.hostname)
            valid = parts.port != 0  # parts.port raises ValueError on a bad port
    except ValueError:
        valid = False
    if not valid:
        return f"must be {_SEED_MEANING}"
    if parts.username is not None or parts.password is not None:
        return _SEED_CREDENTIALS
    if try_canonicalize(url) is None:
        return f"must be {_SEED_MEANING}"
    return None


def _seed_url(url: str) -> str:
    """An entry of spec.seeds: refused as :func:`seed_problem` refuses it, and shown (the
    user's own spec), but for a password."""
    reason = seed_problem(url)
    if reason == _SEED_CREDENTIALS:
        raise problem(reason)  # never echo the URL back: it holds a password
    if reason is not None:
        raise problem(f"{reason} (got {show(without_userinfo(url))})")
    return url


def _non_empty(values: tuple[str, ...]) -> tuple[str, ...]:
    if not values:
        raise problem("must not be empty")
    return values


# Go's URL parser (behind isURL and url) lower-cases the scheme as _seed_url does, refuses
# control characters and a non-numeric port, but allows spaces in the path: that is a rule of its
# own. A port of 0 or above 65535 and credentials are left to _seed_url (so to the operator's
# InvalidSpec condition): one more url() call, or a regex or a few indexOf() over every seed, would
# not fit the API server's cost budget (measured: 3x to 6x over). One url() call per rule, for
# the same reason.
_SEED_CEL: Final = (
    Cel("isURL(self) && url(self).getScheme() in ['http', 'https']", f"must be {_SEED_MEANING}"),
    Cel("!isURL(self) || url(self).getHostname() != ''", f"must be {_SEED_MEANING}"),
    Cel("!self.contains(' ')", f"must be {_SEED_MEANING}"),
)

_Seed = Annotated[
    str,
    AfterValidator(_seed_url),
    *_SEED_CEL,
    Field(json_schema_extra={"maxLength": _MAX_SEED_LENGTH}),
]

# Not Field(min_length=1): pydantic would count only the valid seeds and add a bogus
# "must not be empty" beside the real per-seed problem.
Seeds = Annotated[
    tuple[_Seed, ...],
    LIST_FROM_YAML,
    Field(json_schema_extra={"minItems": 1}),
    MaxLength(_MAX_SEEDS),
    AfterValidator(_non_empty),
]


class ConfigMapKeyRef(Section):
    """A key of a ConfigMap in the job's namespace."""

    name: Annotated[str, OBJECT_NAME]
    """Name of the ConfigMap, in the CrawlJob's namespace. The operator reads only a ConfigMap
    labelled for seed lists (crawlfleet.io/crawljob-seeds=true by default; docs/security.md)."""
    key: Annotated[str, SECRET_KEY]
    """Key in the ConfigMap: a text entry (data), or a gzip-compressed one (binaryData: what
    kubectl create configmap --from-file makes of a .gz file), for lists past the 1 MiB a
    ConfigMap holds."""


def _seed_file(path: str) -> str:
    if not path:
        raise problem("must not be empty")
    return path


class SeedsFrom(Section):
    """A seed list kept outside the CrawlJob: one URL per line, blank lines and lines starting
    with # skipped, as text or gzip-compressed. Read once, when the job starts: a later edit of
    the list changes nothing."""

    config_map_key_ref: ConfigMapKeyRef | None = None
    """The list in a ConfigMap of the job's namespace, for a job in a cluster."""
    file: (
        Annotated[
            str,
            MaxLength(_MAX_PATH_LENGTH),
            AfterValidator(_seed_file),
            Cel("self.size() > 0", "must not be empty"),
        ]
        | None
    ) = None
    """The list in a file, for crawlfleet run and crawlfleet validate: a path relative to the
    CrawlJob file."""

    cross_field_rules: ClassVar[tuple[Rule[SeedsFrom], ...]] = (
        Rule(
            field=None,
            message="configMapKeyRef and file are alternatives: set exactly one",
            cel="[has(self.configMapKeyRef), has(self.file)].filter(x, x).size() == 1",
            holds=lambda source: (source.config_map_key_ref is None) != (source.file is None),
        ),
    )


def seed_hosts(seeds: Iterable[str]) -> tuple[str, ...]:
    """The seeds' hosts, each once, spelled as allowedDomains entries are: the default scope."""
    hosts = dict.fromkeys(urlsplit(seed).hostname for seed in seeds)  # in order, each once
    return unique(tuple(normalize_host(host) for host in hosts if host))
