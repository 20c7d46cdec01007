"""Main text or visible text: is a boilerplate remover worth its weight for ``content: text``?

    python -m bench.main_text [--json] [--html-dir DIR] [--limit N]

Issue 15 asked whether ``output.content: text`` should offer a main-content extractor such as
trafilatura (behind an optional extra) beside the visible text crawlfleet writes now (selectolax,
``crawler/harvest/harvest.py``). This script measures both on the same pages in one process: CPU
milliseconds per page (best of three passes; trafilatura's default and ``fast=True``), and the
characters each keeps, so the price of what boilerplate removal takes away is on the table.

Pages: every ``*.html`` under ``--html-dir`` (sorted, at most ``--limit``; real documents with
navigation and footers make the fairer test), else the test site's graph pages and shop pages,
rendered in memory. trafilatura is not a crawlfleet dependency: install it beside the bench
(``pip install trafilatura lxml-html-clean``). docs/benchmarks.md has the figures and the call.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from crawlfleet.crawler.harvest.harvest import visible_text
from crawlfleet.testsite import SiteConfig, SiteGraph
from crawlfleet.testsite.shop import PRODUCTS, render_listing, render_product

#: Passes over the pages per extractor; the fastest is reported (the others warm caches).
PASSES = 3


def site_pages() -> list[str]:
    """The test site's pages as a crawl of it sees them: graph pages, the listing, products."""
    graph = SiteGraph(
        SiteConfig(hosts=1, pages_per_host=200, hostile=False), ["127.0.0.2:80"], "127.0.0.9:80"
    )
    bodies = [graph.render_page(0, index) for index in range(graph.pages_per_host)]
    bodies += [render_listing(), *(render_product(product) for product in PRODUCTS)]
    return [body.decode("utf-8") for body in bodies]


def folder_pages(folder: Path, limit: int) -> list[str]:
    """Up to ``limit`` HTML files under ``folder``, in path order."""
    files = sorted(folder.rglob("*.html"))[:limit]
    return [path.read_text(encoding="utf-8", errors="replace") for path in files]


def measure(extract: Callable[[str], str], pages: Sequence[str]) -> tuple[float, float]:
    """CPU milliseconds per page (best pass) and the mean characters of text kept."""
    best = float("inf")
    kept = 0
    for _ in range(PASSES):
        started = time.process_time()
        texts = [extract(page) for page in pages]
        best = min(best, time.process_time() - started)
        kept = sum(map(len, texts))
    return best / len(pages) * 1e3, kept / len(pages)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    parser.add_argument("--html-dir", type=Path, help="measure these HTML files instead")
    parser.add_argument("--limit", type=int, default=200, help="at most this many files")
    args = parser.parse_args()
    try:
        import trafilatura
    except ImportError as error:
        raise SystemExit(
            f"bench.main_text needs trafilatura ({error}): pip install trafilatura lxml-html-clean"
        ) from None

    pages = folder_pages(args.html_dir, args.limit) if args.html_dir else site_pages()
    if not pages:
        raise SystemExit(f"no *.html files under {args.html_dir}")
    candidates: dict[str, Callable[[str], str]] = {
        "selectolax_visible": visible_text,
        "trafilatura": lambda page: trafilatura.extract(page) or "",
        "trafilatura_fast": lambda page: trafilatura.extract(page, fast=True) or "",
    }
    results: dict[str, Any] = {
        "pages": len(pages),
        "page_kib": round(sum(map(len, pages)) / len(pages) / 1024, 1),
        "corpus": str(args.html_dir) if args.html_dir else "test site",
    }
    for name, extract in candidates.items():
        ms, chars = measure(extract, pages)
        results[f"{name}_ms_per_page"] = round(ms, 3)
        results[f"{name}_chars_per_page"] = round(chars)
        print(f"{name}: {ms:.3f} ms CPU/page, {chars:,.0f} characters kept a page")
    visible_ms = results["selectolax_visible_ms_per_page"]
    results["trafilatura_cost_ratio"] = round(results["trafilatura_ms_per_page"] / visible_ms, 1)
    results["trafilatura_fast_cost_ratio"] = round(
        results["trafilatura_fast_ms_per_page"] / visible_ms, 1
    )
    visible_chars = max(1, results["selectolax_visible_chars_per_page"])
    results["trafilatura_kept_fraction"] = round(
        results["trafilatura_chars_per_page"] / visible_chars, 2
    )
    print(
        f"trafilatura costs {results['trafilatura_cost_ratio']}x the visible text"
        f" ({results['trafilatura_fast_cost_ratio']}x with fast=True) and keeps"
        f" {results['trafilatura_kept_fraction']:.0%} of its characters"
    )
    if args.json:
        print(json.dumps(results, sort_keys=True))


if __name__ == "__main__":
    main()
