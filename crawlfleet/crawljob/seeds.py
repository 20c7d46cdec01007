"""``spec.seeds`` and ``spec.seedsFrom``: where a crawl starts, and the lists that hold more.

A seed is refused here for whatever the frontier would refuse later (it is canonicalised as the
frontier canonicalises it), while the user still has the file open. A seedsFrom list is read once
(a file for ``crawlfleet run``, a ConfigMap for the operator), bounded before it is split, and
each line is checked as an entry of ``spec.seeds`` is.
"""

from __future__ import annotations

import functools
import re
import zlib
from collections.abc import Iterable
from typing import Annotated, ClassVar, Final
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field
from pydantic_core import PydanticCustomError

from crawlfleet.crawljob.base import Cel, MaxLength, Rule, Section
from crawlfleet.crawljob.fields import LIST_FROM_YAML, MIB, OBJECT_NAME, SECRET_KEY, unique
from crawlfleet.crawljob.validation import problem, show, without_userinfo
from crawlfleet.errors import ConfigError
from crawlfleet.hosts import normalize_host
from crawlfleet.urls import try_canonicalize

__all__ = [
    "MAX_SEED_LIST_BYTES",
    "ConfigMapKeyRef",
    "Seeds",
    "SeedsFrom",
    "parse_seed_list",
    "seed_hosts",
]

# Seed limits. The API server accepts CEL rules over every seed only when their estimated cost
# (rules x items x characters) fits its budget, so both bounds are needed; these are the largest
# round pair that fits (measured on kube-apiserver 1.34). 10,000 URLs fill most of the 1.5 MB a
# Kubernetes object may hold, and 2,048 characters is the sitemaps protocol's URL limit.
_MAX_SEEDS: Final = 10_000
_MAX_SEED_LENGTH: Final = 2048
# A seed list (seedsFrom) is read by crawlfleet, not stored by the API server: a million seeds
# is ~10 s of validation and a gzip ConfigMap of a few MB at most; its text is capped before
# it is split, so a decompression bomb costs nothing.
_MAX_LISTED_SEEDS: Final = 1_000_000
MAX_SEED_LIST_BYTES: Final = 256 * 1024 * 1024
_MAX_PATH_LENGTH: Final = 4096
_GZIP_MAGIC: Final = b"\x1f\x8b"

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


def _seed_url(url: str) -> str:
    """Refuse what the frontier would refuse later, while the user still has the file open.

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
        raise problem(f"must be {_SEED_MEANING} (got {show(without_userinfo(url))})")
    if parts.username is not None or parts.password is not None:
        # Never echo the URL back: it holds a password.
        raise problem(_SEED_CREDENTIALS)
    if try_canonicalize(url) is None:
        raise problem(f"must be {_SEED_MEANING} (got {show(without_userinfo(url))})")
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
    """Name of the ConfigMap, in the CrawlJob's namespace."""
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


def parse_seed_list(data: bytes, where: str) -> tuple[str, ...]:
    """The seeds of a seedsFrom list, each refused or kept as an entry of spec.seeds is.

    ``data`` is the list as stored (gzip-compressed when it starts with gzip's magic bytes);
    ``where`` names it in every problem ("spec.seedsFrom.file (seeds.txt)"), which gives the
    line. The first ten bad lines are reported together; repeats are dropped.
    """
    if data[:2] == _GZIP_MAGIC:
        data = _gunzip(data, where)
    if len(data) > MAX_SEED_LIST_BYTES:
        raise ConfigError(f"{where}: is larger than {MAX_SEED_LIST_BYTES // MIB} MiB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: is not UTF-8 text, nor gzip-compressed UTF-8") from None
    seeds: list[str] = []
    problems: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        url = line.strip()
        if not url or url.startswith("#"):
            continue
        try:
            seeds.append(_seed_url(url))
        except PydanticCustomError as error:
            problems.append(f"{where}: line {number}: {error.message()}")
            if len(problems) == 10:
                break
        if len(seeds) > _MAX_LISTED_SEEDS:
            raise ConfigError(f"{where}: holds more than {_MAX_LISTED_SEEDS} seeds")
    if problems:
        count = f"{len(problems)} problem" + ("" if len(problems) == 1 else "s")
        raise ConfigError("\n  ".join([f"invalid seed list ({count}):", *problems]))
    if not seeds:
        raise ConfigError(f"{where}: holds no seed URL (one absolute http(s) URL per line)")
    return tuple(dict.fromkeys(seeds))


def _gunzip(data: bytes, where: str) -> bytes:
    """Decompress with a bound: a small bomb must not become gigabytes in the operator."""
    decompressor = zlib.decompressobj(wbits=31)
    try:
        plain = decompressor.decompress(data, MAX_SEED_LIST_BYTES + 1)
    except zlib.error as error:
        raise ConfigError(f"{where}: starts as gzip but does not decompress ({error})") from None
    if len(plain) > MAX_SEED_LIST_BYTES or decompressor.unconsumed_tail:
        raise ConfigError(
            f"{where}: is larger than {MAX_SEED_LIST_BYTES // MIB} MiB once decompressed"
        )
    return plain
