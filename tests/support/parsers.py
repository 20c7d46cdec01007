"""User parsers for the tests: each misbehaves on one page of the test site, as user code does.

``hostile`` raises on ``/cp1251/header``, spins the CPU for 10 s on ``/cp1251/meta``, returns
junk on ``/sjis/header`` and an item that JSON cannot hold on ``/sjis/meta``; anything else
gives one item. Loaded by the worker's parser process as ``tests.support.parsers:hostile``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from crawlfleet.parsing import Page


def hostile(page: Page) -> object:
    if page.url.endswith("/cp1251/header"):
        raise ValueError("this parser refuses Cyrillic")
    if page.url.endswith("/cp1251/meta"):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # CPU-heavy: holds its own process's GIL throughout
            pass
    if page.url.endswith("/sjis/header"):
        return 42
    if page.url.endswith("/sjis/meta"):
        return [{"when": time}]
    return _one(page)


def _one(page: Page) -> Iterator[dict[str, object]]:
    yield {"title": page.selector.css("title::text").get(), "depth": page.depth}
