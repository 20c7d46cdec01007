"""The CrawlJob resource: spec and status models, their defaults and their validation.

This module is the one source of truth for what a CrawlJob may say: the CLI (``crawlfleet run
job.yaml``), the operator, the workers (which receive ``spec.to_mapping()``) and the CRD all take
their defaults and rules from here, so a job that ``crawlfleet run`` accepts is a job the cluster
accepts, and the other way round.

Field names are the contract of DESIGN.md §2: camelCase on the wire (the aliases), snake_case in
Python. Every invalid document becomes one ``ConfigError`` listing every problem, one per line,
each with its path from the document root (``spec.dedup.errorRate: ...``), because a user fixing a
YAML file wants all the mistakes at once and in the words of the file.

Rules, and where a CRD generator finds them:

* per-field rules (type, range, pattern, regex compiles, URL shape) sit on the fields, as
  ``_Range``/``_Pattern`` markers (which also write ``minimum``/``maximum``/``pattern`` into the
  JSON schema) or as validators of single values, beside a ``_Cel`` marker where CEL can say
  the same (the seed URL shape);
* cross-field rules are ``Rule`` objects in each section's ``cross_field_rules``, each with its
  message and the same rule in CEL (for ``x-kubernetes-validations``). They are:
  workers ``minReplicas <= maxReplicas``; lease ``heartbeatSeconds < deadAfterSeconds`` and
  ``heartbeatSeconds < ttlSeconds``; retry ``backoffMaxSeconds >= backoffBaseSeconds``; redis
  "at most one of url, secretRef, managed".
* two defaults depend on other fields and so cannot be CRD defaults: ``scope.allowedDomains``
  (the seed hosts) and ``redis.managed`` (when neither url nor secretRef is given). The models fill
  them, so every consumer sees them filled.

The docstring under each field is its description for users: ``crawlfleet/operator/crd.py``
turns these models into the CRD (``kubectl explain``) and the field tables of docs/crawljob.md,
so a field, default, bound, rule or description changes here and nowhere else.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
import stat
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, ClassVar, Final, Generic, Literal, Self, TypeVar, get_args
from urllib.parse import urlsplit

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    JsonValue,
    ValidationError,
    computed_field,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import ErrorDetails, PydanticCustomError, core_schema

from crawlfleet.destinations import (
    DESTINATION_CREDENTIALS,
    DESTINATION_MEANING,
    MAX_DESTINATION_LENGTH,
    InvalidDestination,
    parse_destination,
)
from crawlfleet.errors import ConfigError
from crawlfleet.hosts import normalize_host, split_host_port
from crawlfleet.patterns import PatternError, compile_patterns
from crawlfleet.selection import SelectorError, check_selector
from crawlfleet.urls import try_canonicalize

__all__ = [
    "API_VERSION",
    "DEFAULT_USER_AGENT",
    "KIND",
    "ConcurrencySpec",
    "Condition",
    "ConfigMapKeyRef",
    "CrawlJob",
    "CrawlJobSpec",
    "CrawlJobStatus",
    "CrawlerSpec",
    "CredentialsSecretRef",
    "DedupSpec",
    "ExtractField",
    "ExtractRule",
    "ExtractSelector",
    "FetchSpec",
    "FleetStatus",
    "LeaseSpec",
    "ManagedRedis",
    "ObjectMeta",
    "OutputSpec",
    "Persistence",
    "Phase",
    "RedisSpec",
    "RetrySpec",
    "RobotsSpec",
    "Rule",
    "S3Spec",
    "ScopeSpec",
    "ScrapySpec",
    "SecretRef",
    "SeedsFrom",
    "WorkersSpec",
    "load_crawljob",
    "parse_crawljob",
    "parse_seed_list",
    "read_seed_file",
]

API_VERSION: Final = "crawlfleet.io/v1alpha1"
KIND: Final = "CrawlJob"
DEFAULT_USER_AGENT: Final = "crawlfleet/0.1 (+https://github.com/crawlfleet/crawlfleet)"
_MIB: Final = 1024 * 1024
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
_MAX_SEED_LIST_BYTES: Final = 256 * 1024 * 1024
_MAX_PATH_LENGTH: Final = 4096
_GZIP_MAGIC: Final = b"\x1f\x8b"
# The other bounds: each the largest value that still makes sense, so that a typo (an extra
# zero, seconds written as milliseconds) is refused with its field instead of run, and no
# number reaches Redis, Lua or a timer that it would overflow.
_MAX_PATTERNS: Final = 100  # per list; RE2 compiles them into one set
_MAX_PATTERN_LENGTH: Final = 1024
_MAX_DOMAINS: Final = 1000
_MAX_DOMAIN_LENGTH: Final = 259  # a 253-character name and ":65535"
_MAX_DEPTH: Final = 1_000_000
_MAX_CAPACITY: Final = 10_000_000_000  # ~12 GB of Bloom filter at errorRate 0.01
_MIN_ERROR_RATE: Final = 1e-9  # the Bloom sizing's floor (frontier/bloom.py)
_MAX_REPLICAS: Final = 1000
_DAY_SECONDS: Final = 86_400
_MAX_ATTEMPTS: Final = 100
_MAX_TEXT_LENGTH: Final = 1024  # a User-Agent, an image reference
_MAX_REDIS_URL_LENGTH: Final = 2048
_MAX_ENDPOINT_LENGTH: Final = 2048
_GIB: Final = 1024 * _MIB
_MAX_SPEC_JSON_BYTES: Final = 880_000  # see CrawlJobSpec._fits_the_workers_config_map
# spec.extract: rules, fields per rule, a selector's length. Bounded so that the API server's
# CEL cost estimate of the RE2 checks (rules x fields x pattern length) stays in its budget.
_MAX_EXTRACT_RULES: Final = 16
_MAX_EXTRACT_FIELDS: Final = 32
_MAX_SELECTOR_LENGTH: Final = 1024
_MAX_VALUE_PATTERN_LENGTH: Final = 256
_FIELD_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")

Phase = Literal["Pending", "Running", "Suspended", "Succeeded", "Failed"]

_SectionT = TypeVar("_SectionT", bound=BaseModel)
_NumberT = TypeVar("_NumberT", int, float)
_EntryT = TypeVar("_EntryT")

# RFC 1123 as Kubernetes uses it: a label for namespaces, a subdomain for object names.
_DNS_LABEL: Final = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN: Final = rf"{_DNS_LABEL}(\.{_DNS_LABEL})*"
_OBJECT_META_FIELDS: Final = frozenset(
    {
        "annotations",
        "creationTimestamp",
        "deletionGracePeriodSeconds",
        "deletionTimestamp",
        "finalizers",
        "generateName",
        "generation",
        "labels",
        "managedFields",
        "name",
        "namespace",
        "ownerReferences",
        "resourceVersion",
        "selfLink",
        "uid",
    }
)


# --- single-value rules -----------------------------------------------------------------------


def _problem(message: str) -> PydanticCustomError:
    """A validation failure whose message is already in the user's words (no pydantic prose)."""
    return PydanticCustomError("crawljob", message)


def _show(value: object) -> str:
    """Render an offending value the way the user wrote it in YAML/JSON, kept short."""
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


