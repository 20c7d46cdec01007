"""Failure classes and what each one means for a URL's fate (DESIGN §4, layers 1 and 2).

Every way a fetch can go wrong ends as one ``FailureClass``; the class alone decides whether the
URL is tried again and how long it waits, through one table (``fate``). Keeping that decision
in a table rather than in ``if`` chains at call sites means the request-retry loop, the task
state machine and the dead-letter set all agree, and the values are stable strings fit for
metrics labels and for the frontier's "last failure class" field.

Retry policy in short: "the server said no" (404, 410, other 4xx), "we said no" (scope, robots,
forbidden address, bad scheme) and "the response is hostile" (too large, decompression bomb,
oversized headers, redirect loops) are permanent; timeouts, connection and DNS errors, 5xx and
protocol errors are retried; 403, 429, soft blocks and an unreadable robots.txt are retried with
a longer backoff, because they mean the site is pushing back and hammering it again soon only
prolongs the block.

Files (DESIGN §11, ``crawlfleet.crawler.files``) add their own classes: a file over its rule's
``maxBytes`` or past the job's byte budget is permanent (the same bytes would be refused
again); a body that ends shorter or longer than it said is retried; an empty or tiny 200 and an
error page where the file should be are soft blocks, the second retried more slowly still,
since a site that serves HTML for a video usually means it (a login wall, a geo block). A 416
to a range request is no failure at all: the download restarts from zero.
"""

from __future__ import annotations

import datetime
import email.utils
import math
import random
from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "DEFAULT_MIN_HTML_BYTES",
    "JITTER_FRACTION",
    "MISMATCH_BACKOFF_MULTIPLIER",
    "PUSHBACK_BACKOFF_MULTIPLIER",
    "FailureClass",
    "Fate",
    "backoff_seconds",
    "classify_response",
    "fate",
    "parse_retry_after",
]

#: A 2xx HTML body shorter than this is treated as a soft block (an empty or stub page).
DEFAULT_MIN_HTML_BYTES = 64
#: Backoff delays are spread uniformly over ±30 % so that workers do not retry in lockstep.
JITTER_FRACTION = 0.3
#: Backoff multiplier for classes that mean "the site is pushing back" (403, 429, soft block).
PUSHBACK_BACKOFF_MULTIPLIER = 4.0
#: Backoff multiplier for an error page served where a file should be: longer than a soft
#: block's, because such a page rarely goes away within minutes.
MISMATCH_BACKOFF_MULTIPLIER = 2 * PUSHBACK_BACKOFF_MULTIPLIER

_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})


class FailureClass(StrEnum):
    """Why a fetch failed. The value is the stable name used in metrics, logs and Redis."""

    HTTP_403 = "http_403"
    HTTP_404 = "http_404"
    HTTP_410 = "http_410"
    HTTP_429 = "http_429"
    HTTP_4XX = "http_4xx"
    HTTP_5XX = "http_5xx"
    TIMEOUT = "timeout"
    CONNECT_ERROR = "connect_error"
    DNS_ERROR = "dns_error"
    PROTOCOL_ERROR = "protocol_error"
    FORBIDDEN_ADDRESS = "forbidden_address"
    BAD_SCHEME = "bad_scheme"
    INVALID_URL = "invalid_url"
    OUT_OF_SCOPE = "out_of_scope"
    ROBOTS_DISALLOWED = "robots_disallowed"
    #: Queued before the job's scope (include/exclude) changed while it ran, out of it now:
    #: dropped when claimed, before any request (a counted reason, in the dead letters).
    EXCLUDED_LIVE = "excluded_live"
    ROBOTS_UNAVAILABLE = "robots_unavailable"
    TOO_MANY_REDIRECTS = "too_many_redirects"
    REDIRECT_LOOP = "redirect_loop"
    BODY_TOO_LARGE = "body_too_large"
    DECOMPRESSION_BOMB = "decompression_bomb"
    HEADERS_TOO_LARGE = "headers_too_large"
    SOFT_BLOCK = "soft_block"
    PARSER_ERROR = "parser_error"
    #: A sitemap over its size bound after decompression, or not a readable sitemap
    #: (``crawler/links/sitemaps.py``): the site would send the same document again.
    SITEMAP_TOO_LARGE = "sitemap_too_large"
    SITEMAP_INVALID = "sitemap_invalid"
    #: The same for an RSS or Atom feed (``crawler/links/feeds.py``).
    FEED_TOO_LARGE = "feed_too_large"
    FEED_INVALID = "feed_invalid"
    #: The request's proxy (``spec.proxy``) failed it: refused the connection, refused our
    #: credentials (407), or every proxy is out of service. Not the site's doing: retried.
    PROXY_ERROR = "proxy_error"
    #: A file download (``crawler/files/download.py``): over its rule's ``maxBytes``, by
    #: ``Content-Length`` before any byte is read or while streaming.
    FILE_TOO_LARGE = "file_too_large"
    #: A file's 200 below its minimum size (an empty or tiny body): a soft block.
    FILE_TOO_SMALL = "file_too_small"
    #: A file's body shorter or longer than its ``Content-Length`` or ``Content-Range`` total.
    FILE_SIZE_MISMATCH = "file_size_mismatch"
    #: A file's magic bytes disagree with its declared type (say, an HTML page for a .mp4).
    FILE_TYPE_MISMATCH = "file_type_mismatch"
    #: Storing the file would exceed the job's ``files.maxTotalBytes``.
    FILE_BUDGET = "file_budget"


