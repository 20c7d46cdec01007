"""Conditional GET (RFC 9110 §13.1): ask a server for a page only if it changed since the copy
we hold, and read back what lets us ask next time.

A revisited URL's last 200 left an ``ETag`` and/or a ``Last-Modified``; the next request sends
them back as ``If-None-Match`` and ``If-Modified-Since``, **both** when both exist, as Heritrix
and StormCrawler do: a server that honours only one of them still answers 304, and RFC 9110
§13.2.2 makes a server that honours both give ``If-None-Match`` precedence. A 304 then costs a
head and no body (``fetch.Fetcher`` treats it as a success without one, see there).

Validators are sent as the server gave them: a weak ``W/"…"`` tag is fine in ``If-None-Match``
(weak comparison applies there), and a date is echoed verbatim rather than reformatted, since
servers commonly compare the string. A value with a control character cannot be a header and
is not sent (the server is then asked unconditionally, which costs a body, never a wrong 304).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

__all__ = ["MAX_VALIDATOR_CHARACTERS", "Conditional"]

#: Longer ``ETag`` / ``Last-Modified`` values are not kept (and so never sent back): a real
#: entity tag is a hash or a version (tens of characters), a date is 29; anything far longer is
#: a server putting data where a validator goes, and would cost every tracked URL its memory.
MAX_VALIDATOR_CHARACTERS: Final = 200


@dataclass(frozen=True, slots=True)
class Conditional:
    """The validators of a stored copy: what makes a request conditional."""

    etag: str | None = None
    last_modified: str | None = None

    @classmethod
    def from_response(cls, headers: Mapping[str, str]) -> Conditional:
        """The validators a response offers (``headers`` keyed by lower-cased names, as a
        ``FetchResult`` keeps them); one that could not be sent back is dropped."""
        return cls(_usable(headers.get("etag")), _usable(headers.get("last-modified")))

    def __bool__(self) -> bool:
        return self.etag is not None or self.last_modified is not None

    def request_headers(self) -> dict[str, str]:
        """The conditional request headers: one per validator held, none without any."""
        headers: dict[str, str] = {}
        if self.etag is not None:
            headers["If-None-Match"] = self.etag
        if self.last_modified is not None:
            headers["If-Modified-Since"] = self.last_modified
        return headers

    def updated_by(self, headers: Mapping[str, str]) -> Conditional:
        """Ours, with the validators a 304 sent replacing the ones they update (RFC 9111
        §4.3.4: a 304 carries the current validators, which may differ from the ones asked)."""
        fresh = Conditional.from_response(headers)
        return Conditional(fresh.etag or self.etag, fresh.last_modified or self.last_modified)


def _usable(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    if not value or len(value) > MAX_VALIDATOR_CHARACTERS:
        return None
    if any(ord(character) < 0x20 or ord(character) == 0x7F for character in value):
        return None
    return value
