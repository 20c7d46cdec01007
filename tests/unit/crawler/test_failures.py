"""Unit tests for crawlfleet.crawler.fetching.failures: classification, fates, backoff,
Retry-After."""

from __future__ import annotations

import email.utils
import random

import pytest

from crawlfleet.crawler.fetching.failures import (
    JITTER_FRACTION,
    FailureClass,
    Fate,
    backoff_seconds,
    classify_response,
    fate,
    parse_retry_after,
)

F = FailureClass
HTML = "text/html; charset=utf-8"
BIG = 10_000


@pytest.mark.parametrize(
    ("status", "content_type", "body_length", "expected"),
    [
        (200, HTML, BIG, None),
        (200, "application/xhtml+xml", BIG, None),
        (200, HTML, 0, F.SOFT_BLOCK),
        (200, HTML, 63, F.SOFT_BLOCK),
        (200, HTML, 64, None),
        (200, "TEXT/HTML", 10, F.SOFT_BLOCK),
        (200, None, 0, F.SOFT_BLOCK),
        (200, "", 0, F.SOFT_BLOCK),
        (200, "application/json", 2, None),
        (200, "image/png", 0, None),
        (200, "text/plain", 0, None),
        (201, HTML, BIG, None),
        (203, HTML, 5, F.SOFT_BLOCK),
        (204, None, 0, None),
        (205, HTML, 0, None),
        (206, HTML, BIG, None),
        (301, None, 0, None),
        (302, HTML, 0, None),
        (304, None, 0, None),
        (307, None, 0, None),
        (308, None, 0, None),
        (400, HTML, BIG, F.HTTP_4XX),
        (401, HTML, BIG, F.HTTP_4XX),
        (403, HTML, BIG, F.HTTP_403),
        (404, HTML, BIG, F.HTTP_404),
        (405, HTML, BIG, F.HTTP_4XX),
        (408, HTML, BIG, F.TIMEOUT),
        (410, HTML, BIG, F.HTTP_410),
        (418, HTML, BIG, F.HTTP_4XX),
        (429, HTML, BIG, F.HTTP_429),
        (451, HTML, BIG, F.HTTP_4XX),
        (499, HTML, BIG, F.HTTP_4XX),
        (500, HTML, BIG, F.HTTP_5XX),
        (502, HTML, 0, F.HTTP_5XX),
        (503, HTML, BIG, F.HTTP_5XX),
        (599, HTML, BIG, F.HTTP_5XX),
        (100, None, 0, F.PROTOCOL_ERROR),
        (0, None, 0, F.PROTOCOL_ERROR),
        (600, None, 0, F.PROTOCOL_ERROR),
        (999, HTML, BIG, F.PROTOCOL_ERROR),
    ],
)
def test_classify_response(
    status: int, content_type: str | None, body_length: int, expected: F | None
) -> None:
    assert classify_response(status, content_type, body_length) is expected


def test_min_html_bytes_is_configurable() -> None:
    assert classify_response(200, HTML, 100, min_html_bytes=512) is F.SOFT_BLOCK
    assert classify_response(200, HTML, 0, min_html_bytes=0) is None


PERMANENT = {
    F.HTTP_404,
    F.HTTP_410,
    F.HTTP_4XX,
    F.FORBIDDEN_ADDRESS,
    F.BAD_SCHEME,
    F.INVALID_URL,
    F.OUT_OF_SCOPE,
    F.ROBOTS_DISALLOWED,
    F.TOO_MANY_REDIRECTS,
    F.REDIRECT_LOOP,
    F.BODY_TOO_LARGE,
    F.DECOMPRESSION_BOMB,
    F.HEADERS_TOO_LARGE,
    F.PARSER_ERROR,
    F.SITEMAP_TOO_LARGE,
    F.SITEMAP_INVALID,
    F.FEED_TOO_LARGE,
    F.FEED_INVALID,
    F.FILE_TOO_LARGE,
    F.FILE_BUDGET,
    F.EXCLUDED_LIVE,
}
SLOW_RETRY = {F.HTTP_403, F.HTTP_429, F.SOFT_BLOCK, F.ROBOTS_UNAVAILABLE, F.FILE_TOO_SMALL}
SLOWER_RETRY = {F.FILE_TYPE_MISMATCH}


@pytest.mark.parametrize("failure_class", list(FailureClass))
def test_every_class_has_a_fate(failure_class: F) -> None:
    result = fate(failure_class)
    assert result.retryable is (failure_class not in PERMANENT)
    if failure_class in SLOW_RETRY:
        assert result.backoff_multiplier == 4.0
    elif failure_class in SLOWER_RETRY:
        assert result.backoff_multiplier == 8.0
    else:
        assert result.backoff_multiplier == 1.0


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("http_404", Fate(retryable=False)),
        ("http_429", Fate(retryable=True, backoff_multiplier=4.0)),
        ("http_5xx", Fate(retryable=True)),
        ("timeout", Fate(retryable=True)),
        ("dns_error", Fate(retryable=True)),
        ("forbidden_address", Fate(retryable=False)),
    ],
)
def test_fate_accepts_stable_string_values(name: str, expected: Fate) -> None:
    assert fate(name) == expected