@dataclass(frozen=True, slots=True)
class Fate:
    """What happens to a URL after a failure of some class.

    ``retryable`` False sends the URL to the dead-letter set at once; otherwise it is retried
    after ``backoff_seconds(..., multiplier=backoff_multiplier, ...)``.
    """

    retryable: bool
    backoff_multiplier: float = 1.0


_PERMANENT = Fate(retryable=False)
_RETRY = Fate(retryable=True)
_RETRY_SLOWLY = Fate(retryable=True, backoff_multiplier=PUSHBACK_BACKOFF_MULTIPLIER)
_RETRY_SLOWER = Fate(retryable=True, backoff_multiplier=MISMATCH_BACKOFF_MULTIPLIER)

_FATES: dict[FailureClass, Fate] = {
    FailureClass.HTTP_403: _RETRY_SLOWLY,  # often a rate-limit or bot wall, not a real "forbidden"
    FailureClass.HTTP_404: _PERMANENT,
    FailureClass.HTTP_410: _PERMANENT,
    FailureClass.HTTP_429: _RETRY_SLOWLY,
    FailureClass.HTTP_4XX: _PERMANENT,
    FailureClass.HTTP_5XX: _RETRY,
    FailureClass.TIMEOUT: _RETRY,
    FailureClass.CONNECT_ERROR: _RETRY,
    FailureClass.DNS_ERROR: _RETRY,  # resolvers fail transiently; attempts bound the cost
    FailureClass.PROXY_ERROR: _RETRY,  # the next attempt may take another proxy
    FailureClass.PROTOCOL_ERROR: _RETRY,  # e.g. the server closed the connection mid-response
    FailureClass.FORBIDDEN_ADDRESS: _PERMANENT,
    FailureClass.BAD_SCHEME: _PERMANENT,
    FailureClass.INVALID_URL: _PERMANENT,
    FailureClass.OUT_OF_SCOPE: _PERMANENT,
    FailureClass.ROBOTS_DISALLOWED: _PERMANENT,
    FailureClass.EXCLUDED_LIVE: _PERMANENT,
    # robots.txt of the host (or of a redirect's target) cannot be read: the site pushes back.
    # A host's own URLs wait without a failure (see crawler/politeness/robots.py) until it is given
    # up, and then go to the dead letters at once.
    FailureClass.ROBOTS_UNAVAILABLE: _RETRY_SLOWLY,
    FailureClass.TOO_MANY_REDIRECTS: _PERMANENT,
    FailureClass.REDIRECT_LOOP: _PERMANENT,
    FailureClass.BODY_TOO_LARGE: _PERMANENT,
    FailureClass.DECOMPRESSION_BOMB: _PERMANENT,
    FailureClass.HEADERS_TOO_LARGE: _PERMANENT,  # past fetching/transport.py's header limits
    FailureClass.SOFT_BLOCK: _RETRY_SLOWLY,
    # extraction failed on the page as fetched: fetching it again would fail the same way
    FailureClass.PARSER_ERROR: _PERMANENT,
    FailureClass.SITEMAP_TOO_LARGE: _PERMANENT,
    FailureClass.SITEMAP_INVALID: _PERMANENT,
    FailureClass.FEED_TOO_LARGE: _PERMANENT,
    FailureClass.FEED_INVALID: _PERMANENT,
    FailureClass.FILE_TOO_LARGE: _PERMANENT,  # the rule's bound: the same bytes come again
    FailureClass.FILE_TOO_SMALL: _RETRY_SLOWLY,  # an empty 200: a soft block
    FailureClass.FILE_SIZE_MISMATCH: _RETRY,  # a cut or padded body: the next try resumes
    FailureClass.FILE_TYPE_MISMATCH: _RETRY_SLOWER,  # an error page for the file
    FailureClass.FILE_BUDGET: _PERMANENT,  # the job's budget does not grow back
}


