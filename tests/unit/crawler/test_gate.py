"""The gate's address check fails closed: what the guard cannot judge is refused, with its class.

``RequestGate.check_address`` is what both kinds of worker ask before a URL that is not a
lease's own (a redirect hop, a Scrapy meta refresh, a download of no lease). No test here
sends traffic or asks DNS: the URLs are IP literals or refused before any look-up, and the
guard's resolver fails the test if it is asked.
"""

from __future__ import annotations

import pytest

from crawlfleet.crawler.fetching.failures import FailureClass
from crawlfleet.crawler.fetching.safety import AddressGuard
from crawlfleet.crawler.worker.gate import Refused, RequestGate

LONG_QUERY = "pad=" + "a" * 9000


async def no_dns(host: str, port: int) -> list[str]:
    raise AssertionError(f"the guard asked DNS for {host}: it should have refused first")


def gate(*, allow_private: bool = False) -> RequestGate:
    """A gate whose address check asks a guard without DNS (the other parts are robots.txt's
    and the lease's, which the address check never touches)."""
    return RequestGate(
        frontier=None,  # type: ignore[arg-type]
        leases=None,  # type: ignore[arg-type]
        robots=None,  # type: ignore[arg-type]
        guard=AddressGuard(allow_private=allow_private, resolver=no_dns),
        metrics=None,  # type: ignore[arg-type]
        obey=False,
        host_delay_seconds=0.0,
    )


@pytest.mark.parametrize(
    ("url", "failure_class"),
    [
        (f"http://169.254.169.254/latest/meta-data/?{LONG_QUERY}", FailureClass.INVALID_URL),
        (f"http://127.0.0.1:8080/watched?{LONG_QUERY}", FailureClass.INVALID_URL),
        ("http://[::1/", FailureClass.INVALID_URL),
        ("http:///no-host", FailureClass.INVALID_URL),
        ("http://127.0.0.1:99999/", FailureClass.INVALID_URL),
        ("ftp://127.0.0.2/x", FailureClass.BAD_SCHEME),
        ("file:///etc/passwd", FailureClass.BAD_SCHEME),
        ("data:text/html,<p>x</p>", FailureClass.BAD_SCHEME),
        ("http://169.254.169.254/latest/meta-data/", FailureClass.FORBIDDEN_ADDRESS),
        ("http://[::ffff:169.254.169.254]/", FailureClass.FORBIDDEN_ADDRESS),
        ("http://0x7f.1/", FailureClass.FORBIDDEN_ADDRESS),
    ],
)
async def test_what_the_guard_cannot_judge_or_forbids_is_refused(
    url: str, failure_class: FailureClass
) -> None:
    checked = await gate(allow_private=False).check_address(url)
    assert isinstance(checked, Refused)
    assert checked.failure_class is failure_class, checked.message


async def test_metadata_stays_refused_with_private_networks_allowed() -> None:
    checked = await gate(allow_private=True).check_address("http://169.254.169.254/")
    assert isinstance(checked, Refused)
    assert checked.failure_class is FailureClass.FORBIDDEN_ADDRESS
    assert await gate(allow_private=True).check_address("http://127.0.0.1:8080/a") == (
        "http://127.0.0.1:8080/a"
    )


async def test_a_refused_hop_says_so_in_a_bounded_message() -> None:
    url = f"http://169.254.169.254/?{LONG_QUERY}"
    refused = await gate().before_hop(url)
    assert refused is not None
    assert refused.failure_class is FailureClass.INVALID_URL
    assert refused.message.startswith("redirect to http://169.254.169.254/?pad=aaa")
    assert "longer than 8192 characters" in refused.message
    assert len(refused.message) < 500  # not the 9 KB URL, in a dead letter
