"""Sitemap and file marks in a task's parent: written and read back; plain parents left alone."""

from __future__ import annotations

import pytest

from crawlfleet.frontier import Link, canonicalize
from crawlfleet.frontier.parents import (
    SitemapTask,
    file_mark,
    file_parent,
    listed_parent,
    sitemap_parent,
    sitemap_roots,
    sitemap_task,
    split_parent,
)


def test_one_root_per_seed_origin_in_seed_order() -> None:
    roots = sitemap_roots(
        ["https://a.test/x", "https://a.test:443/y", "http://b.test:8080/", "http://a.test/"]
    )
    assert roots == [
        Link(
            canonicalize("https://a.test/sitemap.xml"), 0, "https://a.test/robots.txt#sitemap=root"
        ),
        Link(
            canonicalize("http://b.test:8080/sitemap.xml"),
            0,
            "http://b.test:8080/robots.txt#sitemap=root",
        ),
        Link(canonicalize("http://a.test/sitemap.xml"), 0, "http://a.test/robots.txt#sitemap=root"),
    ]
    assert [sitemap_task(root.parent) for root in roots] == [SitemapTask(0, root=True)] * 3


def test_sitemap_documents_carry_their_level() -> None:
    parent = sitemap_parent("https://a.test/index.xml", 2)
    assert sitemap_task(parent) == SitemapTask(2, root=False)
    assert split_parent(parent) == ("https://a.test/index.xml", None)


@pytest.mark.parametrize("lastmod", ["2026-01-15", "2026-02-01T10:30:00+00:00", "2025"])
def test_a_listed_page_carries_its_lastmod(lastmod: str) -> None:
    parent = listed_parent("https://a.test/s.xml.gz", lastmod)
    assert split_parent(parent) == ("https://a.test/s.xml.gz", lastmod)
    assert sitemap_task(parent) is None


@pytest.mark.parametrize(
    "parent", ["", "https://a.test/page", listed_parent("https://a.test/s.xml", None)]
)
def test_plain_parents_are_read_as_they_are(parent: str) -> None:
    assert split_parent(parent) == (parent, None)
    assert sitemap_task(parent) is None


def test_a_garbled_mark_is_no_sitemap() -> None:
    assert sitemap_task("https://a.test/x#sitemap=two") is None
    assert split_parent("https://a.test/x#other") == ("https://a.test/x", None)


# --- file marks -----------------------------------------------------------------------------------


@pytest.mark.parametrize("rule", [0, 7, 31])
def test_a_file_link_carries_its_rule_and_its_record_names_the_page(rule: int) -> None:
    parent = file_parent("https://a.test/gallery/", rule)
    assert parent == f"https://a.test/gallery/#file={rule}"
    assert file_mark(parent) == rule
    assert split_parent(parent) == ("https://a.test/gallery/", None)
    assert sitemap_task(parent) is None


@pytest.mark.parametrize(
    "parent",
    [
        "",
        "https://a.test/page",
        sitemap_parent("https://a.test/index.xml", 1),
        listed_parent("https://a.test/s.xml", "2026-01-15"),
        "https://a.test/x#file=",
        "https://a.test/x#file=two",
        "https://a.test/x#file=-1",
        "https://a.test/x#file=\u0663",  # a digit, but not an ASCII one
    ],
)
def test_other_parents_carry_no_file_mark(parent: str) -> None:
    assert file_mark(parent) is None