def fate(failure_class: FailureClass | str) -> Fate:
    """The fate of a URL that failed with ``failure_class`` (a member or its string value).

    Raises ``ValueError`` for an unknown class name, so a typo never silently becomes a
    default fate.
    """
    return _FATES[FailureClass(failure_class)]


_CLIENT_ERRORS: dict[int, FailureClass] = {
    403: FailureClass.HTTP_403,
    404: FailureClass.HTTP_404,
    408: FailureClass.TIMEOUT,
    410: FailureClass.HTTP_410,
    429: FailureClass.HTTP_429,
}


def classify_response(
    status: int,
    content_type: str | None,
    body_length: int,
    *,
    min_html_bytes: int = DEFAULT_MIN_HTML_BYTES,
) -> FailureClass | None:
    """Classify a complete HTTP response; None means success (or a redirect to follow).

    3xx is left to the redirect handler. A 2xx HTML body under ``min_html_bytes`` is a soft
    block (bot walls and overloaded sites answer "200" with an empty page); a missing
    ``Content-Type`` counts as HTML, as browsers sniff such bodies as HTML. 204 and 205 carry no
    body by definition and are plain successes. 408 Request Timeout is a timeout (retryable),
    not a permanent client error. Anything outside 200..599 is a protocol error.
    """
    if 200 <= status < 300:
        if status in (204, 205):
            return None
        if body_length < min_html_bytes and _is_html(content_type):
            return FailureClass.SOFT_BLOCK
        return None
    if 300 <= status < 400:
        return None
    if 400 <= status < 500:
        return _CLIENT_ERRORS.get(status, FailureClass.HTTP_4XX)
    if 500 <= status < 600:
        return FailureClass.HTTP_5XX
    return FailureClass.PROTOCOL_ERROR


def _is_html(content_type: str | None) -> bool:
    if content_type is None:
        return True
    media_type = content_type.partition(";")[0].strip().lower()
    return not media_type or media_type in _HTML_TYPES


def backoff_seconds(
    attempt: int,
    base: float,
    factor: float,
    maximum: float,
    multiplier: float,
    rng: random.Random,
) -> float:
    """Delay before retry number ``attempt`` (1 = the first retry), jittered by ±30 %.

    The centre is ``min(maximum, base * factor ** (attempt - 1) * multiplier)``; the jittered
    value is capped at ``maximum`` again, so ``maximum`` is a true upper bound (at the cap the
    spread is [0.7 × maximum, maximum]). Jitter keeps workers that failed together from
    retrying together. ``rng`` is passed in so tests and simulations are reproducible.
    """
    if maximum <= 0 or base <= 0 or multiplier <= 0:
        return 0.0
    exponent = max(attempt, 1) - 1
    try:
        centre = base * factor**exponent * multiplier
    except OverflowError:  # attempt in the thousands: far past any cap
        centre = maximum
    if math.isnan(centre):
        centre = maximum
    centre = min(maximum, centre)
    jitter = rng.uniform(1.0 - JITTER_FRACTION, 1.0 + JITTER_FRACTION)
    return max(0.0, min(maximum, centre * jitter))


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` header, or None when absent or unparsable.

    Accepts delta-seconds (``"120"``; a decimal such as ``"1.5"`` is tolerated) and an
    HTTP-date (``"Wed, 21 Oct 2015 07:28:00 GMT"``), the latter measured from ``now``
    (seconds since the epoch). Dates in the past and negative numbers give 0. The caller
    caps the result (e.g. at ``backoffMaxSeconds`` or the lease TTL): a server may ask for days.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    if text[0].isdigit() or text[0] in "+-.":
        try:
            seconds = float(text)
        except ValueError:
            return None
        if math.isnan(seconds) or math.isinf(seconds):
            return None
        return max(0.0, seconds)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000" and zone-less dates: HTTP dates are always UTC
        when = when.replace(tzinfo=datetime.UTC)
    try:
        return max(0.0, when.timestamp() - now)
    except (OverflowError, ValueError, OSError):
        return None
