"""Unit tests for crawlfleet.crawler.files.resume: what a resumed request asks, and what each
answer allows (append, take whole, or restart with a counted reason)."""

from __future__ import annotations

import pytest

from crawlfleet.crawler.files.parts import PartState
from crawlfleet.crawler.files.resume import (
    RESTART_REASONS,
    Append,
    ContentRange,
    Restart,
    Whole,
    adopt,
    declared_total,
    if_range,
    judge,
    parse_content_range,
    request_headers,
)

URL = "https://cdn.example/video.mp4"
ETAG = '"v1"'
DATE = "Wed, 21 Oct 2015 07:28:00 GMT"


def held(offset: int = 1000, **fields: object) -> PartState:
    state = PartState(url=URL, offset=offset, total=5000, etag=ETAG, last_modified=DATE)
    for name, value in fields.items():
        setattr(state, name, value)
    return state


# -- parse_content_range ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("bytes 0-499/1234", ContentRange(0, 499, 1234)),
        ("bytes 500-1233/1234", ContentRange(500, 1233, 1234)),
        ("bytes 500-999/*", ContentRange(500, 999, None)),
        ("BYTES 1-1/2", ContentRange(1, 1, 2)),
        ("  bytes 7-8/9  ", ContentRange(7, 8, 9)),
        ("bytes */1234", None),  # the unsatisfied form (a 416's)
        ("bytes 500-499/1234", None),  # backwards
        ("bytes 0-1234/1234", None),  # past its own total
        ("bytes 0-/1234", None),
        ("bytes=0-499/1234", None),
        ("items 0-4/5", None),
        ("bytes 0-499/1234, bytes 600-700/1234", None),
        ("", None),
        (None, None),
        ("bytes ٠-٤/٥", None),  # Arabic-Indic digits are no digits here
    ],
)
def test_parse_content_range(value: str | None, expected: ContentRange | None) -> None:
    assert parse_content_range(value) == expected


# -- what a request asks ------------------------------------------------------------------


def test_an_empty_part_asks_for_everything() -> None:
    assert request_headers(PartState(url=URL)) == {}
    assert request_headers(held(), offset=0) == {}


def test_a_part_with_bytes_asks_for_the_rest_of_the_same_version() -> None:
    assert request_headers(held(1000)) == {"Range": "bytes=1000-", "If-Range": ETAG}


def test_a_retry_within_an_attempt_asks_from_what_it_holds() -> None:
    assert request_headers(held(1000), offset=1500)["Range"] == "bytes=1500-"


def test_if_range_prefers_a_strong_etag_then_last_modified() -> None:
    assert if_range(held()) == ETAG
    assert if_range(held(etag='W/"weak"')) == DATE  # a weak ETag may not go in If-Range
    assert if_range(held(etag=None)) == DATE
    assert if_range(held(etag='W/"weak"', last_modified=None)) is None
    assert if_range(held(etag=None, last_modified=None)) is None


def test_a_part_without_a_validator_cannot_ask_a_range() -> None:
    with pytest.raises(ValueError, match="restart"):
        request_headers(held(etag=None, last_modified=None))


# -- what an answer allows ------------------------------------------------------------------


def test_a_matching_206_appends() -> None:
    headers = {"content-range": "bytes 1000-4999/5000", "etag": ETAG}
    assert judge(held(1000), 206, headers) == Append()


def test_a_206_without_validators_in_it_still_appends() -> None:
    assert judge(held(1000), 206, {"content-range": "bytes 1000-4999/5000"}) == Append()


def test_a_206_of_unknown_total_appends() -> None:
    assert judge(held(1000, total=None), 206, {"content-range": "bytes 1000-1999/*"}) == Append()
    assert judge(held(1000), 206, {"content-range": "bytes 1000-1999/*"}) == Append()


@pytest.mark.parametrize(
    "content_range",
    [
        "bytes 0-4999/5000",  # from the start: would splice
        "bytes 999-4999/5000",  # one byte early
        "bytes 1001-4999/5000",  # one byte late: a gap
        "bytes 1000-5999/6000",  # another total: another file
        "garbage",
        None,  # a 206 without Content-Range (multipart/byteranges, say)
    ],
)
def test_a_mismatched_206_restarts(content_range: str | None) -> None:
    headers = {} if content_range is None else {"content-range": content_range}
    assert judge(held(1000), 206, headers) == Restart("range_mismatch")


