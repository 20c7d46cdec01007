"""What a visit of a tracked URL found (crawlfleet/crawler/worker/revisits.py): pure decisions."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import pytest

from crawlfleet.crawler.worker.revisits import (
    SHORT_DIGEST_CHARACTERS,
    Visit,
    body_digest,
    judge,
    payload_digest,
    rule_of,
)
from crawlfleet.crawljob.recrawl import KIND_DEFAULTS, RecrawlRule
from crawlfleet.frontier import RevisitState, Validators, canonicalize

URL = canonicalize("https://news.example/front")
BODY = b"<html><body>front page</body></html>"
DIGEST = body_digest(BODY)
DATE = "Thu, 01 Jan 2026 00:00:00 GMT"
RULE = RecrawlRule(match="/front", interval=600, min_interval=60, max_interval=86400)
FETCHED_AT = 1_800_000_100.75


def state(**validators: Any) -> RevisitState:
    return RevisitState(
        url=URL,
        interval_seconds=1000.0,
        validators=Validators(**validators),
        due_at=1_800_000_000.0,
        visits=3,
    )


def visit(
    held: RevisitState | None,
    status: int | None,
    *,
    succeeded: bool = True,
    body: bytes = BODY,
    headers: dict[str, str] | None = None,
    whole_digest: bool = True,
) -> Visit | None:
    return judge(
        state=held,
        status=status,
        succeeded=succeeded,
        body=body,
        headers=headers or {},
        url=URL,
        fetched_at=FETCHED_AT,
        whole_digest=whole_digest,
    )


def test_a_first_visit_is_new_and_keeps_what_the_response_offers() -> None:
    found = visit(None, 200, headers={"etag": '"a"', "last-modified": DATE})
    assert found is not None
    assert found.change == "new"
    assert found.validators == Validators('"a"', DATE, DIGEST, captured_at=1_800_000_100)
    assert (found.lag_seconds, found.warc, found.entry_only) == (None, None, False)
    revisit = found.revisit(RULE, fetched_at=None)
    assert revisit is not None
    assert (revisit.interval_seconds, revisit.change, revisit.lag_seconds) == (600.0, "new", None)


def test_a_304_is_not_modified_keeps_digest_and_capture_and_takes_fresh_validators() -> None:
    held = state(etag='"a"', last_modified=DATE, digest=DIGEST, captured_at=1_700_000_000)
    found = visit(held, 304, body=b"", headers={"etag": '"b"'})
    assert found is not None
    assert (found.change, found.entry_only) == ("not_modified", True)
    assert found.validators == Validators('"b"', DATE, DIGEST, captured_at=1_700_000_000)
    assert found.lag_seconds == pytest.approx(100.75)
    assert found.warc is not None
    assert found.warc.profile == "server-not-modified"
    assert (found.warc.refers_to_uri, found.warc.refers_to_date) == (URL, 1_700_000_000)
    revisit = found.revisit(RULE, fetched_at=None)
    assert revisit is not None
    assert revisit.interval_seconds == pytest.approx(1400.0)  # grown by Nutch's 1.4


def test_a_job_without_warc_keeps_a_short_digest_and_judges_by_it() -> None:
    first = visit(None, 200, whole_digest=False)
    assert first is not None
    assert first.validators.digest == DIGEST[:SHORT_DIGEST_CHARACTERS]
    again = visit(state(digest=first.validators.digest), 200, whole_digest=False)
    assert again is not None
    assert again.change == "unchanged"
    assert again.warc is not None  # the body is here: its whole digest is the original's
    assert again.warc.payload_digest == payload_digest(DIGEST)
    changed = visit(
        state(digest=first.validators.digest), 200, body=BODY + b" ", whole_digest=False
    )
    assert changed is not None
    assert changed.change == "changed"


@pytest.mark.parametrize(
    ("kept", "offered", "change"),
    [('"a1"', '"a1"', "unchanged"), ('"a1"', '"a2"', "changed"), ('W/"a1"', 'W/"a1"', "changed")],
)
def test_without_a_digest_the_same_strong_etag_is_an_unchanged_body(
    kept: str, offered: str, change: str
) -> None:
    """The frontier keeps no digest beside an ETag; only a strong one promises the same bytes
    (RFC 9110 §8.8.3), which an identical-payload-digest revisit record claims."""
    found = visit(state(etag=kept), 200, headers={"etag": offered})
    assert found is not None
    assert found.change == change


def test_the_same_body_is_unchanged_whatever_the_validators_say() -> None:
    """A server that ignores our validators, or changes its ETag on every response, sends
    the same bytes: unchanged, judged by the digest."""
    held = state(etag='"a"', digest=DIGEST, captured_at=1_700_000_000)
    found = visit(held, 200, headers={"etag": '"changes-every-time"'})
    assert found is not None
    assert (found.change, found.entry_only) == ("unchanged", True)
    assert found.validators.etag == '"changes-every-time"'
    assert found.validators.captured_at == 1_700_000_000  # the capture it refers to
    assert found.warc is not None
    assert found.warc.profile == "identical-payload-digest"


def test_a_different_body_is_changed_and_a_new_capture() -> None:
    found = visit(state(digest=DIGEST, captured_at=1), 200, body=BODY + b"<p>more</p>")
    assert found is not None
    assert (found.change, found.entry_only, found.warc) == ("changed", False, None)
    assert found.validators.digest == body_digest(BODY + b"<p>more</p>")
    assert found.validators.captured_at == 1_800_000_100
    revisit = found.revisit(RULE, fetched_at=None)
    assert revisit is not None
    assert revisit.interval_seconds == pytest.approx(800.0)  # shrunk by Nutch's 0.8


@pytest.mark.parametrize("status", [404, 410])
def test_404_or_410_after_a_200_is_gone(status: int) -> None:
    held = state(digest=DIGEST)
    found = visit(held, status, succeeded=False, body=b"")
    assert found is not None
    assert (found.change, found.entry_only) == ("gone", False)
    # gone needs no rule: the frontier forgets the URL
    revisit = found.revisit(None, fetched_at=None)
    assert revisit is not None
    assert (revisit.change, revisit.validators) == ("gone", held.validators)


@pytest.mark.parametrize(
    ("held", "status"),
    [(None, 404), (None, 503), (None, None), ("tracked", 503), ("tracked", 403), ("tracked", None)],
)
def test_other_failures_judge_nothing(held: str | None, status: int | None) -> None:
    """The frontier keeps the state and reschedules a final failure; a first visit's failure
    is dead-lettered as ever."""
    tracked = state(digest=DIGEST) if held else None
    assert visit(tracked, status, succeeded=False, body=b"") is None


def test_an_unasked_for_304_on_a_first_visit_judges_nothing() -> None:
    assert visit(None, 304, body=b"") is None


def test_without_a_rule_a_url_is_not_rescheduled() -> None:
    found = visit(None, 200)
    assert found is not None
    assert found.revisit(None, fetched_at=None) is None


def test_the_payload_digest_is_warcios_sha1_in_base_32() -> None:
    expected = "sha1:" + base64.b32encode(hashlib.sha1(BODY).digest()).decode()
    assert payload_digest(body_digest(BODY)) == expected
    assert payload_digest(None) is None
    assert payload_digest(DIGEST[:16]) is None  # a shortened digest cannot name the original
    assert payload_digest("z" * 40) is None


@pytest.mark.parametrize("kept", [None, DIGEST[:SHORT_DIGEST_CHARACTERS]])
def test_a_304_whose_original_digest_and_date_were_not_kept_claims_neither(
    kept: str | None,
) -> None:
    found = visit(state(etag='"a"', digest=kept), 304, body=b"")
    assert found is not None
    assert found.change == "not_modified"
    assert found.warc is not None
    assert (found.warc.refers_to_uri, found.warc.refers_to_date) == (URL, None)
    assert found.warc.payload_digest is None


def test_a_tracked_document_a_304_did_not_reveal_is_judged_by_its_kind_rule() -> None:
    """A feed answered 304 was never read; tracked and matched by no URL rule, it is a feed."""
    rules = (RULE,)
    feed = canonicalize("https://news.example/rss.xml")
    assert rule_of(rules, feed, None, tracked=False) is None
    assert rule_of(rules, feed, None, tracked=True) == KIND_DEFAULTS["feed"]
    assert rule_of(rules, feed, "sitemap", tracked=True) == KIND_DEFAULTS["sitemap"]
    assert rule_of(rules, URL, None, tracked=True) == RULE
    assert rule_of((), URL, None, tracked=True) is None
