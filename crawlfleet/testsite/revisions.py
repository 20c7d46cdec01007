"""Normal pages that change, disappear and answer conditional requests: what a revisit meets.

Off unless a test asks: ``SiteConfig.etag_hosts`` and ``SiteConfig.last_modified_hosts`` name
the hosts whose normal pages send an ``ETag`` (a hash of the body) and/or a ``Last-Modified``
(a fixed date plus an hour per revision), and answer 304 to a request whose ``If-None-Match``
or ``If-Modified-Since`` says the client holds the current revision (``If-None-Match`` wins
when both are sent and the host sends ETags, RFC 9110 §13.2.2). Other hosts send neither: a
crawler can only compare bodies there.

:meth:`Revisions.edit` gives a page its next revision (its body changes, and so do its
validators); :meth:`Revisions.remove` makes it answer 404 from then on. The server's hot path
asks :attr:`Revisions.active` first, so a site that uses none of this pays one attribute read.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime, parsedate_to_datetime
from typing import Final

from aiohttp import web

__all__ = ["FIRST_MODIFIED", "Revisions"]

#: The ``Last-Modified`` of every page's first revision; each edit adds an hour.
FIRST_MODIFIED: Final = datetime(2026, 1, 1, tzinfo=UTC)
_HTML_TYPE: Final = "text/html; charset=utf-8"


class Revisions:
    """Which pages were edited or removed, and the conditional answers of the hosts that
    validate. Runs on the site's loop thread (edits arrive through ``TestSite``)."""

    def __init__(self, etag_hosts: tuple[int, ...], last_modified_hosts: tuple[int, ...]) -> None:
        self._etag_hosts = frozenset(etag_hosts)
        self._last_modified_hosts = frozenset(last_modified_hosts)
        self._revision: dict[tuple[int, str], int] = {}
        self._removed: set[tuple[int, str]] = set()

    @property
    def active(self) -> bool:
        """Anything to do for a normal page (validators sent, or a page edited or removed)."""
        return bool(
            self._etag_hosts or self._last_modified_hosts or self._revision or self._removed
        )

    def edit(self, host: int, path: str) -> int:
        """The page's next revision (a changed body); returns its number (the first is 0)."""
        revision = self._revision.get((host, path), 0) + 1
        self._revision[host, path] = revision
        return revision

    def remove(self, host: int, path: str) -> None:
        """The page answers 404 from now on."""
        self._removed.add((host, path))

    def respond(self, host: int, path: str, body: bytes, request: web.BaseRequest) -> web.Response:
        """The answer for a normal page whose first revision is ``body``."""
        if (host, path) in self._removed:
            text = b"<!DOCTYPE html><html><head><title>Gone</title></head><body></body></html>"
            return web.Response(status=404, body=text, headers={"Content-Type": _HTML_TYPE})
        revision = self._revision.get((host, path), 0)
        if revision:
            marker = f"<p>Revision {revision}</p>\n</body>".encode()
            body = body.replace(b"</body>", marker, 1)
        headers = {"Content-Type": _HTML_TYPE}
        etag = last_modified = None
        if host in self._etag_hosts:
            etag = headers["ETag"] = f'"{hashlib.sha1(body).hexdigest()[:16]}"'
        if host in self._last_modified_hosts:
            last_modified = FIRST_MODIFIED + timedelta(hours=revision)
            headers["Last-Modified"] = format_datetime(last_modified, usegmt=True)
        if _not_modified(request, etag, last_modified):
            return web.Response(
                status=304, headers={k: v for k, v in headers.items() if k != "Content-Type"}
            )
        return web.Response(body=body, headers=headers)


def _not_modified(request: web.BaseRequest, etag: str | None, modified: datetime | None) -> bool:
    if_none_match = request.headers.get("If-None-Match")
    if etag is not None and if_none_match is not None:
        tags = {tag.strip().removeprefix("W/") for tag in if_none_match.split(",")}
        return "*" in tags or etag in tags
    since = request.headers.get("If-Modified-Since")
    if modified is None or since is None:
        return False
    try:
        asked = parsedate_to_datetime(since)
    except (TypeError, ValueError):
        return False  # RFC 9110 §13.1.3: an invalid date is ignored
    return asked.tzinfo is not None and modified <= asked
