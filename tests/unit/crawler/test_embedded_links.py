"""``extract_links(..., file_contexts=...)``: the links of the elements a ``files`` rule names.

Real HTML, as sites write it: a gallery, a video page with posters and sources, a page with a
``<base>``, hostile attribute values. The rules that act on these links are tested in
test_file_rules.py.
"""

from __future__ import annotations

from urllib.parse import urljoin

import pytest

from crawlfleet.crawler.files.rules import FileRules
from crawlfleet.crawler.links.links import EMBEDDING_ATTRIBUTES, PageLinks, extract_links
from crawlfleet.crawljob import CrawlJobSpec
from crawlfleet.crawljob.files import FILE_ELEMENTS

PAGE = "https://media.test/gallery/index.html"
EVERY = frozenset(FILE_ELEMENTS)

GALLERY = """<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>Holiday 2026</title>
  <link rel="stylesheet" href="/static/site.css">
  <link rel="preload" as="video" href="clips/intro.mp4">
  <link rel="alternate" type="application/rss+xml" href="/feed.xml">
</head>
<body>
  <nav><a href="/">Home</a> <a href="../about.html">About</a></nav>
  <figure>
    <a href="photos/beach-full.jpg">
      <img src="photos/beach.jpg" alt="Beach"
           srcset="photos/beach-640.jpg 640w, photos/beach-1280.jpg 1280w"
           sizes="(max-width: 640px) 100vw, 640px">
    </a>
    <figcaption>The beach</figcaption>
  </figure>
  <video controls poster="posters/sea.jpg" width="640">
    <source src="clips/sea.webm" type="video/webm">
    <source src="clips/sea.mp4" type="video/mp4">
    Your browser does not play video.
  </video>
  <audio controls src="sounds/waves.ogg"></audio>
  <embed type="application/pdf" src="/docs/map.pdf" width="400">
  <object data="/docs/guide.pdf" type="application/pdf"></object>
  <p>Download <a href="/docs/guide.pdf" download>the guide</a>.</p>
</body>
</html>
"""


def embedded(
    html: str,
    contexts: frozenset[str] = EVERY,
    *,
    max_links: int | None = None,
    respect_nofollow: bool = True,
) -> PageLinks:
    return extract_links(
        html,
        PAGE,
        file_contexts=contexts,
        max_links=max_links,
        respect_nofollow=respect_nofollow,
    )


def test_every_element_a_rule_may_name_has_its_attributes() -> None:
    assert set(EMBEDDING_ATTRIBUTES) == set(FILE_ELEMENTS)


def test_a_gallery_gives_every_linked_resource_with_its_element_in_document_order() -> None:
    page = embedded(GALLERY)
    assert page.embedded == [
        ("https://media.test/static/site.css", "link"),
        ("https://media.test/gallery/clips/intro.mp4", "link"),
        ("https://media.test/feed.xml", "link"),
        ("https://media.test/", "a"),
        ("https://media.test/about.html", "a"),
        ("https://media.test/gallery/photos/beach-full.jpg", "a"),
        ("https://media.test/gallery/photos/beach.jpg", "img"),
        ("https://media.test/gallery/photos/beach-640.jpg", "img"),  # srcset's first only
        ("https://media.test/gallery/posters/sea.jpg", "video"),  # poster
        ("https://media.test/gallery/clips/sea.webm", "source"),
        ("https://media.test/gallery/clips/sea.mp4", "source"),
        ("https://media.test/gallery/sounds/waves.ogg", "audio"),
        ("https://media.test/docs/map.pdf", "embed"),
        ("https://media.test/docs/guide.pdf", "object"),
        ("https://media.test/docs/guide.pdf", "a"),  # the same URL, found in another element
    ]
    assert page.embedded_over_cap == 0
    # The page's links are what they are without files: a and link ones are in both lists.
    assert page.links == extract_links(GALLERY, PAGE).links
    assert page.title == "Holiday 2026"