def test_fate_of_unknown_class_raises() -> None:
    with pytest.raises(ValueError, match="http_999"):
        fate("http_999")


def test_class_values_are_the_brief_names() -> None:
    assert {member.value for member in FailureClass} == {
        "http_404",
        "http_410",
        "http_4xx",
        "http_403",
        "http_429",
        "http_5xx",
        "timeout",
        "connect_error",
        "dns_error",
        "forbidden_address",
        "bad_scheme",
        "out_of_scope",
        "robots_disallowed",
        "excluded_live",
        "proxy_error",
        "robots_unavailable",
        "too_many_redirects",
        "redirect_loop",
        "body_too_large",
        "decompression_bomb",
        "headers_too_large",
        "soft_block",
        "parser_error",
        "protocol_error",
        "invalid_url",
        "sitemap_too_large",
        "sitemap_invalid",
        "feed_too_large",
        "feed_invalid",
        "file_too_large",
        "file_too_small",
        "file_size_mismatch",
        "file_type_mismatch",
        "file_budget",
    }
    assert f"{F.HTTP_404}" == "http_404"  # StrEnum: formats as its value


@pytest.mark.parametrize(
    ("attempt", "multiplier", "centre"),
    [
        (1, 1.0, 1.0),
        (2, 1.0, 1.8),
        (3, 1.0, 3.24),
        (5, 1.0, 1.8**4),
        (1, 4.0, 4.0),
        (3, 4.0, 12.96),
        (7, 1.0, 30.0),  # 1.8**6 = 34.0 -> capped
        (50, 1.0, 30.0),
        (100_000, 1.0, 30.0),  # would overflow a float
        (0, 1.0, 1.0),  # attempts below 1 count as the first
    ],
)
def test_backoff_bounds_over_many_seeds(attempt: int, multiplier: float, centre: float) -> None:
    low = centre * (1 - JITTER_FRACTION)
    high = min(30.0, centre * (1 + JITTER_FRACTION))
    delays = [
        backoff_seconds(attempt, 1.0, 1.8, 30.0, multiplier, random.Random(seed))
        for seed in range(2000)
    ]
    assert all(low - 1e-9 <= delay <= high + 1e-9 for delay in delays)
    # The jitter really spreads: both ends of the range are approached.
    assert min(delays) < low + 0.05 * (high - low)
    assert max(delays) > high - 0.05 * (high - low)


def test_backoff_is_reproducible_per_seed() -> None:
    first = backoff_seconds(3, 1.0, 1.8, 30.0, 1.0, random.Random(7))
    assert first == backoff_seconds(3, 1.0, 1.8, 30.0, 1.0, random.Random(7))


@pytest.mark.parametrize(
    ("base", "maximum", "multiplier"),
    [(0.0, 30.0, 1.0), (1.0, 0.0, 1.0), (1.0, 30.0, 0.0), (-1.0, 30.0, 1.0)],
)
def test_backoff_degenerate_settings_give_zero(
    base: float, maximum: float, multiplier: float
) -> None:
    assert backoff_seconds(3, base, 1.8, maximum, multiplier, random.Random(1)) == 0.0


NOW = 1_700_000_000.0


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("", None),
        ("   ", None),
        ("120", 120.0),
        (" 0 ", 0.0),
        ("1.5", 1.5),
        ("-5", 0.0),
        ("+7", 7.0),
        ("nan", None),
        ("inf", None),
        ("1e999", None),
        ("soon", None),
        ("12 seconds", None),
        (email.utils.formatdate(NOW + 90, usegmt=True), 90.0),
        (email.utils.formatdate(NOW - 90, usegmt=True), 0.0),
        (email.utils.formatdate(NOW + 30, localtime=False), 30.0),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),
        ("Sun, 06 Nov 1994 08:49:37 GMT", 0.0),
        ("Tue, 14 Nov 2023 22:13:50 -0000", 30.0),
        ("Tue, 14 Nov 2023 23:13:50 +0100", 30.0),
        ("Tue, 99 Nov 2023 22:13:50 GMT", None),
        ("Mon, 32 Foo 2023", None),
    ],
)
def test_parse_retry_after(value: str | None, expected: float | None) -> None:
    result = parse_retry_after(value, NOW)
    if expected is None:
        assert result is None
    else:
        assert result == pytest.approx(expected)
