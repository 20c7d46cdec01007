"""Scope pattern cost: RE2 sets (what the scope uses) against Python's ``re``, one run.

    python -m bench.scope_patterns [--quick] [--json]

A worker checks every link it finds against ``scope.include``/``exclude``. Since the patterns
are RE2 (``crawlfleet/patterns.py``: linear time, one set per list), this measures that the
change did not slow the hot path: the same ``Scope.filter`` over the same page batches, once with
its RE2 sets and once with the patterns joined into one ``re`` alternation each (what the scope
did before), interleaved rounds, best of each. Also the cost of the two lists' searches alone, and a
backtracking pattern on a crafted URL, where ``re`` is exponential and RE2 is not.

Target (docs/benchmarks.md): RE2 filter time ≤ 1.2× the ``re`` filter time on typical URLs.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import time
from collections.abc import Callable
from typing import Any

from crawlfleet.crawler.links.scope import Scope
from crawlfleet.patterns import compile_patterns

INCLUDE = (r"/catalogue/", r"/category/books/[a-z_]+_\d+/", r"(?i)/NEWS/\d{4}/")
EXCLUDE = (
    r"\.(jpg|jpeg|png|gif|pdf|zip)$",
    r"[?&](sessionid|sid|utm_[a-z]+)=",
    r"/(login|logout|cart|checkout)\b",
    r"(?i)/print/",
)
LINKS_PER_PAGE = 100


class _ReAlternation:
    """The patterns as one Python ``re`` alternation: the scope's matcher before RE2."""

    def __init__(self, patterns: tuple[str, ...]) -> None:
        parts = []
        for pattern in patterns:
            flags = re.match(r"\(\?([aiLmsux]+)\)", pattern)
            parts.append(
                f"(?{flags.group(1)}:{pattern[flags.end() :]})" if flags else f"(?:{pattern})"
            )
        self._search = re.compile("|".join(parts)).search

    def search(self, url: str) -> bool:
        return self._search(url) is not None


def pages(count: int) -> list[list[str]]:
    """Batches of links as a books-like site offers them: mostly in scope, some excluded."""
    shapes = [
        "https://books.example/catalogue/{slug}_{n}/index.html",
        "https://books.example/catalogue/category/books/{slug}_{n}/page-{m}.html",
        "https://books.example/media/cache/{n}/{m}.jpg",
        "https://books.example/news/2025/{slug}-{n}",
        "https://books.example/login?next=/catalogue/{slug}_{n}/",
        "https://books.example/about/{slug}?utm_source=x{m}",
        "https://cdn.books.example/static/{slug}.css",
        "https://books.example/catalogue/{slug}_{n}/print/",
    ]
    slugs = ["travel", "mystery", "historical-fiction", "sequential-art", "classics", "poetry"]
    out = []
    for page in range(count):
        out.append(
            [
                shapes[(page + i) % len(shapes)].format(
                    slug=slugs[(page * 7 + i) % len(slugs)], n=page * 13 + i, m=i % 9
                )
                for i in range(LINKS_PER_PAGE)
            ]
        )
    return out


def scopes() -> tuple[Scope, Scope]:
    ours = Scope(allowed_domains=("books.example",), max_depth=None, include=INCLUDE,
                 exclude=EXCLUDE)  # fmt: skip
    before = Scope(allowed_domains=("books.example",), max_depth=None, include=INCLUDE,
                   exclude=EXCLUDE)  # fmt: skip
    object.__setattr__(before, "_include", _ReAlternation(INCLUDE))
    object.__setattr__(before, "_exclude", _ReAlternation(EXCLUDE))
    return ours, before


def best_of(rounds: int, runs: dict[str, Callable[[], Any]]) -> dict[str, float]:
    """Seconds of the fastest round of each, the candidates interleaved round by round."""
    best = {name: float("inf") for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scope_patterns")
    parser.add_argument("--quick", action="store_true", help="fewer pages and rounds")
    parser.add_argument("--json", action="store_true", help="print the results as JSON last")
    args = parser.parse_args()
    page_count, rounds = (200, 5) if args.quick else (1000, 9)
    batches = pages(page_count)
    links = page_count * LINKS_PER_PAGE
    ours, before = scopes()
    kept = [ours.filter(batch, 1) for batch in batches]
    assert kept == [before.filter(batch, 1) for batch in batches], "the two scopes disagree"

    filter_times = best_of(
        rounds,
        {
            "re2": lambda: [ours.filter(batch, 1) for batch in batches],
            "re": lambda: [before.filter(batch, 1) for batch in batches],
        },
    )
    flat = [url for batch in batches for url in batch]
    re2_exclude = compile_patterns(EXCLUDE)
    assert re2_exclude is not None
    re_exclude = _ReAlternation(EXCLUDE)
    re2_include = compile_patterns(INCLUDE)
    assert re2_include is not None
    re_include = _ReAlternation(INCLUDE)
    search_times = best_of(
        rounds,
        {
            "re2": lambda: [re2_exclude.search(url) or re2_include.search(url) for url in flat],
            "re": lambda: [re_exclude.search(url) or re_include.search(url) for url in flat],
        },
    )
    crafted = "https://books.example/" + "a" * 22 + "b"
    pathological_re2 = compile_patterns([r"(a+)+$"])
    assert pathological_re2 is not None
    pathological_re = _ReAlternation((r"(a+)+$",))
    crafted_times = best_of(
        1,
        {
            "re2": lambda: pathological_re2.search(crafted),
            "re": lambda: pathological_re.search(crafted),
        },
    )

    results = {
        "python": platform.python_version(),
        "links": links,
        "in_scope": sum(len(batch_kept) for batch_kept, _ in kept),
        "filter_ns_per_link": {k: v / links * 1e9 for k, v in filter_times.items()},
        "filter_ratio_re2_over_re": filter_times["re2"] / filter_times["re"],
        "search_ns_per_url": {k: v / links * 1e9 for k, v in search_times.items()},
        "search_ratio_re2_over_re": search_times["re2"] / search_times["re"],
        "crafted_22_a_seconds": crafted_times,
    }
    print(f"{links:,} links in pages of {LINKS_PER_PAGE}, {results['in_scope']:,} kept")
    for name in ("re2", "re"):
        print(
            f"  Scope.filter with {name:<3} {results['filter_ns_per_link'][name]:8.0f} ns/link"
            f"   both lists' searches alone {results['search_ns_per_url'][name]:6.0f} ns/URL"
        )
    print(f"  ratio re2/re: filter {results['filter_ratio_re2_over_re']:.2f},"
          f" search {results['search_ratio_re2_over_re']:.2f}")  # fmt: skip
    print(f"  (a+)+$ on 22 a's and a b: re2 {crafted_times['re2'] * 1e6:.1f} µs,"
          f" re {crafted_times['re']:.2f} s")  # fmt: skip
    if args.json:
        print(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
