"""When an unreachable robots.txt is asked again (``recheck_seconds``,
crawler/politeness/robots.py).

The header is parsed as the fetcher parses it (``parse_retry_after``, measured from the
answer's arrival), then the wait is chosen: each Retry-After form a server may send, and what
the answer's status and the failure streak do to it.
"""

from __future__ import annotations

import email.utils

import pytest

from crawlfleet.crawler.fetching.failures import parse_retry_after
from crawlfleet.crawler.politeness.robots import (
    MAX_RECHECK_SECONDS,
    MIN_RECHECK_SECONDS,
    recheck_seconds,
)

NOW = 1_700_000_000.0
ERROR_TTL = 600.0


def _http_date(offset_seconds: float) -> str:
    return email.utils.formatdate(NOW + offset_seconds, usegmt=True)


def wait_after(status: int | None, header: str | None, failures: int = 1) -> float:
    """The wait after an answer with ``status`` and a ``Retry-After: header`` (None: none)."""
    return recheck_seconds(
        status,
        parse_retry_after(header, NOW),
        failures=failures,
        error_ttl_seconds=ERROR_TTL,
    )


@pytest.mark.parametrize("status", [503, 429])
@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("1", 1.0),  # seconds
        ("120", 120.0),
        ("2.5", 2.5),  # a decimal, tolerated as the fetcher tolerates it
        (_http_date(90), 90.0),  # an HTTP-date, from the answer's arrival
        (None, ERROR_TTL),  # absent: the error TTL, as without the header
        ("soon", ERROR_TTL),  # garbage: as absent
        ("", ERROR_TTL),
        ("Wed, 99 Foo 2015 07:28:00 GMT", ERROR_TTL),
        ("99999999999", ERROR_TTL),  # huge: no later than without the header
        (_http_date(30 * 86_400), ERROR_TTL),
        ("0", MIN_RECHECK_SECONDS),  # zero: not a tight loop
        ("-5", MIN_RECHECK_SECONDS),
        (_http_date(-3600), MIN_RECHECK_SECONDS),  # a date gone by
    ],
)
def test_retry_after_forms(status: int, header: str | None, expected: float) -> None:
    assert wait_after(status, header) == pytest.approx(expected, abs=1.0)


@pytest.mark.parametrize("status", [500, 502, 504, 404, None])
def test_retry_after_counts_only_on_429_and_503(status: int | None) -> None:
    """RFC 9110 gives Retry-After its meaning on a 503 (and RFC 6585 on a 429); on another
    answer, or with no answer at all, the wait is the error TTL's."""
    assert wait_after(status, "1") == ERROR_TTL


def test_a_failure_streak_does_not_stretch_the_servers_wait() -> None:
    assert wait_after(503, "5", failures=7) == 5.0
    assert wait_after(503, None, failures=2) == 2 * ERROR_TTL  # without it, the doubling


def test_without_retry_after_the_wait_doubles_up_to_an_hour() -> None:
    waits = [wait_after(503, None, failures) for failures in (1, 2, 3, 4, 5, 40, 10_000)]
    assert waits == [600.0, 1200.0, 2400.0, *[MAX_RECHECK_SECONDS] * 4]


def test_an_error_ttl_above_an_hour_is_the_ceiling() -> None:
    day = 86_400.0
    assert recheck_seconds(None, None, failures=3, error_ttl_seconds=day) == day
    assert recheck_seconds(503, day * 30, failures=1, error_ttl_seconds=day) == day


def test_a_retry_after_that_is_not_a_number_is_ignored() -> None:
    assert recheck_seconds(503, float("nan"), failures=1, error_ttl_seconds=ERROR_TTL) == 600.0
