"""``spec.fetch`` and ``spec.userAgent``: what one request may cost, and whom it names.

The limits are the crawler's first line of defence against hostile servers (timeouts, body sizes
before and after decoding, redirects); the User-Agent goes into every request header and is the
name robots.txt rules are matched against.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Final

from pydantic import AfterValidator

from crawlfleet.crawljob.base import Cel, MaxLength, Range, Rule, Section
from crawlfleet.crawljob.fields import GIB, MAX_TEXT_LENGTH, MIB
from crawlfleet.crawljob.validation import problem

__all__ = ["DEFAULT_USER_AGENT", "FetchSpec", "UserAgent"]

DEFAULT_USER_AGENT: Final = "crawlfleet/0.1 (+https://github.com/crawlfleet/crawlfleet)"

_Bytes = Annotated[int, Range(ge=1, le=GIB)]

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
        raise problem(_HEADER_VALUE)
    token = value.split("/", 1)[0].strip()
    if not token or any(char.isspace() for char in token):
        raise problem(_PRODUCT_TOKEN)
    return value


# The same rules for the API server; a tab is a control character, so [^/\s] is enough.
_USER_AGENT_CEL: Final = (
    Cel(r"self.matches(r'^[\x20-\x7e]*[\x21-\x7e][\x20-\x7e]*$')", _HEADER_VALUE),
    Cel(r"self.matches(r'^ *[^/\s]+ *(/|$)')", _PRODUCT_TOKEN),
)

UserAgent = Annotated[
    str, MaxLength(MAX_TEXT_LENGTH), AfterValidator(_user_agent), *_USER_AGENT_CEL
]


class FetchSpec(Section):
    """Per-request limits: the crawler's first line of defence against hostile servers."""

    connect_timeout_seconds: Annotated[float, Range(gt=0, le=600)] = 5.0
    """Longest wait, in seconds, for one connection (TCP and TLS) to a site."""
    read_timeout_seconds: Annotated[float, Range(gt=0, le=3600)] = 20.0
    """Longest wait, in seconds, for the next bytes of a response."""
    total_timeout_seconds: Annotated[float, Range(gt=0, le=3600)] = 60.0
    """Deadline, in seconds, of one fetch: redirects, retries and their waits included."""
    max_body_bytes: _Bytes = 10 * MIB
    """Largest response body read, in bytes as sent: a larger one is cut off and the fetch
    fails, so one huge file cannot stall a worker."""
    max_redirects: Annotated[int, Range(ge=0, le=100)] = 5
    """Most redirects followed in one fetch; each hop is checked against scope and the
    private-network guard."""
    max_decompressed_bytes: _Bytes = 50 * MIB
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
