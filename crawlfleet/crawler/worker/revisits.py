"""What a visit of a tracked URL found, and what the frontier is told about it (DESIGN §10).

Pure decisions, no I/O: the worker hands in the URL's revisit state (None on a first visit),
what the fetch returned, and gets back a :class:`Visit`: the ``change`` for the page record
and the metrics, what a WARC revisit record refers to, and -- once the URL's rule is known
(a feed is only known as one once read) -- the :class:`~crawlfleet.frontier.Revisit` that
reschedules the URL in the same script that settles its lease.

* **new**: a 2xx and no state (the URL's first visit under a rule).
* **not_modified**: a 304 to our conditional request; the validators it carries replace ours
  (RFC 9111 §4.3.4), the digest and capture date are kept.
* **unchanged** / **changed**: a 2xx whose body's digest equals / differs from the stored one.
  The digest is compared on *every* 200 that has one stored, not only for hosts without
  validators: a server that ignores ``If-None-Match`` (or whose weak ETag changes on every
  response) and sends the same bytes is unchanged too. The frontier keeps no digest beside an
  ETag (frontier/revisits.py: the ETag changes whenever the body does); then a 200 carrying
  the very same *strong* ETag is unchanged (RFC 9110 §8.8.3: byte-identical), any other one
  changed.
* **gone**: 404 or 410 with state: the frontier dead-letters the URL and forgets it.
* Anything else (a failure, a redirect chain that failed) judges nothing: the frontier keeps
  the URL's state and reschedules it if the failure is final.

The digest is SHA-1 of the decoded body, as hex: the hash warcio puts in a response record's
``WARC-Payload-Digest`` (base 32 there). A job that writes WARC keeps all 40 digits, so that a
304's revisit record can name the original payload digest exactly from the stored text; any
other keeps the first 16 (64 bits: a chance of 2^-64 that a change goes unseen), which the
frontier packs into 8 bytes of its 100-byte budget per tracked URL. A revisit record whose
original digest or capture date is not known (the frontier did not keep them) is still
written, naming the capture by its URI alone, as httrack#789 does: both replay engines resolve
it so, while a guessed date would send them to a record that does not exist.
"""

from __future__ import annotations

import base64
import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from crawlfleet.crawler.fetching.conditional import Conditional
from crawlfleet.crawljob import Change, DocumentKind, RecrawlRule, next_interval, rule_for
from crawlfleet.frontier import Revisit, RevisitState, Validators

__all__ = [
    "GONE_STATUSES",
    "SHORT_DIGEST_CHARACTERS",
    "RevisitProfile",
    "Visit",
    "WarcRevisitRef",
    "body_digest",
    "judge",
    "payload_digest",
    "rule_of",
]

#: Statuses that say a page is no more (DESIGN §4: permanent), once it had been a 200.
GONE_STATUSES: Final = frozenset({404, 410})
#: Hex digits of the digest a job without WARC keeps (see the module docstring).
SHORT_DIGEST_CHARACTERS: Final = 16
_NOT_MODIFIED: Final = 304
_SHA1_HEX_CHARACTERS: Final = 40

RevisitProfile = Literal["server-not-modified", "identical-payload-digest"]


@dataclass(frozen=True, slots=True)
class WarcRevisitRef:
    """What a WARC ``revisit`` record stands for: its profile and the capture it refers to.

    ``refers_to_date`` None: the capture's date is unknown, and none is claimed (a wrong
    ``WARC-Refers-To-Date`` would send replay tools to a record that does not exist).
    """

    profile: RevisitProfile
    refers_to_uri: str
    refers_to_date: int | None
    #: The original's ``WARC-Payload-Digest`` (``sha1:<base 32>``); None: not known.
    payload_digest: str | None


@dataclass(frozen=True, slots=True)
class Visit:
    """What one visit of a tracked URL found (see the module docstring)."""

    change: Change
    #: What the frontier keeps for the next visit: the validators to send, the body's digest.
    validators: Validators
    #: Fetched minus due (None: a first visit).
    lag_seconds: float | None
    #: The interval the URL was visited at (None: a first visit).
    interval_seconds: float | None
    #: A WARC revisit record instead of a response (not_modified, unchanged); None otherwise.
    warc: WarcRevisitRef | None = None

    @property
    def entry_only(self) -> bool:
        """The page was found as it was (not modified, unchanged): its record is an entry
        without content, items or links (they were taken the first time). New and changed
        pages are written as ever, and a gone one fails as any 404/410 does."""
        return self.change in ("not_modified", "unchanged")

    def revisit(self, rule: RecrawlRule | None, *, fetched_at: float | None) -> Revisit | None:
        """What the lease's ack or fail tells the frontier: the next visit under ``rule``, an
        interval after ``fetched_at`` (not after the ack, which waits for the output), or
        (gone) that the URL is no more; None when no rule tracks the URL (it is forgotten)."""
        if self.change == "gone":
            return Revisit(
                self.interval_seconds or 0.0, self.validators, "gone", self.lag_seconds, fetched_at
            )
        if rule is None:
            return None
        interval = next_interval(rule, self.interval_seconds, self.change)
        return Revisit(interval, self.validators, self.change, self.lag_seconds, fetched_at)