def test_a_200_to_a_range_request_is_taken_whole() -> None:
    assert judge(held(1000), 200, {"content-length": "5000", "etag": ETAG}) == Whole("no_range")


def test_a_416_restarts() -> None:
    assert judge(held(1000), 416, {"content-range": "bytes */900"}) == Restart("unsatisfiable")


def test_a_changed_etag_restarts_and_a_200_of_it_is_taken_whole() -> None:
    headers = {"etag": '"v2"', "content-range": "bytes 1000-4999/5000"}
    assert judge(held(1000), 206, headers) == Restart("validator_changed")
    assert judge(held(1000), 200, {"etag": '"v2"'}) == Whole("validator_changed")


def test_a_weak_and_a_strong_etag_of_one_version_are_the_same() -> None:
    headers = {"etag": f"W/{ETAG}", "content-range": "bytes 1000-4999/5000"}
    assert judge(held(1000), 206, headers) == Append()


def test_a_changed_last_modified_restarts_when_there_is_no_etag() -> None:
    state = held(1000, etag=None)
    headers = {"last-modified": "Thu, 22 Oct 2015 07:28:00 GMT"}
    assert judge(state, 206, {**headers, "content-range": "bytes 1000-4999/5000"}) == Restart(
        "validator_changed"
    )
    # With an ETag the ETag decides: a touched file of the same bytes is the same version.
    headers = {**headers, "etag": ETAG, "content-range": "bytes 1000-4999/5000"}
    assert judge(held(1000), 206, headers) == Append()


def test_judge_compares_with_the_offset_it_is_given() -> None:
    headers = {"content-range": "bytes 1500-4999/5000"}
    assert judge(held(1000), 206, headers, 1500) == Append()
    assert judge(held(1000), 206, headers) == Restart("range_mismatch")


def test_from_zero_any_2xx_is_whole_and_a_206_must_start_at_zero() -> None:
    empty = PartState(url=URL)
    assert judge(empty, 200, {}) == Whole()
    assert judge(empty, 203, {}) == Whole()
    assert judge(empty, 206, {"content-range": "bytes 0-99/100"}) == Append()
    assert judge(empty, 206, {"content-range": "bytes 10-99/100"}) == Restart("range_mismatch")


def test_every_reason_is_a_metric_label() -> None:
    assert set(RESTART_REASONS) == {
        "no_range",
        "validator_changed",
        "range_mismatch",
        "unsatisfiable",
        "no_validator",
    }


# -- what the part records ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "headers", "expected"),
    [
        (200, {"content-length": "5000"}, 5000),
        (200, {"content-length": " 5000 "}, 5000),
        (200, {"content-length": "-1"}, None),
        (200, {}, None),  # chunked
        (206, {"content-range": "bytes 0-99/5000", "content-length": "100"}, 5000),
        (206, {"content-range": "bytes 0-99/*", "content-length": "100"}, None),
    ],
)
def test_declared_total(status: int, headers: dict[str, str], expected: int | None) -> None:
    assert declared_total(status, headers) == expected


def test_a_new_response_replaces_what_the_part_knew() -> None:
    state = held(0, content_type="video/mp4")
    headers = {"content-length": "7", "etag": '"v9"', "content-type": "application/pdf"}
    adopt(state, 200, headers, continuing=False)
    assert (state.total, state.etag, state.last_modified, state.content_type) == (
        7,
        '"v9"',
        None,
        "application/pdf",
    )


def test_a_continuing_206_only_fills_in_what_the_part_did_not_know() -> None:
    state = held(1000, total=None, content_type=None, last_modified=None)
    headers = {
        "content-range": "bytes 1000-4999/5000",
        "etag": '"other spelling"',
        "last-modified": DATE,
        "content-type": "video/mp4",
    }
    adopt(state, 206, headers, continuing=True)
    assert (state.total, state.etag, state.last_modified, state.content_type) == (
        5000,
        ETAG,
        DATE,
        "video/mp4",
    )
