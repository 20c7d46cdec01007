"""LinkAdmission: what a batch's links still need from the Bloom filter, and what it settled."""

from __future__ import annotations

import random

import pytest

from crawlfleet.crawler.links.admission import (
    LinkAdmission,
    PageLinksToAdmit,
    PendingLinks,
    canonical_link,
)
from crawlfleet.crawler.links.scope import Scope
from crawlfleet.frontier import Admission, Link, try_canonicalize

SCOPE = Scope(allowed_domains=("a.test",), max_depth=3, exclude=(r"/private/",))


def page(links: list[str], depth: int = 1, parent: str = "http://a.test/") -> PageLinksToAdmit:
    return PageLinksToAdmit(links, depth, parent)


def urls(pending: PendingLinks) -> list[str]:
    return [link.url for link in pending.links]


def answer(admission: LinkAdmission, pending: PendingLinks, code: Admission) -> None:
    admission.settle(pending, [code] * len(pending.links))


def test_a_settled_link_is_not_offered_again() -> None:
    admission = LinkAdmission(SCOPE)
    first = admission.prepare([page(["http://a.test/x", "http://a.test/y"])])
    assert urls(first) == ["http://a.test/x", "http://a.test/y"]
    admission.settle(first, [Admission.NEW, Admission.SEEN])
    second = admission.prepare([page(["http://a.test/y", "http://a.test/z", "http://a.test/x"])])
    assert urls(second) == ["http://a.test/z"]
    assert second.skipped == 2


def test_links_of_a_failed_enqueue_are_offered_again() -> None:
    admission = LinkAdmission(SCOPE)
    admission.prepare([page(["http://a.test/x"])])  # enqueue raised: settle never called
    again = admission.prepare([page(["http://a.test/x"])])
    assert urls(again) == ["http://a.test/x"]
    assert (again.local_hits, again.remote_checks) == (0, 1)


@pytest.mark.parametrize("refusal", [Admission.OVER_LIMIT, Admission.OVER_BUDGET])
def test_links_refused_for_max_pages_or_memory_pressure_are_offered_again(
    refusal: Admission,
) -> None:
    admission = LinkAdmission(SCOPE)
    answer(admission, admission.prepare([page(["http://a.test/x"])]), refusal)
    again = admission.prepare([page(["http://a.test/x"])])
    assert urls(again) == ["http://a.test/x"]
    assert (again.local_hits, again.remote_checks) == (0, 1)


def test_a_link_too_deep_here_is_offered_at_a_lower_depth() -> None:
    admission = LinkAdmission(SCOPE)
    deep = admission.prepare([page(["http://a.test/x"], depth=4)])
    assert (deep.links, deep.settled) == ([], [])
    assert (deep.local_hits, deep.remote_checks) == (0, 0)  # the filter was not asked
    answer(admission, deep, Admission.NEW)
    again = admission.prepare([page(["http://a.test/x"], depth=2)])
    assert urls(again) == ["http://a.test/x"]
    assert (again.local_hits, again.remote_checks) == (0, 1)


def test_local_hits_count_the_cache_s_answers_and_the_batch_s_own_repeats() -> None:
    admission = LinkAdmission(SCOPE)
    nav = ["http://a.test/", "http://a.test/about", "http://a.test/news"]
    first = admission.prepare([page([*nav, "http://a.test/1"]), page([*nav, "http://a.test/2"])])
    # Two pages of one batch: the second page's menu is the batch's repeat of the first's.
    assert (first.local_hits, first.remote_checks) == (3, 5)
    answer(admission, first, Admission.NEW)
    second = admission.prepare(
        [page([*nav, "http://a.test/3", "http://b.test/away"]), page([*nav, "http://a.test/1"])]
    )
    assert urls(second) == ["http://a.test/3"]
    # Seven links the filter answered before; the other host's link is a refusal, not a hit.
    assert (second.local_hits, second.remote_checks) == (7, 1)
    answer(admission, second, Admission.SEEN)
    third = admission.prepare([page(["http://b.test/away", "http://a.test/3"])])
    assert third.links == []
    assert (third.skipped, third.local_hits, third.remote_checks) == (2, 1, 0)
    # Met too deep, a link the filter answered is no local hit: the filter would not be asked.
    deep = admission.prepare([page(nav, depth=4)])
    assert (deep.skipped, deep.local_hits, deep.remote_checks) == (3, 0, 0)