@dataclass(frozen=True, slots=True)
class _Range:
    """A numeric range that explains itself in full and shows up in the JSON schema.

    Pydantic's own bounds report one side at a time ("less than 0.5"); a user deserves the whole
    range ("greater than 0 and less than 0.5"), and the CRD generator still finds
    minimum/maximum in the schema.
    """

    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    le: float | None = None

    def describe(self) -> str:
        if self.ge is not None and self.le is not None:
            return f"between {self.ge} and {self.le}"
        lower = (
            f"greater than {self.gt}"
            if self.gt is not None
            else f"at least {self.ge}"
            if self.ge is not None
            else None
        )
        upper = (
            f"less than {self.lt}"
            if self.lt is not None
            else f"at most {self.le}"
            if self.le is not None
            else None
        )
        return " and ".join(part for part in (lower, upper) if part)

    def check(self, value: _NumberT) -> _NumberT:
        # Written as "fails unless inside" so that nothing unexpected slips through.
        inside = (
            (self.gt is None or value > self.gt)
            and (self.ge is None or value >= self.ge)
            and (self.lt is None or value < self.lt)
            and (self.le is None or value <= self.le)
        )
        if not inside:
            raise _problem(f"must be {self.describe()} (got {_show(value)})")
        return value

    def __get_pydantic_core_schema__(
        self, source: type[Any], handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(self.check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        bounds = {
            "exclusiveMinimum": self.gt,
            "minimum": self.ge,
            "exclusiveMaximum": self.lt,
            "maximum": self.le,
        }
        json_schema.update({key: value for key, value in bounds.items() if value is not None})
        return json_schema


@dataclass(frozen=True, slots=True)
class _Pattern:
    """A string shape with a human description; RE2-compatible so the CRD can reuse it."""

    pattern: str
    meaning: str
    max_length: int | None = None

    def check(self, value: str) -> str:
        too_long = self.max_length is not None and len(value) > self.max_length
        if too_long or not re.fullmatch(self.pattern, value):
            raise _problem(f"must be {self.meaning} (got {_show(value)})")
        return value

    def __get_pydantic_core_schema__(
        self, source: type[Any], handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(self.check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        json_schema["pattern"] = f"^{self.pattern}$"
        if self.max_length is not None:
            json_schema["maxLength"] = self.max_length
        return json_schema


@dataclass(frozen=True, slots=True)
class _MaxLength:
    """A cap on a string's characters or a list's items, in the user's words and the schema.

    A list is measured before its items are validated, so ten million seeds cost one ``len``,
    not ten million URL checks.
    """

    limit: int

    def check(self, value: object) -> object:
        if isinstance(value, str) and len(value) > self.limit:
            raise _problem(f"must be at most {self.limit} characters long (got {len(value)})")
        if isinstance(value, list | tuple) and len(value) > self.limit:
            raise _problem(f"must hold at most {self.limit} items (got {len(value)})")
        return value

    def __get_pydantic_core_schema__(
        self, source: type[Any], handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_before_validator_function(self.check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        key = "maxItems" if json_schema.get("type") == "array" else "maxLength"
        json_schema[key] = self.limit
        return json_schema


@dataclass(frozen=True, slots=True)
class _Cel:
    """A single-value rule restated in CEL, for the CRD's ``x-kubernetes-validations``.

    It sits beside the Python validator it mirrors and only writes the JSON schema: the API
    server cannot run Python, and keeping the two side by side is what stops them drifting.
    ``message`` is the validator's own words, so both refusals read alike.
    """

    rule: str
    message: str

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        rules = json_schema.setdefault("x-kubernetes-validations", [])
        rules.append({"rule": self.rule, "message": self.message})
        return json_schema


_OBJECT_NAME: Final = _Pattern(
    _DNS_SUBDOMAIN,
    "a lowercase RFC 1123 name (letters, digits, '-' and '.', starting and ending with a letter"
    " or digit, at most 253 characters)",
    max_length=253,
)
_NAMESPACE: Final = _Pattern(
    _DNS_LABEL,
    "a lowercase RFC 1123 label (letters, digits and '-', starting and ending with a letter"
    " or digit, at most 63 characters)",
    max_length=63,
)
_SECRET_KEY: Final = _Pattern(
    r"[-._a-zA-Z0-9]+",
    "a Secret or ConfigMap key (letters, digits, '-', '_' and '.')",
    max_length=253,
)
_QUANTITY: Final = _Pattern(
    r"[0-9]+(\.[0-9]+)?([KMGTPE]i|[kMGTPE])?",
    "a Kubernetes quantity such as 1Gi or 500Mi",
    max_length=64,
)
_IMAGE: Final = _Pattern(
    r"[^\s]+", "a container image reference without spaces, such as redis:7.4-alpine"
)
_REGION: Final = _Pattern(
    r"[a-z0-9][a-z0-9-]*", "a region name such as us-east-1 or auto", max_length=64
)


_SPIDER_NAME: Final = _Pattern(
    r"[A-Za-z0-9_][-A-Za-z0-9_.]*",
    "a spider name (letters, digits, '_', '-' and '.')",
    max_length=_MAX_TEXT_LENGTH,
)
_PYTHON_MODULE: Final = _Pattern(
    r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*",
    "a Python module as package.module",
    max_length=_MAX_TEXT_LENGTH,
)
#: Every string shape, for the CRD generator to find each one's message by its pattern.
_PARSER_REFERENCE: Final = _Pattern(
    r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*",
    "a Python function as package.module:function",
    max_length=_MAX_TEXT_LENGTH,
)
STRING_SHAPES: Final = (
    _OBJECT_NAME,
    _NAMESPACE,
    _SECRET_KEY,
    _QUANTITY,
    _IMAGE,
    _REGION,
    _PARSER_REFERENCE,
    _SPIDER_NAME,
    _PYTHON_MODULE,
)


def _allowed_domain(entry: str) -> str:
    """Normalise one allowedDomains entry: a host name or IP, optionally with ``:port``.

    ``crawlfleet.hosts`` spells it, as it spells the hosts of the links the scope compares it
    with (IDNA 2008: ``faß.de`` is ``xn--fa-hia.de``, never ``fass.de``).
    """
    try:
        host, port = split_host_port(entry)
    except ValueError:
        raise _problem(
            f"must be a host name or IP address, optionally with :port (got {_show(entry)})"
        ) from None
    if port is None:
        return host
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _non_empty(values: tuple[str, ...]) -> tuple[str, ...]:
    if not values:
        raise _problem("must not be empty")
    return values


def _unique(values: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(values))


_SEED_MEANING: Final = f"an absolute http(s) URL with a host, at most {_MAX_SEED_LENGTH} characters"
_SEED_CREDENTIALS: Final = (
    "must not hold a user name or password: a crawl sends no credentials, and the spec is"
    " readable by anyone who can read the CrawlJob"
)


def _without_userinfo(url: str) -> str:
    """``url`` with a ``user:password@`` before its host masked, for a message (an Event, a log)."""
    scheme, separator, rest = url.partition("://")
    ends = [found for found in (rest.find(char) for char in "/?#") if found >= 0]
    at = rest.rfind("@", 0, min(ends, default=len(rest)))
    return url if not separator or at < 0 else f"{scheme}{separator}***@{rest[at + 1 :]}"


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
        raise _problem(f"must be {_SEED_MEANING} (got {_show(_without_userinfo(url))})")
    if parts.username is not None or parts.password is not None:
        # Never echo the URL back: it holds a password.
        raise _problem(_SEED_CREDENTIALS)
    if try_canonicalize(url) is None:
        raise _problem(f"must be {_SEED_MEANING} (got {_show(_without_userinfo(url))})")
    return url


def _url_pattern(pattern: str) -> str:
    """One pattern, compiled alone as RE2 (``_url_patterns`` then checks the list together)."""
    try:
        compile_patterns((pattern,))
    except PatternError as error:
        raise _problem(error.message) from None  # RE2's reason quotes the offending part
    return pattern


def _url_patterns(patterns: tuple[str, ...]) -> tuple[str, ...]:
    """The list compiled exactly as the scope compiles it (one RE2 set), or refused."""
    try:
        compile_patterns(patterns)
    except PatternError as error:
        raise _problem(error.message) from None
    return patterns


_HEADER_VALUE: Final = (
    "must be a non-empty header value of printable ASCII characters (no control characters,"
    " newlines or other letters: an HTTP client sends header values as ASCII)"
)
_PRODUCT_TOKEN: Final = (
    "must start with a product token, a name without spaces such as mybot/1.0:"
    " robots.txt rules are matched against it"
)


def _user_agent(value: str) -> str:
    """A User-Agent goes into every request header; a control character would split it.

    robots.txt groups are matched against its product token (the text before the first
    ``/``, as the crawler's robots policy reads it), so that token must be a name.
    """
    if not value.strip() or not all(" " <= char <= "~" for char in value):
        raise _problem(_HEADER_VALUE)
    token = value.split("/", 1)[0].strip()
    if not token or any(char.isspace() for char in token):
        raise _problem(_PRODUCT_TOKEN)
    return value


# The same rules for the API server; a tab is a control character, so [^/\s] is enough.
_USER_AGENT_CEL: Final = (
    _Cel(r"self.matches(r'^[\x20-\x7e]*[\x21-\x7e][\x20-\x7e]*$')", _HEADER_VALUE),
    _Cel(r"self.matches(r'^ *[^/\s]+ *(/|$)')", _PRODUCT_TOKEN),
)
_REDIS_URL: Final = (
    "must be a redis://host[:port][/db], rediss://host[:port][/db] or unix:///path URL"
    " (connection options are the operator's)"
)


def _redis_url(url: str) -> str:
    """Refuse what redis-py's ``from_url`` would refuse when the frontier connects.

    The URL may carry a password: the message never echoes it.
    """
    try:
        parts = urlsplit(url)
        scheme, port = parts.scheme, parts.port  # .port raises ValueError on a bad port
        valid = (
            scheme in ("redis", "rediss", "unix")
            and not parts.query
            and not parts.fragment
            and not any(char.isspace() or ord(char) < 32 for char in url)
            and port != 0
        )
        if scheme == "unix":
            valid = valid and bool(parts.path) and not parts.netloc
        else:
            db = parts.path.removeprefix("/")
            valid = valid and bool(parts.hostname) and (db == "" or db.isdecimal())
    except ValueError:
        valid = False
    if not valid:
        raise _problem(_REDIS_URL)
    return url


# The same shape for the API server, but for the port's range (the operator's InvalidSpec).
_REDIS_URL_CEL: Final = _Cel(
    r"self.matches(r'^rediss?://([^/?#\s@]*@)?(\[[0-9a-fA-F:.]+\]|[^/?#\s@:\[\]]+)"
    r"(:[0-9]+)?(/[0-9]*)?$')"
    r" || self.matches(r'^unix:///[^?#\s]*$')",
    _REDIS_URL,
)


def _destination(text: str) -> str:
    """``output.destination``: a folder, a file:// URL or s3://bucket/prefix/ (see the parser)."""
    try:
        parse_destination(text)
    except InvalidDestination as error:
        raise _problem(str(error)) from None
    return text


_MAX_DESTINATION_LENGTH: Final = MAX_DESTINATION_LENGTH
# The API server refuses the two mistakes CEL can see (credentials, a scheme we do not speak);
# the bucket's name and the prefix's shape are the operator's InvalidSpec.
_DESTINATION_CEL: Final = (
    _Cel(r"!self.matches(r'^[a-zA-Z][a-zA-Z0-9+.-]*://[^/]*@')", DESTINATION_CREDENTIALS),
    _Cel(
        r"!self.matches(r'^[a-zA-Z][a-zA-Z0-9+.-]*:') || self.startsWith('s3://')"
        r" || self.startsWith('file://')",
        DESTINATION_MEANING,
    ),
)
_ENDPOINT_MEANING: Final = (
    "must be an http(s)://host[:port] URL of an S3-compatible store, without a path, query"
    " or credentials"
)


def _endpoint_url(url: str) -> str:
    """``output.s3.endpoint``: where the S3 client sends its requests (obstore's ``endpoint``)."""
    try:
        parts = urlsplit(url)
        valid = (
            parts.scheme in ("http", "https")
            and bool(parts.hostname)
            and parts.path in ("", "/")
            and not parts.query
            and not parts.fragment
            and not any(char.isspace() or ord(char) < 32 for char in url)
            and parts.port != 0  # .port raises ValueError on a bad port
        )
    except ValueError:
        valid = False
    if valid and "@" in parts.netloc:
        raise _problem(DESTINATION_CREDENTIALS)
    if not valid:
        raise _problem(f"{_ENDPOINT_MEANING} (got {_show(_without_userinfo(url))})")
    return url


_RESOURCE_KEYS: Final = frozenset({"limits", "requests"})
# Kubernetes' quantity grammar (k8s.io/apimachinery/pkg/api/resource): a number, then a binary
# or decimal SI suffix or an exponent.
_KUBE_QUANTITY: Final = re.compile(
    r"\+?(?P<number>[0-9]+(\.[0-9]*)?|\.[0-9]+)"
    r"(?P<suffix>[KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?"
)
_SI_FACTORS: Final = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
    "P": Decimal("1e15"), "E": Decimal("1e18"),
    **{f"{prefix}i": Decimal(1024) ** (power + 1) for power, prefix in enumerate("KMGTPE")},
}  # fmt: skip


def _quantity(value: JsonValue) -> Decimal | None:
    """A Kubernetes quantity (``500m``, ``1Gi``, ``2``) as a number, or None if it is none."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return Decimal(str(value)) if value >= 0 and value == value else None
    if not isinstance(value, str) or len(value) > 64:
        return None
    match = _KUBE_QUANTITY.fullmatch(value)
    if match is None:
        return None
    suffix = match["suffix"] or ""
    if suffix[:1] in ("e", "E"):
        exponent = int(suffix[1:])
        if abs(exponent) > 30:  # past any resource a node has (E is 1e18)
            return None
        return Decimal(match["number"]) * Decimal(10) ** exponent
    return Decimal(match["number"]) * _SI_FACTORS[suffix]


def _resources(resources: dict[str, JsonValue]) -> dict[str, JsonValue]:
    """The checks the API server makes when the operator puts these into a Pod."""
    found: list[tuple[_Where, str]] = []
    amounts: dict[str, dict[str, Decimal]] = {}
    for key, section in resources.items():
        if key not in _RESOURCE_KEYS:
            found.append(((key,), "unknown field; a worker's resources take limits and requests"))
            continue
        if not isinstance(section, dict):
            found.append(((key,), "must be a mapping of resource names to quantities"))
            continue
        amounts[key] = {}
        for name, value in section.items():
            amount = _quantity(value)
            if amount is None:
                found.append(((key, name), "must be a Kubernetes quantity such as 500m or 1Gi"))
            else:
                amounts[key][name] = amount
    limits = amounts.get("limits", {})
    for name, amount in amounts.get("requests", {}).items():
        if name in limits and amount > limits[name]:
            found.append((("requests", name), f"must not be greater than limits.{name}"))
    if found:
        raise _problems(found)
    return resources


# Kubernetes' volume sources (core/v1 Volume): a Volume names exactly one of them.
_VOLUME_SOURCES: Final = frozenset(
    {
        "awsElasticBlockStore", "azureDisk", "azureFile", "cephfs", "cinder", "configMap",
        "csi", "downwardAPI", "emptyDir", "ephemeral", "fc", "flexVolume", "flocker",
        "gcePersistentDisk", "gitRepo", "glusterfs", "hostPath", "image", "iscsi", "nfs",
        "persistentVolumeClaim", "photonPersistentDisk", "portworxVolume", "projected",
        "quobyte", "rbd", "scaleIO", "secret", "storageos", "vsphereVolume",
    }
)  # fmt: skip


def _volume_source(volume: dict[str, JsonValue]) -> dict[str, JsonValue]:
    """One volume source, as a Pod's volume takes it (the operator adds the name)."""
    if len(volume) != 1:
        raise _problem(
            "must name exactly one volume source, such as"
            " {persistentVolumeClaim: {claimName: crawl-output}}"
        )
    ((kind, source),) = volume.items()
    if kind not in _VOLUME_SOURCES:
        raise _problems([((kind,), _unknown_field(kind, _VOLUME_SOURCES))])
    if not isinstance(source, dict):
        raise _problems([((kind,), "must be a mapping")])
    if kind == "persistentVolumeClaim" and not isinstance(source.get("claimName"), str):
        raise _problems([((kind, "claimName"), "is required: the name of the claim to mount")])
    return volume


# Go's URL parser (behind isURL and url) lower-cases the scheme as _seed_url does, refuses
# control characters and a non-numeric port, but allows spaces in the path: that is a rule of its
# own. A port of 0 or above 65535 and credentials are left to _seed_url (so to the operator's
# InvalidSpec condition): one more url() call, or a regex or a few indexOf() over every seed, would
# not fit the API server's cost budget (measured: 3x to 6x over). One url() call per rule, for
# the same reason.
_SEED_CEL: Final = (
    _Cel("isURL(self) && url(self).getScheme() in ['http', 'https']", f"must be {_SEED_MEANING}"),
    _Cel("!isURL(self) || url(self).getHostname() != ''", f"must be {_SEED_MEANING}"),
    _Cel("!self.contains(' ')", f"must be {_SEED_MEANING}"),
)
# YAML hands us lists; tuples keep the frozen models immutable all the way down.
_LIST_FROM_YAML: Final = Field(strict=False)
_Seed = Annotated[
    str,
    AfterValidator(_seed_url),
    *_SEED_CEL,
    Field(json_schema_extra={"maxLength": _MAX_SEED_LENGTH}),
]
# CEL's matches() compiles its pattern with Go's RE2 when the rule runs, and a pattern it cannot
# compile is an evaluation error: the API server refuses the object with Go's reason and this
# message. type() keeps the rule from being true either way (an error inside || could be
# absorbed). A list too large to compile together is the operator's InvalidSpec.
_RE2_CHECKS: Final = (
    AfterValidator(_url_pattern),
    _Cel("type(''.matches(self)) == bool", "is not a valid RE2 pattern"),
)
_URLPattern = Annotated[str, _MaxLength(_MAX_PATTERN_LENGTH), *_RE2_CHECKS]
_Domain = Annotated[str, _MaxLength(_MAX_DOMAIN_LENGTH), AfterValidator(_allowed_domain)]
_Seconds = Annotated[float, _Range(gt=0, le=_DAY_SECONDS)]
_DelaySeconds = Annotated[float, _Range(ge=0, le=_DAY_SECONDS)]
_Attempts = Annotated[int, _Range(ge=1, le=_MAX_ATTEMPTS)]
_Bytes = Annotated[int, _Range(ge=1, le=_GIB)]
_Image = Annotated[
    str,
    _MaxLength(_MAX_TEXT_LENGTH),
    _IMAGE,
]
_URLPatterns = Annotated[
    tuple[_URLPattern, ...],
    _LIST_FROM_YAML,
    _MaxLength(_MAX_PATTERNS),
    AfterValidator(_url_patterns),
]


# --- cross-field rules ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Rule(Generic[_SectionT]):
    """A rule over several fields of one section: what a per-field schema cannot say.

    ``cel`` states the same rule over ``self`` (the section) for the CRD's
    ``x-kubernetes-validations``, with ``message`` and ``field`` (its fieldPath), so the cluster
    refuses exactly what ``crawlfleet run`` refuses. Locally the message also quotes the values of
    ``shows``.
    """

    field: str | None
    message: str
    cel: str
    holds: Callable[[_SectionT], bool]
    shows: tuple[str, ...] = ()

    def explain(self, section: _SectionT) -> str:
        if not self.shows:
            return self.message
        values = section.model_dump(by_alias=True)
        got = ", ".join(f"{name}={_show(_dig(values, name))}" for name in self.shows)
        return f"{self.message} (got {got})"


def _dig(values: Mapping[str, Any], dotted: str) -> object:
    """``values["scope"]["maxPages"]`` for ``"scope.maxPages"``."""
    found: Any = values
    for part in dotted.split("."):
        found = found[part]
    return found


# Where a problem of a model validator lies, below the model: None (the model itself), a dotted
# field path ("scope.maxPages", as Rule.field says it) or a tuple of keys (dict keys may hold dots).
_Where = str | tuple[str, ...] | None


def _problems(found: Sequence[tuple[_Where, str]]) -> PydanticCustomError:
    """Several problems at once from one model validator, each at its own field.

    Pydantic allows one error per validator call; the list rides in the context and
    ``_config_error`` spreads it back into one line per field.
    """
    summary = "; ".join(message for _, message in found)
    return PydanticCustomError(
        "crawljob_problems", "{summary}", {"summary": summary, "found": found}
    )


# --- models -----------------------------------------------------------------------------------


class _Model(BaseModel):
    """Spec models: camelCase aliases, typos refused, no coercion the API server would not do.

    ``strict`` keeps ``crawlfleet run`` as picky as the CRD schema ("3" is not an integer).
    The docstring under each field is its user-facing description: the CRD (``kubectl
    explain``) and docs/crawljob.md both print it, so it says what, in which unit, and why.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        strict=True,
        allow_inf_nan=False,
        use_attribute_docstrings=True,
    )


class _Section(_Model):
    """A spec section; checks its ``cross_field_rules`` and reports every broken one."""

    cross_field_rules: ClassVar[tuple[Rule[Any], ...]] = ()

    @model_validator(mode="after")
    def _check_cross_field_rules(self) -> Self:
        found = [
            (rule.field, rule.explain(self))
            for rule in self.cross_field_rules
            if not rule.holds(self)
        ]
        if found:
            raise _problems(found)
        return self


class ScopeSpec(_Section):
    """Which links the crawl follows. Empty ``allowedDomains`` means the seed hosts."""

    allowed_domains: Annotated[
        tuple[_Domain, ...],
        _LIST_FROM_YAML,
        _MaxLength(_MAX_DOMAINS),
        AfterValidator(_unique),
    ] = ()
    """Hosts the crawl may visit. `example.com` allows it and every subdomain (`www.example.com`),
    not `badexample.com`; an IP address allows exactly that address; `host:port` allows only
    that port (a scheme's default port counts). Empty or unset: the hosts of the seeds."""
    max_depth: Annotated[int, _Range(ge=0, le=_MAX_DEPTH)] = 3
    """How many links away from a seed the crawl goes: seeds are depth 0, the pages they link to
    depth 1, and so on. Links found on a page at this depth are not followed."""
    max_pages: Annotated[int, _Range(ge=0, le=_MAX_CAPACITY)] = 0
    """The most URLs the crawl admits, seeds included; each is fetched once (plus retries).
    0 means no limit: the crawl ends when scope runs out."""
    include: _URLPatterns = ()
    """Regular expressions (RE2 syntax, as CEL's matches() uses) searched anywhere in a
    discovered URL: when any is given, a link must match one of them to be followed. Empty:
    every link in scope."""
    exclude: _URLPatterns = ()
    """Regular expressions (RE2 syntax, as CEL's matches() uses) searched anywhere in a
    discovered URL: a link that matches any of them is dropped, even if it matches include."""
    allow_private_networks: bool = False
    """Allow fetching private, loopback and link-local addresses (checked after DNS and after
    every redirect). Off so that a crawl cannot reach services inside your network; cloud
    metadata addresses stay refused even when on."""
    respect_nofollow: bool = True
    """Skip links marked rel="nofollow", and every link of a page whose robots meta tag says
    nofollow or none."""
    max_links_per_page: Annotated[int, _Range(ge=1, le=1_000_000)] = 6000
    """Most links taken from one page, in document order (Heritrix's default): a page of 200,000
    links must not flood the frontier. The rest are counted as dropped (reason link_cap)."""
    max_path_segments: Annotated[int, _Range(ge=0, le=1000)] = 20
    """Longest URL path followed, in segments (/a/b/c has 3): deeper paths are nearly always a
    crawler trap. 0: no limit."""
    max_repeated_segments: Annotated[int, _Range(ge=0, le=100)] = 2
    """Most times one path segment, or a run of them, may appear in a row (/a/a/ is 2): a link
    such as href="a/" on every page makes /a/a/a/... forever. 0: no limit."""
    sitemaps: bool = False
    """Also crawl what the seed hosts' sitemaps list: the Sitemap: lines of each seed host's
    robots.txt and its /sitemap.xml, sitemap indexes and gzip'd sitemaps included, within fixed
    bounds (docs/crawljob.md, Sitemaps). Listed URLs pass scope, robots and dedup like links;
    a listed URL's lastmod is kept on its page record."""


class DedupSpec(_Section):
    """Sizes the Bloom filter; capacity is capped because memory grows with it."""

    capacity: Annotated[int, _Range(ge=1, le=_MAX_CAPACITY)] = 1_000_000
    """How many distinct URLs the Bloom filter (which remembers every URL seen, so each is
    crawled once) is sized for. Past it, more new URLs are wrongly taken for seen and skipped.
    Memory: about 1.2 MB per million at errorRate 0.01. Fixed once the job exists."""
    error_rate: Annotated[float, _Range(ge=_MIN_ERROR_RATE, lt=0.5)] = 0.01
    """The Bloom filter's false-positive rate at capacity: the share of new URLs wrongly taken
    for seen and never crawled. Each halving costs about 0.18 bytes per URL of capacity.
    Fixed once the job exists."""


class ConcurrencySpec(_Section):
    """Politeness and parallelism: per worker, and per host across the whole fleet."""

    per_worker: Annotated[int, _Range(ge=1, le=1024)] = 16
    """Most pages one worker fetches at once. A worker halves its own limit after failures in
    a row and grows it back one by one on success, never above this."""
    per_host: Annotated[int, _Range(ge=1, le=256)] = 2
    """Most requests in flight to one host at once, counted over all workers together: the
    politeness limit a site sees, however large the fleet."""
    host_delay_seconds: Annotated[float, _Range(ge=0, le=3600)] = 1.0
    """Least time, in seconds, between two requests to the same host, fleet-wide. A longer
    robots.txt Crawl-delay wins (when robots.obey is on)."""


class WorkersSpec(_Section):
    """Replica bounds for the autoscaler; ``autoscale: external`` hands scaling to HPA/KEDA."""

    min_replicas: Annotated[int, _Range(ge=0, le=_MAX_REPLICAS)] = 1
    """Fewest worker pods while the job runs: the autoscaler's floor."""
    max_replicas: Annotated[int, _Range(ge=1, le=_MAX_REPLICAS)] = 10
    """Most worker pods the autoscaler starts: the ceiling on cost and on load."""
    target_backlog_per_replica: Annotated[int, _Range(ge=1, le=10_000_000)] = 500
    """URLs of backlog (queued plus in flight) per worker the autoscaler aims for: it runs
    ceil(backlog / targetBacklogPerReplica) workers, kept between minReplicas and
    maxReplicas."""
    scale_down_delay_seconds: _DelaySeconds = 60.0
    """Seconds demand must stay lower before workers are removed; scaling up is immediate.
    Keeps the fleet from shrinking and growing again while a queue drains and refills."""
    image: _Image | None = None
    """Worker container image. Unset: the worker image the operator was installed with. The
    operator runs only images its administrator allows (docs/security.md)."""
    resources: Annotated[dict[str, JsonValue], AfterValidator(_resources)] | None = None
    """Compute resources of each worker container, as in a Pod (requests, limits). Unset: the
    operator's modest defaults."""
    autoscale: Literal["internal", "external"] = "internal"
    """Who sizes the worker fleet. internal: the operator, from the backlog (see
    targetBacklogPerReplica). external: whatever sets replicas through the scale subresource,
    such as kubectl scale, a HorizontalPodAutoscaler or KEDA."""
    replicas: Annotated[int, _Range(ge=0, le=_MAX_REPLICAS)] | None = None
    """Worker pods to run when autoscale is external; kubectl scale, an HPA or KEDA set it
    through the scale subresource. Ignored when autoscale is internal. Unset: minReplicas."""

    cross_field_rules: ClassVar[tuple[Rule[WorkersSpec], ...]] = (
        Rule(
            field="minReplicas",
            message="must not be greater than maxReplicas",
            cel="self.minReplicas <= self.maxReplicas",
            holds=lambda workers: workers.min_replicas <= workers.max_replicas,
            shows=("minReplicas", "maxReplicas"),
        ),
    )


class RetrySpec(_Section):
    """Retries at two layers: within one fetch (requests) and across fetches (tasks)."""

    request_attempts: _Attempts = 3
    """HTTP requests per fetch, the first included. Connect errors, timeouts, 5xx and a 429 or
    503 with a short Retry-After are retried within the same fetch, after a backoff."""
    task_attempts: _Attempts = 5
    """Fetches of one URL before it is given up and moved to the dead-letter set. A fetch that
    failed in a retryable way sends its URL back to the frontier for a later attempt."""
    backoff_base_seconds: Annotated[float, _Range(ge=0, le=3600)] = 1.0
    """Delay before the first retry, in seconds. Retry n waits backoffBaseSeconds ×
    backoffFactor^(n-1), jittered by ±30% and capped at backoffMaxSeconds."""
    backoff_factor: Annotated[float, _Range(ge=1, le=10)] = 1.8
    """How much the retry delay grows from one retry to the next (exponential backoff)."""
    backoff_max_seconds: _DelaySeconds = 30.0
    """Longest delay before one retry, in seconds. Also the longest Retry-After a fetch waits
    for itself; a longer one sends the URL back to the frontier to wait there."""

    cross_field_rules: ClassVar[tuple[Rule[RetrySpec], ...]] = (
        Rule(
            field="backoffMaxSeconds",
            message="must be at least backoffBaseSeconds",
            cel="self.backoffMaxSeconds >= self.backoffBaseSeconds",
            holds=lambda retry: retry.backoff_max_seconds >= retry.backoff_base_seconds,
            shows=("backoffMaxSeconds", "backoffBaseSeconds"),
        ),
    )


class LeaseSpec(_Section):
    """A worker must heartbeat several times before it can be declared dead or lose a lease."""

    ttl_seconds: Annotated[float, _Range(ge=1, le=_DAY_SECONDS)] = 60.0
    """Seconds a worker holds a URL it claimed. A lease not completed in time goes back to the
    queue for another worker: this bounds how long a hung worker delays a page."""
    heartbeat_seconds: Annotated[float, _Range(ge=0.1, le=3600)] = 5.0
    """How often, in seconds, each worker tells Redis it is alive (with its counters)."""
    dead_after_seconds: _Seconds = 20.0
    """Seconds without a heartbeat after which a worker counts as dead: its leases go back to
    the queue at once, without waiting for ttlSeconds, and its pod is replaced."""

    cross_field_rules: ClassVar[tuple[Rule[LeaseSpec], ...]] = (
        Rule(
            field="heartbeatSeconds",
            message="must be less than deadAfterSeconds",
            cel="self.heartbeatSeconds < self.deadAfterSeconds",
            holds=lambda lease: lease.heartbeat_seconds < lease.dead_after_seconds,
            shows=("heartbeatSeconds", "deadAfterSeconds"),
        ),
        Rule(
            field="heartbeatSeconds",
            message="must be less than ttlSeconds",
            cel="self.heartbeatSeconds < self.ttlSeconds",
            holds=lambda lease: lease.heartbeat_seconds < lease.ttl_seconds,
            shows=("heartbeatSeconds", "ttlSeconds"),
        ),
    )


class SecretRef(_Section):
    """A key of a Secret in the job's namespace."""

    name: Annotated[str, _OBJECT_NAME]
    """Name of the Secret, in the CrawlJob's namespace. The operator uses only a Secret labelled
    for CrawlJobs (crawlfleet.io/crawljob-secret=true by default; docs/security.md)."""
    key: Annotated[str, _SECRET_KEY] = "url"
    """Key in the Secret whose value is the Redis URL (password included)."""


class ConfigMapKeyRef(_Section):
    """A key of a ConfigMap in the job's namespace."""

    name: Annotated[str, _OBJECT_NAME]
    """Name of the ConfigMap, in the CrawlJob's namespace."""
    key: Annotated[str, _SECRET_KEY]
    """Key in the ConfigMap: a text entry (data), or a gzip-compressed one (binaryData: what
    kubectl create configmap --from-file makes of a .gz file), for lists past the 1 MiB a
    ConfigMap holds."""


def _seed_file(path: str) -> str:
    if not path:
        raise _problem("must not be empty")
    return path


class SeedsFrom(_Section):
    """A seed list kept outside the CrawlJob: one URL per line, blank lines and lines starting
    with # skipped, as text or gzip-compressed. Read once, when the job starts: a later edit of
    the list changes nothing."""

    config_map_key_ref: ConfigMapKeyRef | None = None
    """The list in a ConfigMap of the job's namespace, for a job in a cluster."""
    file: (
        Annotated[
            str,
            _MaxLength(_MAX_PATH_LENGTH),
            AfterValidator(_seed_file),
            _Cel("self.size() > 0", "must not be empty"),
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


class Persistence(_Section):
    """Whether the managed Redis keeps its data on a PersistentVolumeClaim."""

    enabled: bool = True
    """Keep the managed Redis's data (append-only file, fsynced every second) on a
    PersistentVolumeClaim, so the frontier survives the Redis pod being deleted, evicted or
    rescheduled. Off: the data lives as long as the pod, and a restarted Redis comes back
    empty (the job then fails with FrontierLost unless redis.onLoss is Reseed)."""
    size: Annotated[str, _QUANTITY] = "1Gi"
    """Size of the claim, as a Kubernetes quantity. Room for the append-only file: about twice
    the Redis memory in use (an AOF rewrite writes a new file beside the old)."""
    storage_class_name: Annotated[str, _OBJECT_NAME] | None = None
    """StorageClass of the claim. Unset: the cluster's default StorageClass."""


def _memory_bytes(value: str) -> int:
    """A memory quantity in bytes (the pattern has already refused what is none)."""
    amount = _quantity(value)
    assert amount is not None, "checked by _QUANTITY first"
    return int(amount)


_REDIS_MEMORY_LOW: Final = "64Mi"  # Redis itself wants a few MiB
_REDIS_MEMORY_HIGH: Final = "1Ti"  # past it, no node holds it
_REDIS_MEMORY_RANGE: Final = f"must be between {_REDIS_MEMORY_LOW} and {_REDIS_MEMORY_HIGH}"


def _redis_memory(value: str) -> str:
    """Within the bounds; ``_REDIS_MEMORY_CEL`` says the same with the quantity library."""
    if (
        not _memory_bytes(_REDIS_MEMORY_LOW)
        <= _memory_bytes(value)
        <= _memory_bytes(_REDIS_MEMORY_HIGH)
    ):
        raise _problem(f"{_REDIS_MEMORY_RANGE} (got {_show(value)})")
    return value


_REDIS_MEMORY_CEL: Final = _Cel(
    f"!isQuantity(self) || (quantity(self).compareTo(quantity('{_REDIS_MEMORY_LOW}')) >= 0"
    f" && quantity(self).compareTo(quantity('{_REDIS_MEMORY_HIGH}')) <= 0)",
    _REDIS_MEMORY_RANGE,
)
_RedisMemory = Annotated[str, _QUANTITY, AfterValidator(_redis_memory), _REDIS_MEMORY_CEL]
#: The share of the container's memory limit that Redis may use for data (its maxmemory): the
#: rest is for the allocator's fragmentation, client buffers, Lua and the copy-on-write pages
#: of the child that rewrites the append-only file (docs/operations.md has the arithmetic).
REDIS_MAXMEMORY_SHARE: Final = 0.8


class ManagedRedis(_Section):
    """A Redis the operator runs for one job."""

    image: _Image = "redis:7.4-alpine"
    """Redis container image; any Redis 6 or newer works (the Bloom filter needs no module)."""
    persistence: Persistence = Persistence()
    """Whether the managed Redis keeps its data on a volume."""
    memory_request: _RedisMemory = "256Mi"
    """Memory the Redis container asks the scheduler for, as a Kubernetes quantity."""
    memory_limit: _RedisMemory = "1Gi"
    """The Redis container's memory limit, as a Kubernetes quantity. Redis's maxmemory is set
    to 80% of it (the rest covers fragmentation, client buffers and the append-only file's
    rewrite), with no eviction: near maxmemory the fleet slows down instead of losing URLs.
    About 1.2 MB per million URLs of dedup.capacity, plus the queued URLs."""

    cross_field_rules: ClassVar[tuple[Rule[ManagedRedis], ...]] = (
        Rule(
            field="memoryRequest",
            message="must not be greater than memoryLimit",
            cel="!isQuantity(self.memoryRequest) || !isQuantity(self.memoryLimit)"
            " || quantity(self.memoryRequest).compareTo(quantity(self.memoryLimit)) <= 0",
            holds=lambda managed: (
                _memory_bytes(managed.memory_request) <= _memory_bytes(managed.memory_limit)
            ),
            shows=("memoryRequest", "memoryLimit"),
        ),
    )

    @property
    def max_memory_bytes(self) -> int:
        """Redis's maxmemory: a share of the container's limit, in bytes."""
        return int(_memory_bytes(self.memory_limit) * REDIS_MAXMEMORY_SHARE)


class RedisSpec(_Section):
    """Where the frontier lives: a URL, a Secret holding one, or a Redis the operator runs."""

    url: (
        Annotated[
            str, _MaxLength(_MAX_REDIS_URL_LENGTH), AfterValidator(_redis_url), _REDIS_URL_CEL
        ]
        | None
    ) = Field(default=None, repr=False)
    """URL of an existing Redis (redis://, rediss:// or unix://). It may carry a password, which
    anyone who can read the CrawlJob then sees: prefer secretRef."""
    secret_ref: SecretRef | None = None
    """A Secret holding the URL of an existing Redis, password included."""
    managed: ManagedRedis | None = None
    """A Redis the operator runs for this job alone, with a generated password and a network
    policy that admits only the job's pods. The default when neither url nor secretRef is set."""
    on_loss: Literal["Fail", "Reseed"] = "Fail"
    """What to do when the frontier comes back empty or without this job's data (a Redis
    restarted without its volume, flushed, or replaced). Fail: the job fails with the
    FrontierLost condition, so nothing is crawled twice or skipped without anyone knowing.
    Reseed: the seeds are queued again on the empty frontier, recorded as an Event; pages
    crawled before the loss are crawled again."""

    cross_field_rules: ClassVar[tuple[Rule[RedisSpec], ...]] = (
        Rule(
            field=None,
            message="url, secretRef and managed are alternatives: set at most one",
            cel="[has(self.url), has(self.secretRef), has(self.managed)].filter(x, x).size() <= 1",
            holds=lambda redis: (
                sum(part is not None for part in (redis.url, redis.secret_ref, redis.managed)) <= 1
            ),
        ),
    )

    @model_validator(mode="before")
    @classmethod
    def _default_to_managed(cls, data: object) -> object:
        # A CRD default cannot depend on sibling fields, so "managed unless told otherwise" is here.
        if isinstance(data, Mapping) and all(
            data.get(key) is None for key in ("url", "secretRef", "secret_ref", "managed")
        ):
            return {**data, "managed": {}}
        return data


class CredentialsSecretRef(_Section):
    """A Secret in the job's namespace that holds an access key pair, by the AWS names."""

    name: Annotated[str, _OBJECT_NAME]
    """Name of the Secret, in the CrawlJob's namespace. Its keys AWS_ACCESS_KEY_ID and
    AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN, when present) reach the workers as environment
    variables, never through a ConfigMap or a command line. The operator uses only a Secret
    labelled for CrawlJobs (crawlfleet.io/crawljob-secret=true by default; docs/security.md)."""


class S3Spec(_Section):
    """How to reach an s3:// destination: any S3-compatible store (AWS, MinIO, Ceph, R2, ...)."""

    endpoint: (
        Annotated[str, _MaxLength(_MAX_ENDPOINT_LENGTH), AfterValidator(_endpoint_url)] | None
    ) = None
    """The store's URL, such as https://minio.example:9000 (http:// only where the network
    is trusted). Unset: AWS S3 of the region."""
    region: Annotated[str, _REGION] | None = None
    """The bucket's region (us-east-1, eu-west-3, auto ...). Unset: AWS_REGION or
    AWS_DEFAULT_REGION of the workers' environment, else us-east-1."""
    path_style: bool = True
    """Name the bucket in the path (https://endpoint/bucket/key), as MinIO, versitygw, Ceph and
    most S3-compatible stores expect. false: in the host name (https://bucket.endpoint/key),
    which some providers require."""
    secret_ref: CredentialsSecretRef | None = None
    """The Secret with the access key pair the workers sign with (in a cluster). Unset: the
    workers' own environment (instance roles, web identity); crawlfleet run always uses the
    standard AWS environment variables and files of the user who runs it."""


class OutputSpec(_Section):
    """What the workers write about each page, and where it is kept."""

    format: Literal["jsonl", "warc", "none"] = "jsonl"
    """jsonl: one JSON line per fetched page (URL, status, headers, links found). warc: the same
    lines plus WARC archives of every request and response. none: no files at all."""
    destination: (
        Annotated[
            str,
            _MaxLength(_MAX_DESTINATION_LENGTH),
            AfterValidator(_destination),
            *_DESTINATION_CEL,
        ]
        | None
    ) = None
    """Where the files go: a folder (a path or a file:///path URL) or s3://bucket/prefix/ on
    any S3-compatible store (see s3). The layout is the same everywhere: pages/, items/,
    warc/, dead-letters.jsonl and manifest.json. Unset: ./crawl-output/<name>/ for crawlfleet
    run; in a cluster, the operator's default destination, else a folder on output.volume."""
    s3: S3Spec | None = None
    """Endpoint, region and credentials of an s3:// destination."""
    max_file_bytes: Annotated[int, _Range(ge=1, le=64 * _GIB)] = 256 * _MIB
    """Size in bytes at which a worker starts a new output file (a record is never split)."""
    content: Literal["none", "html", "text"] = "none"
    """What of each HTML page its record holds besides the metadata. none: nothing (the
    records stay small). html: the page's HTML as text, decoded with its charset (from the
    byte order mark, Content-Type, or a <meta> tag). text: its visible text (no scripts,
    styles or markup), whitespace collapsed. A page over maxContentBytes is cut there and its
    record says content_truncated: true."""
    max_content_bytes: Annotated[int, _Range(ge=1024, le=64 * _MIB)] = 2 * _MIB
    """Most bytes (UTF-8) of content kept in one record; the rest is cut at a character
    boundary and the record marked content_truncated."""
    max_file_age_seconds: Annotated[float, _Range(ge=1, le=3600)] = 30.0
    """Longest time, in seconds, a worker keeps an output file open. A page counts as crawled
    only once the file holding its record is durable (uploaded, or written to disk with
    fsync), so this bounds how long finished pages wait; their leases are kept alive
    meanwhile."""
    volume: Annotated[dict[str, JsonValue], AfterValidator(_volume_source)] | None = None
    """A Pod volume source for the workers' files in a cluster, for example
    {persistentVolumeClaim: {claimName: crawl-output}} (ReadWriteMany when there are several
    workers), mounted at /data; a folder destination is then a path inside it. Unset, with no
    s3:// destination: an emptyDir, deleted with each pod (see ephemeral). The operator allows
    only the volume types its administrator chose (by default persistentVolumeClaim, ephemeral
    and emptyDir; never hostPath unless allowed: docs/security.md)."""
    ephemeral: bool = False
    """Accept output that lives only as long as each worker pod (an emptyDir). Without it, a
    cluster job whose output would go nowhere durable does not start (condition
    OutputNotDurable)."""

    cross_field_rules: ClassVar[tuple[Rule[OutputSpec], ...]] = (
        Rule(
            field="s3",
            message="is only for an s3:// destination",
            cel="!has(self.s3) || (has(self.destination) && self.destination.startsWith('s3://'))",
            holds=lambda output: (
                output.s3 is None or (output.destination or "").startswith("s3://")
            ),
        ),
        Rule(
            field="volume",
            message="must not be set with an s3:// destination: the workers write to one of"
            " the two",
            cel="!has(self.volume) || !has(self.destination)"
            " || !self.destination.startsWith('s3://')",
            holds=lambda output: (
                output.volume is None or not (output.destination or "").startswith("s3://")
            ),
        ),
    )


def _css(query: str) -> str:
    try:
        check_selector("css", query)
    except SelectorError as error:
        raise _problem(error.message) from None
    return query


def _xpath(query: str) -> str:
    try:
        check_selector("xpath", query)
    except SelectorError as error:
        raise _problem(error.message) from None
    return query


def _item_field_names(fields: dict[str, ExtractField]) -> dict[str, ExtractField]:
    if not fields:
        raise _problem("must name at least one field")
    if len(fields) > _MAX_EXTRACT_FIELDS:
        raise _problem(f"must hold at most {_MAX_EXTRACT_FIELDS} fields (got {len(fields)})")
    bad = [name for name in fields if not _FIELD_NAME.fullmatch(name)]
    if bad:
        raise _problem(
            "field names must be letters, digits and '_', not starting with a digit, at most 64"
            f" characters (got {_show(bad[0])})"
        )
    return fields


# A field's re: RE2 as the URL patterns are, shorter (there can be 16 x 32 of them, and the
# API server's CEL cost estimate grows with their number times their length).
_ValuePattern = Annotated[str, _MaxLength(_MAX_VALUE_PATTERN_LENGTH), *_RE2_CHECKS]
_CssQuery = Annotated[str, _MaxLength(_MAX_SELECTOR_LENGTH), AfterValidator(_css)]
_XPathQuery = Annotated[str, _MaxLength(_MAX_SELECTOR_LENGTH), AfterValidator(_xpath)]
_ONE_QUERY: Final[Rule[Any]] = Rule(
    field=None,
    message="must set exactly one of css and xpath",
    cel="has(self.css) != has(self.xpath)",
    holds=lambda selector: (selector.css is None) != (selector.xpath is None),
)


class ExtractSelector(_Section):
    """A CSS or an XPath selector (exactly one), run with parsel as in Scrapy."""

    css: _CssQuery | None = None
    """A CSS selector, with Scrapy's ::text and ::attr(name) pseudo-elements, such as
    h1.title::text or a.next::attr(href)."""
    xpath: _XPathQuery | None = None
    """An XPath 1.0 expression, such as //h1/text(); parsel's has-class() and the EXSLT re:
    functions are available. Inside a rule's each, start it with ./ to stay in the node."""

    cross_field_rules: ClassVar[tuple[Rule[Any], ...]] = (_ONE_QUERY,)


class ExtractField(ExtractSelector):
    """How one field of an item is read from the page (or from the rule's each node)."""

    attr: Annotated[str, _MaxLength(_MAX_TEXT_LENGTH)] | None = None
    """Take this attribute of each selected element (href, src, content ...) instead of its
    text. Unset: an element's text, all of its descendants' text joined and whitespace
    collapsed; a selected text or attribute node as it is."""
    all_values: bool = Field(default=False, alias="all")
    """Keep every value found, as a list (empty when none). false: the first value, or null."""
    pattern: _ValuePattern | None = Field(default=None, alias="re")
    """A regular expression (RE2 syntax) searched in each value: the value becomes its first
    group, or the whole match when it has no group; a value it does not match is dropped."""


class ExtractRule(_Section):
    """Items from the pages whose URL matches: one per page, or one per each node."""

    match: _URLPattern
    """A regular expression (RE2 syntax) searched in the page's URL (after redirects): the rule
    applies to the pages it matches."""
    each: ExtractSelector | None = None
    """For a listing: one item per element this selects, its fields read inside that element.
    Unset: one item per matching page."""
    fields: Annotated[
        dict[str, ExtractField],
        AfterValidator(_item_field_names),
        Field(json_schema_extra={"minProperties": 1, "maxProperties": _MAX_EXTRACT_FIELDS}),
    ]
    """The item's fields by name (letters, digits and _), each read by a css or an xpath
    selector."""


class RobotsSpec(_Section):
    """robots.txt handling."""

    obey: bool = True
    """Fetch each host's robots.txt and honour it for userAgent: Disallow rules, and a
    Crawl-delay longer than concurrency.hostDelaySeconds."""
    ttl_seconds: Annotated[float, _Range(ge=1, le=30 * _DAY_SECONDS)] = float(_DAY_SECONDS)
    """Seconds a host's robots.txt answer (its rules, or none at all after a 4xx) is used
    before it is fetched again. One fetch serves every worker of the job."""
    error_ttl_seconds: Annotated[float, _Range(ge=1, le=_DAY_SECONDS)] = 600.0
    """Seconds before robots.txt is asked again after it could not be read (5xx, 429, timeout,
    network error), doubling after each further failure up to an hour (or this, if longer).
    Meanwhile the host waits: its URLs stay queued and keep their attempts, or the last good
    robots.txt is obeyed if there was one (RFC 9309)."""
    give_up_after_seconds: Annotated[float, _Range(ge=1, le=30 * _DAY_SECONDS)] = 3600.0
    """Seconds a host whose robots.txt has never been readable waits before its URLs are given
    up, dead-lettered as robots_unavailable (a real Disallow is robots_disallowed)."""
    max_crawl_delay_seconds: Annotated[float, _Range(ge=0, le=3600)] = 60.0
    """Longest robots.txt Crawl-delay (or Request-rate) honoured, in seconds: a longer one is
    cut to this, so one robots.txt cannot stall a host's crawl for hours."""

    cross_field_rules: ClassVar[tuple[Rule[RobotsSpec], ...]] = (
        Rule(
            field="giveUpAfterSeconds",
            message="must be at least errorTtlSeconds: a host is given up only after robots.txt"
            " was asked again at least once",
            cel="self.giveUpAfterSeconds >= self.errorTtlSeconds",
            holds=lambda robots: robots.give_up_after_seconds >= robots.error_ttl_seconds,
            shows=("giveUpAfterSeconds", "errorTtlSeconds"),
        ),
    )


class FetchSpec(_Section):
    """Per-request limits: the crawler's first line of defence against hostile servers."""

    connect_timeout_seconds: Annotated[float, _Range(gt=0, le=600)] = 5.0
    """Longest wait, in seconds, for one connection (TCP and TLS) to a site."""
    read_timeout_seconds: Annotated[float, _Range(gt=0, le=3600)] = 20.0
    """Longest wait, in seconds, for the next bytes of a response."""
    total_timeout_seconds: Annotated[float, _Range(gt=0, le=3600)] = 60.0
    """Deadline, in seconds, of one fetch: redirects, retries and their waits included."""
    max_body_bytes: _Bytes = 10 * _MIB
    """Largest response body read, in bytes as sent: a larger one is cut off and the fetch
    fails, so one huge file cannot stall a worker."""
    max_redirects: Annotated[int, _Range(ge=0, le=100)] = 5
    """Most redirects followed in one fetch; each hop is checked against scope and the
    private-network guard."""
    max_decompressed_bytes: _Bytes = 50 * _MIB
    """Largest response body after decoding (gzip, deflate, br or zstd), in bytes: a cap that
    defuses compression bombs."""

    cross_field_rules: ClassVar[tuple[Rule[FetchSpec], ...]] = (
        Rule(
            field="totalTimeoutSeconds",
            message="must be at least connectTimeoutSeconds and readTimeoutSeconds: the"
            " deadline of a fetch covers its connection and its reads",
            cel="self.totalTimeoutSeconds >= self.connectTimeoutSeconds"
            " && self.totalTimeoutSeconds >= self.readTimeoutSeconds",
            holds=lambda fetch: (
                fetch.total_timeout_seconds
                >= max(fetch.connect_timeout_seconds, fetch.read_timeout_seconds)
            ),
            shows=("totalTimeoutSeconds", "connectTimeoutSeconds", "readTimeoutSeconds"),
        ),
        Rule(
            field="maxDecompressedBytes",
            message="must be at least maxBodyBytes: a body is never smaller once decoded",
            cel="self.maxDecompressedBytes >= self.maxBodyBytes",
            holds=lambda fetch: fetch.max_decompressed_bytes >= fetch.max_body_bytes,
            shows=("maxDecompressedBytes", "maxBodyBytes"),
        ),
    )


_SCRAPY_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MAX_SCRAPY_ENTRIES: Final = 256
#: Settings the crawlfleet runtime sets itself (crawlfleet/scrapy/): a job cannot point them
#: elsewhere, or requests would be dequeued without a lease (scrapy-redis) or taken for seen
#: before they are queued.
RUNTIME_OWNED_SCRAPY_SETTINGS: Final = frozenset({"SCHEDULER", "DUPEFILTER_CLASS"})


def _scrapy_names(values: dict[str, _EntryT]) -> dict[str, _EntryT]:
    """Setting and argument names: Python identifiers, as settings.py and ``-a`` take them."""
    for name in values:
        if not _SCRAPY_NAME.fullmatch(name):
            raise _problem(
                f"names must be Python identifiers (letters, digits and _) (got {_show(name)})"
            )
    return values


def _scrapy_settings(settings: dict[str, JsonValue]) -> dict[str, JsonValue]:
    owned = sorted(RUNTIME_OWNED_SCRAPY_SETTINGS.intersection(settings))
    if owned:
        raise _problem(
            f"must not set {', '.join(owned)}: crawlfleet's runtime points SCHEDULER and"
            " DUPEFILTER_CLASS at its frontier (leased, deduplicated, acked once the items are"
            " durable)"
        )
    return settings


# --- scrapy-redis settings in a Scrapy job: what replaces each ---------------------------------
# A project moving from scrapy-redis (docs/scrapy.md) often keeps its settings. Each of these
# would be ignored by crawlfleet's scheduler, or would point part of the crawl at a Redis of its
# own beside the frontier; refused with what does the job instead. CEL cannot read the keys of
# a free-form map, so in a cluster the operator refuses them (InvalidSpec), not the API server.

_FRONTIER_REDIS: Final = (
    "the frontier's Redis is spec.redis (url, secretRef or managed), and a password here would"
    " sit in the workers' ConfigMap"
)
_FRONTIER_DEDUP: Final = "the job's Bloom filter (spec.dedup) dedups every request"
_FRONTIER_START_URLS: Final = (
    "start URLs are spec.seeds, spec.seedsFrom or the spider's start requests, and crawlfleet"
    " enqueue adds URLs to a running job"
)
_FRONTIER_DONE: Final = "the frontier says when the job is complete, and every process closes then"
#: scrapy-redis' settings (its defaults.py, connection.py, scheduler, spiders, pipelines and
#: stats) and what takes their place in a crawlfleet job.
_SCRAPY_REDIS_SETTINGS: Final[Mapping[str, str]] = {
    "DUPEFILTER_KEY": _FRONTIER_DEDUP,
    "MAX_IDLE_TIME_BEFORE_CLOSE": _FRONTIER_DONE,
    "REDIS_DB": _FRONTIER_REDIS,
    "REDIS_DECODE_RESPONSES": _FRONTIER_REDIS,
    "REDIS_ENCODING": _FRONTIER_REDIS,
    "REDIS_HOST": _FRONTIER_REDIS,
    "REDIS_ITEMS_KEY": "items go to the job's destination (spec.output)",
    "REDIS_ITEMS_SERIALIZER": "items go to the job's destination (spec.output)",
    "REDIS_PARAMS": _FRONTIER_REDIS,
    "REDIS_PORT": _FRONTIER_REDIS,
    "REDIS_START_URLS_AS_SET": _FRONTIER_START_URLS,
    "REDIS_START_URLS_AS_ZSET": _FRONTIER_START_URLS,
    "REDIS_START_URLS_KEY": _FRONTIER_START_URLS,
    "REDIS_URL": _FRONTIER_REDIS,
    "SCHEDULER_DUPEFILTER_CLASS": _FRONTIER_DEDUP,
    "SCHEDULER_DUPEFILTER_KEY": _FRONTIER_DEDUP,
    "SCHEDULER_FLUSH_ON_START": "a new job starts with an empty frontier of its own",
    "SCHEDULER_IDLE_BEFORE_CLOSE": _FRONTIER_DONE,
    "SCHEDULER_PERSIST": "the frontier always persists, for as long as the job exists",
    "SCHEDULER_QUEUE_CLASS": "the frontier's per-host queues hold the requests",
    "SCHEDULER_QUEUE_KEY": "the frontier's per-host queues hold the requests",
    "SCHEDULER_SERIALIZER": "the frontier stores each request itself",
    "STATS_KEY": "the frontier keeps the job's counters (its status)",
}
_SCRAPY_REDIS_MODULE: Final = "scrapy_redis."


def _named_classes(value: JsonValue) -> Iterator[str]:
    """The dotted paths a setting names: its string value, or its keys (ITEM_PIPELINES)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        yield from value
    elif isinstance(value, list):
        yield from (entry for entry in value if isinstance(entry, str))


def _without_scrapy_redis(settings: dict[str, JsonValue]) -> dict[str, JsonValue]:
    """Every scrapy-redis setting or class in ``settings``, each with what replaces it."""
    found: list[tuple[_Where, str]] = []
    for name, value in settings.items():
        if name in _SCRAPY_REDIS_SETTINGS:
            found.append(((name,), f"must not be set: {_SCRAPY_REDIS_SETTINGS[name]}"))
            continue
        named = [path for path in _named_classes(value) if path.startswith(_SCRAPY_REDIS_MODULE)]
        if named:
            found.append(
                (
                    (name,),
                    f"must not name scrapy-redis (got {_show(named[0])}): its classes use a"
                    " Redis of their own beside the frontier, which schedules, dedups and counts"
                    " the job (items go to spec.output)",
                )
            )
    if found:
        raise _problems(found)
    return settings


_ScrapyEntries = Field(json_schema_extra={"maxProperties": _MAX_SCRAPY_ENTRIES})


class ScrapySpec(_Section):
    """A spider of a Scrapy project, run by crawlfleet's runtime over the job's frontier."""

    spider: Annotated[str, _SPIDER_NAME]
    """The name of a spider of the project (as scrapy crawl NAME takes it; scrapy list shows
    them)."""
    settings_module: Annotated[str, _PYTHON_MODULE] | None = None
    """The project's settings module, such as shop.settings. Unset: found as scrapy crawl finds
    it, from SCRAPY_SETTINGS_MODULE, else the scrapy.cfg of the working directory."""
    settings: Annotated[
        dict[str, JsonValue],
        AfterValidator(_scrapy_names),
        AfterValidator(_scrapy_settings),
        AfterValidator(_without_scrapy_redis),
        _ScrapyEntries,
    ] = {}
    """Scrapy settings over the project's (as scrapy crawl -s gives them), by name, each a JSON
    value, such as DOWNLOAD_TIMEOUT: 20. SCHEDULER and DUPEFILTER_CLASS are the runtime's."""
    args: Annotated[dict[str, str], AfterValidator(_scrapy_names), _ScrapyEntries] = {}
    """Arguments of the spider (as scrapy crawl -a name=value gives them), strings by name."""


class CrawlerSpec(_Section):
    """Which crawler the workers run. Unset: crawlfleet's own."""

    scrapy: ScrapySpec | None = None
    """Run a spider of a Scrapy project instead of crawlfleet's crawler: its callbacks, items
    and pipelines, with the frontier as its scheduler (docs/scrapy.md). Needs crawlfleet[scrapy]
    and the project installed in the worker image."""


class CrawlJobSpec(_Section):
    """What the user asks for; every default of a crawl lives here."""

    # Not Field(min_length=1): pydantic would count only the valid seeds and add a bogus
    # "must not be empty" beside the real per-seed problem.
    seeds: Annotated[
        tuple[_Seed, ...],
        _LIST_FROM_YAML,
        Field(json_schema_extra={"minItems": 1}),
        _MaxLength(_MAX_SEEDS),
        AfterValidator(_non_empty),
    ] = ()
    """The URLs the crawl starts from: absolute http or https URLs. Their hosts (and those of
    seedsFrom) are the default scope.allowedDomains. Give seeds, seedsFrom or both."""
    seeds_from: SeedsFrom | None = None
    """More seeds, from a list kept outside the CrawlJob (a ConfigMap key, or a file for
    crawlfleet run): for lists past the 10,000 a CrawlJob holds."""
    scope: ScopeSpec = ScopeSpec()
    """Which discovered links the crawl follows: domains, depth, page budget, URL patterns."""
    dedup: DedupSpec = DedupSpec()
    """The Bloom filter that makes every URL crawled once. Sized at creation and fixed after."""
    concurrency: ConcurrencySpec = ConcurrencySpec()
    """How many fetches run at once, per worker and per host, and how often a host is asked."""
    workers: WorkersSpec = WorkersSpec()
    """The worker pods: how many, sized by whom, with which image and resources."""
    retry: RetrySpec = RetrySpec()
    """How failed fetches are retried: within one fetch, and across fetches of a URL."""
    lease: LeaseSpec = LeaseSpec()
    """How a URL claimed by a worker comes back if that worker hangs or dies."""
    redis: RedisSpec = RedisSpec()
    """Where the frontier (queues, leases, Bloom filter, counters) lives. Set at most one of url,
    secretRef and managed; none means managed."""
    output: OutputSpec = OutputSpec()
    """What the workers write about the pages they fetch, and where."""
    robots: RobotsSpec = RobotsSpec()
    """Whether the crawl obeys robots.txt."""
    extract: Annotated[
        tuple[ExtractRule, ...], _LIST_FROM_YAML, _MaxLength(_MAX_EXTRACT_RULES)
    ] = ()
    """Declarative extraction: rules that turn matching pages into items (one JSON line each,
    in items/ beside pages/), evaluated in order; a page may match several. Try them on one
    page with crawlfleet extract --job job.yaml URL."""
    parser: Annotated[str, _PARSER_REFERENCE] | None = None
    """A function of your own, package.module:function, that each HTML page is given to (a
    crawlfleet.parsing.Page: url, status, headers, text, a parsel selector, depth); it returns
    or yields items (dicts, into items/) and links to follow (strs, through scope, robots and
    dedup). It runs in a process beside the worker: install your package in the worker image
    (FROM the crawlfleet worker image), or in the environment of crawlfleet run."""
    parser_timeout_seconds: Annotated[float, _Range(gt=0, le=600)] = 5.0
    """Longest time, in seconds, the parser may take for one page: past it the page fails as
    parser_error and the parser process is restarted."""
    user_agent: Annotated[
        str, _MaxLength(_MAX_TEXT_LENGTH), AfterValidator(_user_agent), *_USER_AGENT_CEL
    ] = DEFAULT_USER_AGENT
    """The User-Agent header of every request, and the name robots.txt rules are matched
    against. Say who you are and how site owners can reach you."""
    fetch: FetchSpec = FetchSpec()
    """Limits of one fetch: timeouts, body sizes and redirects."""
    crawler: CrawlerSpec | None = None
    """Which crawler the workers run: unset, crawlfleet's own; scrapy, a spider of your
    Scrapy project over the job's frontier."""
    suspend: bool = False
    """Pause the crawl: workers scale to 0 while Redis and the frontier are kept, so setting it
    back to false resumes where the crawl stopped."""
    ttl_seconds_after_finished: Annotated[int, _Range(ge=0, le=365 * _DAY_SECONDS)] | None = None
    """Seconds after the job succeeds or fails before it is deleted, with everything it created.
    Unset: kept until you delete it."""

    cross_field_rules: ClassVar[tuple[Rule[CrawlJobSpec], ...]] = (
        Rule(
            field="seeds",
            message="must not be empty: a job needs seeds, seedsFrom or"
            " a crawler.scrapy spider (its start requests)",
            cel="[has(self.seedsFrom), has(self.seeds) && size(self.seeds) > 0,"
            " has(self.crawler) && has(self.crawler.scrapy)].exists(x, x)",
            holds=lambda spec: (
                bool(spec.seeds) or spec.seeds_from is not None or spec.scrapy is not None
            ),
        ),
        Rule(
            field="scope.maxPages",
            message="must not be greater than dedup.capacity: the Bloom filter is sized for"
            " capacity URLs, and past it new URLs are taken for seen and never crawled",
            cel="self.scope.maxPages == 0 || self.scope.maxPages <= self.dedup.capacity",
            holds=lambda spec: (
                spec.scope.max_pages == 0 or spec.scope.max_pages <= spec.dedup.capacity
            ),
            shows=("scope.maxPages", "dedup.capacity"),
        ),
        Rule(
            field="output.format",
            message="must not be none when extract rules, a parser or output.content ask for"
            " output: their items and content would go nowhere",
            cel="self.output.format != 'none' || (size(self.extract) == 0"
            " && !has(self.parser) && self.output.content == 'none')",
            holds=lambda spec: (
                spec.output.format != "none"
                or (not spec.extract and spec.parser is None and spec.output.content == "none")
            ),
        ),
        Rule(
            field="crawler.scrapy",
            message="must not be set with extract, parser or output.content: the spider's"
            " callbacks extract, and its items go to items/",
            cel="!has(self.crawler) || !has(self.crawler.scrapy) || (size(self.extract) == 0"
            " && !has(self.parser) && self.output.content == 'none')",
            holds=lambda spec: (
                spec.scrapy is None
                or (not spec.extract and spec.parser is None and spec.output.content == "none")
            ),
        ),
        Rule(
            field="output.format",
            message="must not be none with crawler.scrapy: the spider's items would go nowhere",
            cel="!has(self.crawler) || !has(self.crawler.scrapy) || self.output.format != 'none'",
            holds=lambda spec: spec.scrapy is None or spec.output.format != "none",
        ),
    )

    @property
    def scrapy(self) -> ScrapySpec | None:
        """``crawler.scrapy``: the job runs a Scrapy spider; None: crawlfleet's own crawler."""
        return self.crawler.scrapy if self.crawler is not None else None

    @model_validator(mode="after")
    def _default_allowed_domains_to_seed_hosts(self) -> Self:
        # Filled here rather than left to a helper: a consumer that read an empty list as
        # "anything goes" would crawl the whole web. With seedsFrom the list's hosts are part of
        # the default, known only once it is read: with_listed_seeds() fills it then, and
        # scope_unresolved says it is still to do.
        if not self.scope.allowed_domains and self.seeds_from is None:
            scope = self.scope.model_copy(update={"allowed_domains": _seed_hosts(self.seeds)})
            object.__setattr__(self, "scope", scope)  # still inside validation
        return self

    @property
    def scope_unresolved(self) -> bool:
        """True while scope.allowedDomains waits for the hosts of seedsFrom's list."""
        return self.seeds_from is not None and not self.scope.allowed_domains

    def with_listed_seeds(self, listed: Sequence[str]) -> CrawlJobSpec:
        """This spec once its seedsFrom list is read: scope.allowedDomains defaults to the hosts
        of every seed, inline and listed. The list itself stays out of the spec (the workers'
        ConfigMap could not hold it); ``listed`` comes from :func:`parse_seed_list`."""
        if not self.scope_unresolved:
            return self
        hosts = _seed_hosts((*self.seeds, *listed))
        if len(hosts) > _MAX_DOMAINS:
            raise ConfigError(
                f"spec.scope.allowedDomains: must be set when the seeds span more than"
                f" {_MAX_DOMAINS} hosts (got {len(hosts)} in seeds and seedsFrom): the default,"
                " every seed host, would not fit the workers' ConfigMap"
            )
        scope = self.scope.model_copy(update={"allowed_domains": hosts})
        return self.model_copy(update={"scope": scope})

    @model_validator(mode="after")
    def _fits_the_workers_config_map(self) -> Self:
        # The operator hands the whole spec to the workers in a ConfigMap, which Kubernetes caps
        # at 1 MiB, while the API server stores a CrawlJob of up to ~1.5 MB: a job in between
        # would be admitted and then fail on every reconcile. Measured as JSON (the YAML the
        # ConfigMap holds is at most ~15 % larger: a list item's "- " and indent against '",').
        lists = (self.seeds, self.scope.include, self.scope.exclude, self.scope.allowed_domains)
        listed = sum(len(item) for values in lists for item in values)
        if listed + _extract_characters(self.extract) < _MAX_SPEC_JSON_BYTES // 2:
            return self  # far below: spare the serialisation
        size = len(json.dumps(self.model_dump(mode="json", by_alias=True, exclude_none=True)))
        if size > _MAX_SPEC_JSON_BYTES:
            raise _problem(
                f"must be at most {_MAX_SPEC_JSON_BYTES} bytes as JSON to fit in the ConfigMap the"
                " workers read it from (Kubernetes caps one at 1 MiB): use fewer or shorter"
                f" seeds (got {size})"
            )
        return self

    @classmethod
    def from_mapping(cls, spec: Mapping[str, object]) -> CrawlJobSpec:
        """Validate a camelCase spec (as kopf or a ConfigMap hands it over); paths start at spec."""
        return _validate(cls, spec, prefix=("spec",), what="CrawlJob spec")

    def to_mapping(self) -> dict[str, JsonValue]:
        """The camelCase spec with every default filled, for workers (ConfigMap/JSON)."""
        mapping = self.model_dump(mode="json", by_alias=True, exclude_none=True)
        if not self.seeds:  # all from seedsFrom: an empty list would read as a mistake
            del mapping["seeds"]
        return mapping


def _seed_hosts(seeds: Iterable[str]) -> tuple[str, ...]:
    hosts = dict.fromkeys(urlsplit(seed).hostname for seed in seeds)  # in order, each once
    return _unique(tuple(normalize_host(host) for host in hosts if host))


def _extract_characters(rules: Sequence[ExtractRule]) -> int:
    """The characters of the extraction rules' strings: most of what they add to the JSON."""
    total = 0
    for rule in rules:
        total += len(rule.match) + sum(len(name) for name in rule.fields)
        selectors: list[ExtractSelector | ExtractField] = [*rule.fields.values()]
        if rule.each is not None:
            selectors.append(rule.each)
        for selector in selectors:
            total += len(selector.css or selector.xpath or "")
            if isinstance(selector, ExtractField):
                total += len(selector.attr or "") + len(selector.pattern or "")
    return total


class ObjectMeta(_Model):
    """The metadata crawlfleet reads; the API server's own fields pass, typos do not."""

    model_config = ConfigDict(extra="allow", strict=False)

    name: Annotated[str, _OBJECT_NAME]
    """The job's name, unique in its namespace."""
    namespace: Annotated[str, _NAMESPACE] = "default"
    """The job's namespace."""
    generation: int | None = None
    """Bumped by the API server on every spec change."""

    @model_validator(mode="after")
    def _refuse_unknown_fields(self) -> Self:
        unknown = [key for key in self.model_extra or {} if key not in _OBJECT_META_FIELDS]
        if unknown:
            raise _problems([((key,), _unknown_field(key, _OBJECT_META_FIELDS)) for key in unknown])
        return self


class _Observed(BaseModel):
    """Status models: written by the operator, so tolerant of fields from other versions."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        frozen=True,
        use_attribute_docstrings=True,
    )


class Condition(_Observed):
    """One metav1.Condition."""

    type: str
    """What the condition is about: Ready, Progressing, Complete, Failed, Suspended,
    InvalidSpec, OutputNotDurable, OutputBlocked, FrontierLost, FrontierMemoryPressure or
    BloomNearlyFull. At most one condition of each type."""
    status: Literal["True", "False", "Unknown"] = "Unknown"
    """Whether the condition holds: True, False or Unknown."""
    reason: str = ""
    """Why the condition last changed, as one CamelCase word that tools can match on."""
    message: str = ""
    """Why the condition last changed, in words for people."""
    last_transition_time: datetime | None = None
    """When status last changed."""
    observed_generation: int | None = None
    """The metadata.generation of the spec the condition was set from."""


class FleetStatus(_Observed):
    """What the fleet brain remembers between ticks, kept here so that an operator restart (or
    a standby taking over) resumes the same decisions instead of starting its clocks again."""

    replicas: int = 0
    """Worker pods the brain last decided on."""
    low_demand_since: datetime | None = None
    """Since when the backlog has asked for fewer workers than run: the scale-down delay runs
    from here."""
    idle_since: datetime | None = None
    """Since when nothing has been queued, delayed or in flight: the completion grace runs from
    here."""
    bloom_nearly_full: bool = False
    """The BloomNearlyFull warning was given (it is given once)."""
    pressure_base_rate: str | None = None
    """Pages a second when memory backpressure began (claims are slowed to shares of it), as
    a decimal string; unset while there is no pressure."""
    workers_failing: str | None = None
    """The error of workers that keep dying at start (``Reason: message``) that the
    WorkersFailing (or OutputUnavailable) Event was given for; unset while none is failing."""
    seeds_hash: str | None = None
    """A digest of the seed list the frontier was last seeded with: a different one on a
    running job queues the seeds again, once (the SeedsAdded Event says how many were new)."""


class CrawlJobStatus(_Observed):
    """What the operator observed; counters default to 0 so printer columns never show blanks."""

    phase: Phase = "Pending"
    """Where the job is in its life: Pending (setting up), Running, Suspended, Succeeded
    (nothing left to crawl) or Failed."""
    conditions: tuple[Condition, ...] = ()
    """The latest observations of the job's state, one per type, in the standard Kubernetes
    shape (kubectl wait --for=condition=Complete works)."""
    observed_generation: int | None = None
    """The metadata.generation this status describes; less than metadata.generation means the
    operator has not acted on the latest spec change yet."""
    replicas: int = 0
    """Worker pods that exist (the scale subresource's current replicas)."""
    ready_replicas: int = 0
    """Worker pods that are ready."""
    desired_replicas: int = 0
    """Worker pods wanted right now: the autoscaler's decision, or workers.replicas when
    autoscale is external."""
    selector: str | None = None
    """Label selector of the job's worker pods, as a string: what an HPA or KEDA read through
    the scale subresource."""
    queued: int = 0
    """URLs waiting to be fetched, retries waiting out their backoff included."""
    in_flight: int = 0
    """URLs leased to workers and being fetched right now."""
    seen: int = 0
    """Distinct URLs admitted to the crawl so far (seeds included)."""
    crawled: int = 0
    """URLs fetched and done."""
    failed: int = 0
    """URLs given up on: out of task attempts, or failed for good (they are in the dead-letter
    set)."""
    pages_per_second: float = 0.0
    """Recent crawl rate, in pages per second."""
    start_time: datetime | None = None
    """When the crawl started."""
    completion_time: datetime | None = None
    """When the crawl succeeded or failed."""
    last_scale_time: datetime | None = None
    """When the number of workers last changed."""
    message: str | None = None
    """The latest news about the job, in words for people."""
    fleet: FleetStatus | None = None
    """The fleet brain's memory (scale-down window, completion grace), for the operator."""
    frontier_epoch: str | None = None
    """The epoch the job's frontier was created with. A Redis that answers with another epoch,
    or with none, has lost the frontier (condition FrontierLost)."""
    bloom_fill_ratio: float = 0.0
    """Distinct URLs seen as a share of dedup.capacity; past 0.8 the BloomNearlyFull condition
    is set (the filter grows past 1.0, at a tighter error rate per layer)."""
    bloom_false_positive_rate: float = 0.0
    """The Bloom filter's estimated false-positive rate now: the share of new URLs wrongly taken
    for seen."""
    bloom_layers: int = 0
    """Layers of the Bloom filter: 1 until the URLs seen pass a layer's capacity."""
    frontier_memory_used_bytes: int = 0
    """Memory the job's Redis uses, in bytes (used_memory)."""
    frontier_memory_max_bytes: int = 0
    """The Redis's maxmemory, in bytes; 0: no limit set."""
    frontier_pressure: Literal["None", "High", "Critical"] = "None"
    """Memory backpressure on the frontier: High past 80% of maxmemory (fewer claims, a budget
    of new links per page), Critical past 95% (no new links admitted); None again below 70%."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def workers(self) -> str:
        """Ready/desired worker replicas, for kubectl get."""
        return f"{self.ready_replicas}/{self.desired_replicas}"

    def to_mapping(self) -> dict[str, JsonValue]:
        """The camelCase status, ready for a status patch."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class CrawlJob(_Model):
    """The whole resource, as ``kubectl apply`` and ``crawlfleet run`` both read it."""

    api_version: Literal["crawlfleet.io/v1alpha1"]
    """The API version: crawlfleet.io/v1alpha1."""
    kind: Literal["CrawlJob"]
    """The kind: CrawlJob."""
    metadata: ObjectMeta
    """Standard object metadata: name, namespace, labels, annotations."""
    spec: CrawlJobSpec
    """What to crawl and how: seeds, scope, deduplication, politeness, workers, retries, and
    where the frontier and the output live. Only seeds is required."""
    status: CrawlJobStatus | None = None
    """What the operator observed: phase, conditions, workers and crawl progress. Written by
    the operator only."""

    @property
    def job_id(self) -> str:
        """``namespace.name``: unique per cluster (namespaces hold no dots), the Redis hash tag."""
        return f"{self.metadata.namespace}.{self.metadata.name}"


# --- loading and error translation ------------------------------------------------------------


def parse_crawljob(doc: Mapping[str, object]) -> CrawlJob:
    """Validate a whole CrawlJob document (apiVersion, kind, metadata, spec, status)."""
    return _validate(CrawlJob, doc, prefix=(), what="CrawlJob")


# A file is read whole; the API server stores at most ~1.5 MB per object, so a CrawlJob file
# many times that is a mistake (or /dev/zero), not a job.
_MAX_FILE_BYTES: Final = 8 * _MIB
# Past these a document is refused before validation: aliases can make a small YAML file a huge
# tree (each alias is walked again), and deep nesting exhausts the recursion of YAML's composer.
_MAX_DOCUMENT_NODES: Final = 1_000_000
_MAX_DOCUMENT_DEPTH: Final = 64


def load_crawljob(path: str | Path) -> CrawlJob:
    """Read one CrawlJob from a YAML file; every problem is a ConfigError naming the file.

    A ``seedsFrom.file`` list is read too (relative to the file), and checked: the job comes
    back with its scope resolved (:meth:`CrawlJobSpec.with_listed_seeds`), the list itself is
    :func:`read_seed_file`'s to give whoever seeds.

    Whatever the file holds (not YAML, not UTF-8, nested thousands deep, numbers of thousands of
    digits, a directory, a FIFO), the answer is a ConfigError with a sentence, never another
    exception: ``crawlfleet validate`` prints it and exits 2.
    """
    path = Path(path)
    try:
        mode = path.stat().st_mode  # before opening: opening a FIFO would wait for a writer
        if stat.S_ISDIR(mode):
            raise ConfigError(f"{path}: is a directory, not a CrawlJob file")
        if not stat.S_ISREG(mode):
            raise ConfigError(f"{path}: is not a regular file")
        with path.open("rb") as file:
            data = file.read(_MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read CrawlJob file: {exc.strerror or exc}") from exc
    if len(data) > _MAX_FILE_BYTES:
        raise ConfigError(
            f"{path}: is larger than {_MAX_FILE_BYTES // _MIB} MiB; the API server stores at most"
            " about 1.5 MB for one CrawlJob"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: is not UTF-8 text") from exc
    try:
        documents = [doc for doc in yaml.load_all(text, Loader=_YamlLoader) if doc is not None]
    except RecursionError:
        raise ConfigError(
            f"{path}: not valid YAML: nested more than {_MAX_DOCUMENT_DEPTH} levels deep"
        ) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise ConfigError(f"{where}: not valid YAML: {exc.problem or exc}") from exc
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow, such as U+FFFE
        raise ConfigError(
            f"{path}: not valid YAML: character {exc.character!r} at offset {exc.position}"
            " is not allowed in YAML"
        ) from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {' '.join(str(exc).split())}") from exc
    if len(documents) != 1:
        count = "no" if not documents else str(len(documents))
        raise ConfigError(
            f"{path}: holds {count} YAML documents; a CrawlJob file holds exactly one"
        )
    job = _validate(CrawlJob, documents[0], prefix=(), what=f"CrawlJob in {path}")
    if job.spec.seeds_from is not None and job.spec.seeds_from.file is not None:
        # Read here, beside the file that names it: validate checks every listed URL, and the
        # scope's default (every seed host) is whole before anyone crawls.
        spec = job.spec.with_listed_seeds(read_seed_file(job.spec, path))
        job = job.model_copy(update={"spec": spec})
    return job


def parse_seed_list(data: bytes, where: str) -> tuple[str, ...]:
    """The seeds of a seedsFrom list, each refused or kept as an entry of spec.seeds is.

    ``data`` is the list as stored (gzip-compressed when it starts with gzip's magic bytes);
    ``where`` names it in every problem ("spec.seedsFrom.file (seeds.txt)"), which gives the
    line. The first ten bad lines are reported together; repeats are dropped.
    """
    if data[:2] == _GZIP_MAGIC:
        data = _gunzip(data, where)
    if len(data) > _MAX_SEED_LIST_BYTES:
        raise ConfigError(f"{where}: is larger than {_MAX_SEED_LIST_BYTES // _MIB} MiB")
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
        plain = decompressor.decompress(data, _MAX_SEED_LIST_BYTES + 1)
    except zlib.error as error:
        raise ConfigError(f"{where}: starts as gzip but does not decompress ({error})") from None
    if len(plain) > _MAX_SEED_LIST_BYTES or decompressor.unconsumed_tail:
        raise ConfigError(
            f"{where}: is larger than {_MAX_SEED_LIST_BYTES // _MIB} MiB once decompressed"
        )
    return plain


def read_seed_file(spec: CrawlJobSpec, job_file: str | Path) -> tuple[str, ...]:
    """The seeds of ``spec.seedsFrom.file`` (relative to ``job_file``'s folder); () without one.

    A ConfigMap is the operator's to read: outside a cluster it is a ConfigError that says so.
    """
    source = spec.seeds_from
    if source is None:
        return ()
    if source.file is None:
        raise ConfigError(
            "spec.seedsFrom.configMapKeyRef: a ConfigMap is read by the operator in a cluster;"
            " to run this job here, give the list as seedsFrom.file"
        )
    path = Path(job_file).parent / source.file
    where = f"spec.seedsFrom.file ({path})"
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            raise ConfigError(f"{where}: is not a regular file")
        with path.open("rb") as file:
            data = file.read(_MAX_SEED_LIST_BYTES + 1)
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise ConfigError(
            f"{where}: cannot read it: {getattr(exc, 'strerror', None) or exc}"
        ) from exc
    return parse_seed_list(data, where)


class _YamlLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys: PyYAML keeps the last one silently, the API
    server refuses the document, and a silently dropped ``scope:`` would widen a crawl."""


def _construct_int(loader: _YamlLoader, node: yaml.ScalarNode) -> int:
    try:
        return int(yaml.constructor.SafeConstructor.construct_yaml_int(loader, node))
    except ValueError:  # past Python's 4300-digit limit on int("...")
        raise yaml.constructor.ConstructorError(
            None, None, "an integer of thousands of digits", node.start_mark
        ) from None


def _construct_str(loader: _YamlLoader, node: yaml.ScalarNode) -> str:
    text = loader.construct_scalar(node)
    assert isinstance(text, str)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # "\ud800" in a double-quoted string: not a character
        raise yaml.constructor.ConstructorError(
            None, None, "a lone surrogate escape, which is no character", node.start_mark
        ) from None
    return text


def _construct_mapping(loader: _YamlLoader, node: yaml.MappingNode) -> dict[object, object]:
    seen: set[object] = set()
    for key_node, _ in node.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
            key = loader.construct_scalar(key_node)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
    return loader.construct_mapping(node, deep=True)


_YamlLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_YamlLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)
_YamlLoader.add_constructor("tag:yaml.org,2002:str", _construct_str)

_ModelT = TypeVar("_ModelT", bound=BaseModel)


def _validate(model: type[_ModelT], doc: object, *, prefix: tuple[str, ...], what: str) -> _ModelT:
    if not isinstance(doc, Mapping):
        raise ConfigError(f"invalid {what}: expected a mapping, got {type(doc).__name__}")
    _check_size(doc, what)
    try:
        # by_name=False: YAML must use the camelCase names the CRD knows.
        return model.model_validate(doc, by_alias=True, by_name=False)
    except ValidationError as exc:
        # The message carries every problem; chaining pydantic's report would repeat it with
        # links to pydantic's docs, which mean nothing to someone editing a CrawlJob.
        raise _config_error(exc, model, prefix, what) from None


def _check_size(doc: object, what: str) -> None:
    """Refuse a document too deep or too large to validate, before pydantic walks it.

    YAML aliases share one object between places, and a validator walks every place again: ten
    levels of ten aliases are ten billion nodes. The walk stops at the first bound it passes.
    """
    budget = _MAX_DOCUMENT_NODES
    stack: list[tuple[object, int]] = [(doc, 0)]
    while stack:
        node, depth = stack.pop()
        budget -= 1
        if budget < 0:
            raise ConfigError(
                f"invalid {what}: more than {_MAX_DOCUMENT_NODES} values once its YAML aliases"
                " are expanded"
            )
        if depth > _MAX_DOCUMENT_DEPTH:
            raise ConfigError(f"invalid {what}: nested more than {_MAX_DOCUMENT_DEPTH} levels deep")
        if isinstance(node, Mapping):
            stack.extend((value, depth + 1) for value in node.values())
        elif isinstance(node, list | tuple):
            stack.extend((value, depth + 1) for value in node)


_JSON_VALUE_TAGS: Final = frozenset({"list", "dict", "str", "bool", "int", "float"})
_TYPE_MESSAGES: Final = {
    "missing": "is required",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "finite_number": "must be a finite number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be a string",
    "list_type": "must be a list",
    "tuple_type": "must be a list",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
}


def _config_error(
    exc: ValidationError, model: type[BaseModel], prefix: tuple[str, ...], what: str
) -> ConfigError:
    lines: list[str] = []
    for error in exc.errors(include_url=False):
        # A free-form Kubernetes structure (resources, volume) is a JsonValue, whose errors
        # carry the union member tried ("dict", "float"): no part of the user's path.
        loc = tuple(part for part in error["loc"] if part not in _JSON_VALUE_TAGS)
        if error["type"] == "invalid_key":  # the location ends with the key itself
            lines.append(f"{_path(prefix + loc[:-1])}: has a key that is not a string")
        elif error["type"] == "crawljob_problems":
            found: list[tuple[_Where, str]] = error.get("ctx", {})["found"]
            lines += [
                f"{_path(prefix + loc + _parts(where))}: {message}" for where, message in found
            ]
        else:
            lines.append(f"{_path(prefix + loc)}: {_describe(error, model, loc)}")
    count = f"{len(lines)} problem" + ("" if len(lines) == 1 else "s")
    return ConfigError("\n  ".join([f"invalid {what} ({count}):", *lines]))


def _describe(error: ErrorDetails, model: type[BaseModel], loc: tuple[int | str, ...]) -> str:
    kind, ctx = error["type"], error.get("ctx", {})
    if kind == "crawljob":
        return error["msg"]
    if kind == "extra_forbidden":
        return _unknown_field(str(loc[-1]), _field_names(model, loc[:-1]))
    if kind == "literal_error":
        expected = str(ctx.get("expected", ""))
        one_of = "one of " if " or " in expected else ""
        return f"must be {one_of}{expected} (got {_show(error['input'])})"
    if kind in _TYPE_MESSAGES:
        got = "" if kind == "missing" else f" (got {_show(error['input'])})"
        return _TYPE_MESSAGES[kind] + got
    message = error["msg"]
    return message[:1].lower() + message[1:]


def _unknown_field(key: str, known: frozenset[str] | list[str]) -> str:
    by_lower = {name.lower().replace("_", ""): name for name in known}
    close = by_lower.get(key.lower().replace("_", "")) or next(
        iter(difflib.get_close_matches(key, sorted(known), n=1)), None
    )
    if close:
        return f"unknown field; did you mean {close}?"
    return f"unknown field (known: {', '.join(sorted(known))})" if known else "unknown field"


def _field_names(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """The camelCase field names of the model found at ``loc``, for "did you mean" hints."""
    current: type[BaseModel] | None = model
    for part in loc:
        if isinstance(part, int):
            continue
        if current is None:
            return []
        info = next(
            (f for name, f in current.model_fields.items() if part in (name, f.alias)), None
        )
        current = _model_in(info.annotation) if info else None
    if current is None:
        return []
    return [info.alias or name for name, info in current.model_fields.items()]


def _model_in(annotation: object) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _parts(where: _Where) -> tuple[str, ...]:
    if where is None:
        return ()
    return tuple(where.split(".")) if isinstance(where, str) else where


_PLAIN_KEY: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def _path(loc: tuple[int | str, ...]) -> str:
    """``spec.seeds[0]``; a key that is no plain name is quoted: ``limits["nvidia.com/gpu"]``;
    a name of ``extract[].fields`` in brackets, as the API server writes a map's keys
    (``spec.extract[0].fields[price].re``)."""
    path = ""
    for index, part in enumerate(loc):
        field_name = index >= 3 and loc[index - 1] == "fields" and loc[index - 3] == "extract"
        if isinstance(part, int) or field_name:
            path += f"[{part}]"
        elif not _PLAIN_KEY.fullmatch(part):
            path += f"[{json.dumps(part, ensure_ascii=False)}]"
        else:
            path += f".{part}" if path else part
    return path