def test_only_the_named_elements_are_reported() -> None:
    page = embedded(GALLERY, frozenset({"video", "source"}))
    assert page.embedded == [
        ("https://media.test/gallery/posters/sea.jpg", "video"),
        ("https://media.test/gallery/clips/sea.webm", "source"),
        ("https://media.test/gallery/clips/sea.mp4", "source"),
    ]
    assert [url for url, _ in embedded(GALLERY, frozenset({"object"})).embedded] == [
        "https://media.test/docs/guide.pdf"
    ]


def test_without_file_contexts_nothing_is_embedded() -> None:
    page = extract_links(GALLERY, PAGE)
    assert page.embedded == []
    assert page.embedded_over_cap == 0


def test_a_name_no_element_has_is_ignored() -> None:
    assert embedded(GALLERY, frozenset({"iframe", "script"})).embedded == []
    page = embedded(GALLERY, frozenset({"iframe", "audio"}))
    assert page.embedded == [("https://media.test/gallery/sounds/waves.ogg", "audio")]


def test_a_video_with_both_src_and_poster_gives_both_src_first() -> None:
    html = '<video poster="/p.jpg" src="/v.mp4"></video><video src="/w.mp4"></video>'
    assert embedded(html, frozenset({"video"})).embedded == [
        ("https://media.test/v.mp4", "video"),
        ("https://media.test/p.jpg", "video"),
        ("https://media.test/w.mp4", "video"),
    ]


@pytest.mark.parametrize(
    ("srcset", "first"),
    [
        ("a.jpg 1x, b.jpg 2x", "a.jpg"),
        ("  a.jpg   640w,b.jpg 1280w", "a.jpg"),
        (",, a.jpg", "a.jpg"),
        ("a.jpg,", "a.jpg"),
        ("a.jpg", "a.jpg"),
        ("a.jpg\t2x", "a.jpg"),
        ("a.jpg\n1x", "a.jpg"),
        ("/img/x,y.jpg 2x", "/img/x,y.jpg"),  # a comma inside a URL stays in it
    ],
)
def test_an_images_srcset_gives_its_first_candidate(srcset: str, first: str) -> None:
    html = f'<img srcset="{srcset}">'
    assert embedded(html, frozenset({"img"})).embedded == [(urljoin(PAGE, first), "img")]


@pytest.mark.parametrize("srcset", ["", "   ", ", ,", "\t"])
def test_an_empty_srcset_gives_nothing(srcset: str) -> None:
    assert embedded(f'<img srcset="{srcset}">', frozenset({"img"})).embedded == []


def test_links_resolve_against_the_base_like_page_links() -> None:
    html = (
        '<html><head><base href="https://cdn.test/assets/"></head><body>'
        '<img src="a.png"><img src="/b.png"><img src="//img.test/c.png">'
        '<img src="https://other.test/d.png"><img src="../e.png"><a href="f.html">f</a>'
        "</body></html>"
    )
    page = embedded(html, frozenset({"img", "a"}))
    assert page.embedded == [
        ("https://cdn.test/assets/a.png", "img"),
        ("https://cdn.test/b.png", "img"),
        ("https://img.test/c.png", "img"),
        ("https://other.test/d.png", "img"),
        ("https://cdn.test/e.png", "img"),
        ("https://cdn.test/assets/f.html", "a"),
    ]
    assert page.links == ["https://cdn.test/assets/f.html"]


@pytest.mark.parametrize(
    "src",
    [
        "data:image/png;base64,iVBORw0KGgo=",
        "javascript:alert(1)",
        "mailto:a@media.test",
        "#top",
        "",
        "   ",
        "http://",
        "http://[::1",
        "https://" + "x" * 5000 + ".test/a.png",
    ],
)
def test_what_is_no_http_url_is_left_out(src: str) -> None:
    assert embedded(f'<img src="{src}">', frozenset({"img"})).embedded == []


def test_fragments_are_cut_and_a_repeat_is_reported_once_per_element() -> None:
    html = (
        '<img src="/a.png#one"><img src="/a.png#two"><img src="/a.png">'
        '<a href="/a.png">a</a><a href="/a.png#x">again</a>'
    )
    assert embedded(html, frozenset({"img", "a"})).embedded == [
        ("https://media.test/a.png", "img"),
        ("https://media.test/a.png", "a"),
    ]