def test_a_link_is_skipped_only_after_the_filter_answered_it() -> None:
    """The guarantee (issue #25): no URL is skipped as seen unless the frontier admitted it or
    had seen it. Random batches, random answers (refusals and failed enqueues included): every
    local hit is a link the filter answered before, or a repeat within its batch."""
    rng = random.Random(25)
    admission = LinkAdmission(SCOPE, generation_size=16)
    answered: set[str] = set()
    pool = [f"http://a.test/{k}" for k in range(60)]
    codes = [Admission.NEW, Admission.SEEN, Admission.OVER_LIMIT, Admission.OVER_BUDGET]
    for _ in range(300):
        pages = [page(rng.sample(pool, rng.randint(1, 8))) for _ in range(rng.randint(1, 3))]
        pending = admission.prepare(pages)
        offered = {link.url for link in pending.links}
        found = [link for one in pages for link in one.links]
        assert pending.remote_checks == len(offered)
        assert pending.local_hits == len(found) - len(offered)
        for link in found:  # never skipped without an answer: offered again until it has one
            assert link in answered or link in offered
        if rng.random() < 0.1:
            continue  # the enqueue failed: nothing settles
        admitted = [rng.choice(codes) for _ in pending.links]
        admission.settle(pending, admitted)
        answered |= {
            link.url
            for link, code in zip(pending.links, admitted, strict=True)
            if code in (Admission.NEW, Admission.SEEN)
        }


def test_out_of_scope_and_invalid_links_settle_without_the_filter() -> None:
    admission = LinkAdmission(SCOPE)
    refused = ["http://b.test/x", "http://a.test/private/1", "http://a.test:99999/"]
    pending = admission.prepare([page(refused)])
    assert pending.links == []
    assert pending.settled == refused
    admission.settle(pending, [])
    again = admission.prepare([page(refused)])
    assert (again.links, again.skipped) == ([], 3)


def test_one_link_per_canonical_url_with_the_first_page_s_depth_and_parent() -> None:
    admission = LinkAdmission(SCOPE)
    pending = admission.prepare(
        [
            page(["http://a.test/x?b=2&a=1"], depth=1, parent="http://a.test/p1"),
            page(
                ["http://a.test/x?a=1&b=2", "HTTP://A.TEST/y"], depth=2, parent="http://a.test/p2"
            ),
        ]
    )
    assert pending.links == [
        Link(try_canonicalize("http://a.test/x?a=1&b=2"), 1, "http://a.test/p1"),  # type: ignore[arg-type]
        Link(try_canonicalize("http://a.test/y"), 2, "http://a.test/p2"),  # type: ignore[arg-type]
    ]
    answer(admission, pending, Admission.SEEN)
    # Both raw spellings of the first URL settled with it.
    repeat = admission.prepare([page(["http://a.test/x?b=2&a=1", "http://a.test/x?a=1&b=2"])])
    assert (repeat.links, repeat.skipped) == ([], 2)


def test_the_oldest_generation_is_forgotten() -> None:
    admission = LinkAdmission(SCOPE, generation_size=2)
    for name in ("a", "b", "c", "d", "e"):
        answer(admission, admission.prepare([page([f"http://a.test/{name}"])]), Admission.NEW)
    assert len(admission) <= 4
    assert urls(admission.prepare([page(["http://a.test/a"])])) == ["http://a.test/a"]
    assert urls(admission.prepare([page(["http://a.test/e"])])) == []