def body_digest(body: bytes, *, whole: bool = True) -> str:
    """The digest kept of a body: SHA-1 as hex, all of it or its first
    :data:`SHORT_DIGEST_CHARACTERS` digits (see the module docstring)."""
    digest = hashlib.sha1(body, usedforsecurity=False).hexdigest()
    return digest if whole else digest[:SHORT_DIGEST_CHARACTERS]


def payload_digest(digest: str | None) -> str | None:
    """A stored digest as a WARC payload digest (``sha1:<base 32>``, warcio's form); None when
    it is not a whole SHA-1 (a frontier that kept less cannot name the original)."""
    if digest is None or len(digest) != _SHA1_HEX_CHARACTERS:
        return None
    try:
        raw = bytes.fromhex(digest)
    except ValueError:
        return None
    return "sha1:" + base64.b32encode(raw).decode("ascii")


def rule_of(
    rules: Sequence[RecrawlRule], url: str, kind: DocumentKind | None, tracked: bool
) -> RecrawlRule | None:
    """The URL's rule. A tracked URL answered by a 304 was never read, so a feed does not say
    it is one; a tracked URL no URL rule matches was tracked by a kind rule, and the kind a
    lease cannot tell before reading (a sitemap's it can: its parent says so) is a feed."""
    rule = rule_for(rules, url, kind)
    if rule is None and tracked and kind is None:
        rule = rule_for(rules, url, "feed")
    return rule


def judge(
    *,
    state: RevisitState | None,
    status: int | None,
    succeeded: bool,
    body: bytes,
    headers: Mapping[str, str],
    url: str,
    fetched_at: float,
    whole_digest: bool,
) -> Visit | None:
    """What the visit found; None when the fetch judges nothing (a failure that is not a
    404/410 after a 200, or any failure on a first visit).

    ``succeeded``: the fetch's failure is None (a 2xx, or a 304 to a conditional request);
    ``url`` is the archived one (the fetch's final URL); ``fetched_at`` the response's time;
    ``whole_digest``: keep the whole SHA-1 (a job that writes WARC).
    """
    lag = None if state is None else max(0.0, fetched_at - state.due_at)
    current = None if state is None else state.interval_seconds
    kept = state.validators if state is not None else Validators()
    if succeeded and status == _NOT_MODIFIED and state is not None:
        fresh = Conditional(kept.etag, kept.last_modified).updated_by(headers)
        validators = Validators(
            fresh.etag, fresh.last_modified, kept.digest, captured_at=kept.captured_at
        )
        warc = WarcRevisitRef(
            "server-not-modified", url, kept.captured_at, payload_digest(kept.digest)
        )
        return Visit("not_modified", validators, lag, current, warc)
    if succeeded and status is not None and 200 <= status < 300:
        sha1 = body_digest(body)
        digest = sha1 if whole_digest else sha1[:SHORT_DIGEST_CHARACTERS]
        offered = Conditional.from_response(headers)
        if state is not None and _same_body(kept, offered, sha1):
            validators = Validators(
                offered.etag, offered.last_modified, digest, captured_at=kept.captured_at
            )
            warc = WarcRevisitRef(
                "identical-payload-digest", url, kept.captured_at, payload_digest(sha1)
            )
            return Visit("unchanged", validators, lag, current, warc)
        validators = Validators(
            offered.etag, offered.last_modified, digest, captured_at=math.floor(fetched_at)
        )
        return Visit("new" if state is None else "changed", validators, lag, current)
    if state is not None and status in GONE_STATUSES:
        return Visit("gone", kept, lag, current)
    return None


def _same_body(kept: Validators, offered: Conditional, sha1: str) -> bool:
    """The stored digest (whole or short) is the body's; without one, the same strong ETag."""
    if kept.digest is not None:
        return len(kept.digest) >= SHORT_DIGEST_CHARACTERS and sha1.startswith(kept.digest)
    return kept.etag is not None and not kept.etag.startswith("W/") and offered.etag == kept.etag