def test_non_ascii_urls_come_percent_encoded() -> None:
    html = '<img src="/fotos/straße.jpg"><img src="https://bücher.test/ä.png">'
    assert embedded(html, frozenset({"img"})).embedded == [
        ("https://media.test/fotos/stra%C3%9Fe.jpg", "img"),
        ("https://xn--bcher-kva.test/%C3%A4.png", "img"),
    ]


def test_at_most_max_links_are_taken_and_the_rest_counted() -> None:
    html = "".join(f'<img src="/i/{number}.jpg">' for number in range(10))
    html += '<img src="/i/0.jpg">'  # a repeat past the cap is no new link
    page = embedded(html, frozenset({"img"}), max_links=4)
    assert [url for url, _ in page.embedded] == [f"https://media.test/i/{n}.jpg" for n in range(4)]
    assert page.embedded_over_cap == 6


def test_the_cap_of_embedded_links_is_their_own() -> None:
    html = "".join(f'<a href="/p/{n}.html">p</a><img src="/i/{n}.jpg">' for n in range(5))
    page = embedded(html, frozenset({"img"}), max_links=3)
    assert len(page.links) == 3
    assert page.over_cap == 2
    assert [url for url, _ in page.embedded] == [f"https://media.test/i/{n}.jpg" for n in range(3)]
    assert page.embedded_over_cap == 2


def test_rel_nofollow_keeps_an_a_or_link_out_and_a_robots_meta_every_link() -> None:
    html = (
        '<link rel="nofollow" href="/hidden.css"><a rel="nofollow ugc" href="/x.pdf">x</a>'
        '<a href="/y.pdf">y</a><img src="/z.png">'
    )
    contexts = frozenset({"a", "link", "img"})
    assert embedded(html, contexts).embedded == [
        ("https://media.test/y.pdf", "a"),
        ("https://media.test/z.png", "img"),
    ]
    assert len(embedded(html, contexts, respect_nofollow=False).embedded) == 4
    robots = '<meta name="robots" content="noindex, nofollow">' + html
    page = embedded(robots, contexts)
    assert (page.links, page.embedded) == ([], [])
    assert len(embedded(robots, contexts, respect_nofollow=False).embedded) == 4


@pytest.mark.parametrize(
    "html",
    [
        b"\x00\xff\xfe" * 1000,
        b"<img src=" + b"a" * 200_000,
        "<video><source src='/a.webm'" * 2000,
        "<object data='/a.pdf'>" * 3000,
        '<img src="/a.png" srcset="' + "," * 50_000 + '">',
        "<img src='\udcff.png'>",
    ],
)
def test_hostile_pages_give_links_or_nothing_never_an_error(html: str | bytes) -> None:
    page = extract_links(html, PAGE, file_contexts=EVERY, max_links=100)
    assert len(page.embedded) <= 100
    for url, element in page.embedded:
        assert url.startswith("https://")
        assert url.isascii()
        assert element in EMBEDDING_ATTRIBUTES


def test_the_rules_contexts_and_the_embedded_links_decide_files_together() -> None:
    spec = CrawlJobSpec.from_mapping(
        {
            "seeds": [PAGE],
            "files": {
                "rules": [
                    {"match": r"\.pdf$", "context": ["a", "object", "embed"]},
                    {"context": ["img", "source"]},
                ]
            },
        }
    )
    rules = FileRules.from_spec(spec.files)
    page = extract_links(GALLERY, PAGE, file_contexts=rules.contexts)
    files = {
        url: rule.index
        for url, element in page.embedded
        if (rule := rules.for_link(url, element)) is not None
    }
    assert files == {
        "https://media.test/gallery/photos/beach.jpg": 1,
        "https://media.test/gallery/photos/beach-640.jpg": 1,
        "https://media.test/gallery/clips/sea.webm": 1,
        "https://media.test/gallery/clips/sea.mp4": 1,
        "https://media.test/docs/map.pdf": 0,
        "https://media.test/docs/guide.pdf": 0,
    }