def test_generation_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="generation_size"):
        LinkAdmission(SCOPE, generation_size=0)


@pytest.mark.parametrize(
    "url",
    [
        "http://a.test/", "http://a.test", "https://a.test:443/x", "http://a.test:80/x",
        "http://a.test:8080/x", "http://a.test:08080/x", "http://a.test:65536/x",
        "http://a.test:0/x", "http://A.test/x", "http://a.test./x", "http://a..test/x",
        "http://-a.test/x", "http://xn--bcher-kva.test/x", "http://a.test/x/../y",
        "http://a.test/x/./y", "http://a.test/.well-known/x", "http://a.test/x//y",
        "http://a.test/~u/a-b_c.d", "http://a.test/a%41", "http://a.test/a b",
        "http://a.test/x?", "http://a.test/x?b=1&a=2", "http://a.test/x#f", "http://a.test/é",
        "http://127.0.0.1:8080/p", "http://1.2/p", "http://[::1]:8080/p", "ftp://a.test/x",
        f"http://{'a' * 63}.test/x", f"http://{'a' * 64}.test/x",
    ],
)  # fmt: skip
def test_the_canonical_shortcut_agrees_with_canonicalize(url: str) -> None:
    assert canonical_link(url) == try_canonicalize(url)


def test_the_canonical_shortcut_agrees_on_generated_urls() -> None:
    rng = random.Random(7)
    labels = ["a", "b0", "xn--bcher-kva", "a--b", "1", "255", "0x7f", "a" * 63, "a" * 64, "-a"]
    ports = ["", ":80", ":443", ":8080", ":0", ":65535", ":65536", ":99999", ":01"]
    segments = ["", "/", "/a", "/a/", "/.a", "/..", "/.", "/~x", "/A-b.c_d", "/%7e", "/a b"]
    for _ in range(5000):
        host = ".".join(rng.choice(labels) for _ in range(rng.randint(1, 3)))
        url = (
            rng.choice(["http://", "https://"])
            + host
            + rng.choice(ports)
            + "".join(rng.choice(segments) for _ in range(rng.randint(0, 3)))
        )
        assert canonical_link(url) == try_canonicalize(url), url


def test_every_refused_link_is_counted_by_reason() -> None:
    admission = LinkAdmission(SCOPE)
    pending = admission.prepare(
        [
            page(
                [
                    "http://a.test/ok",
                    "http://b.test/elsewhere",
                    "http://a.test/private/x",
                    "http://a.test/private/y",
                    "http://[::1/broken",
                ]
            ),
            page(["http://a.test/deep/1", "http://a.test/deep/2"], depth=4),
        ]
    )
    assert urls(pending) == ["http://a.test/ok"]
    assert pending.dropped == {
        "out_of_domain": 1,
        "excluded": 2,
        "invalid_url": 1,
        "too_deep": 2,
    }


def test_embedded_files_are_admitted_one_level_past_max_depth_and_no_further() -> None:
    admission = LinkAdmission(SCOPE)
    embedded = PageLinksToAdmit(["http://a.test/clip.mp4"], 4, "http://a.test/p#file=0", True)
    pending = admission.prepare(
        [embedded, PageLinksToAdmit(["http://a.test/far.mp4"], 5, "http://a.test/q", True)]
    )
    assert [(link.url, link.depth, link.parent) for link in pending.links] == [
        ("http://a.test/clip.mp4", 4, "http://a.test/p#file=0")  # queued at its own depth
    ]
    assert pending.dropped == {"too_deep": 1}
    plain = admission.prepare([page(["http://a.test/page.html"], depth=4)])
    assert plain.links == []
    assert plain.dropped == {"too_deep": 1}
    outside = admission.prepare(
        [PageLinksToAdmit(["http://b.test/x.png", "http://a.test/private/y.png"], 4, "p", True)]
    )
    assert outside.links == []  # one level deeper, never out of scope
