"""Tracked URLs shaped like a real crawl's, for measuring what revisit state costs.

URL paths follow the shapes of well-known news and reference sites (section pages, dated
article slugs, numeric ids, feeds), with slugs of 3 to 12 words; validators follow what
common servers send: nginx (``"<mtime hex>-<size hex>"``) and Apache (``"<size>-<mtime>"``)
strong ETags, S3/CDN MD5 ETags (32 hex digits), framework weak ETags (``W/"<size>-<27
base64>"``), Last-Modified on most, a 16-hex-digit body digest and a capture time on every
URL, as the worker reports them. Seeded, so a figure measured twice is the same figure.
"""

from __future__ import annotations

import base64
import random
from collections.abc import Iterator
from datetime import UTC, datetime
from email.utils import format_datetime

from crawlfleet.frontier import Validators

__all__ = ["tracked_urls"]

_WORDS = tuple(
    [
        "council",
        "budget",
        "vote",
        "energy",
        "prices",
        "winter",
        "storm",
        "warning",
        "election",
        "results",
        "court",
        "ruling",
        "market",
        "shares",
        "fall",
        "rise",
        "central",
        "bank",
        "rates",
        "team",
        "wins",
        "final",
        "league",
        "transfer",
        "deal",
        "minister",
        "resigns",
        "after",
        "report",
        "climate",
        "summit",
        "agreement",
        "health",
        "service",
        "strike",
        "talks",
        "police",
        "investigate",
        "crash",
        "city",
        "centre",
        "new",
        "homes",
        "plan",
        "school",
        "funding",
        "review",
    ]
)
_SECTIONS = ("world", "politics", "business", "sport", "science", "culture", "uk", "europe")


def _slug(rng: random.Random) -> str:
    return "-".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 12)))


def _path(rng: random.Random, n: int) -> str:
    section = rng.choice(_SECTIONS)
    shape = rng.random()
    if shape < 0.15:  # section and listing pages, feeds
        return rng.choice(
            (
                f"/{section}",
                f"/{section}/",
                f"/{section}/rss.xml",
                "/",
                f"/{section}?page={n % 9 + 2}",
            )
        )
    if shape < 0.40:  # /section/yyyy/mon/dd/slug
        month = rng.choice(("oct", "nov", "dec"))
        return f"/{section}/2026/{month}/{rng.randint(1, 28):02d}/{_slug(rng)}"
    if shape < 0.60:  # /yyyy/mm/dd/section/slug.html
        return f"/2026/{rng.randint(10, 12)}/{rng.randint(1, 28):02d}/{section}/{_slug(rng)}.html"
    if shape < 0.80:  # /news/section-12345678
        return f"/news/{section}-{rng.randint(10**7, 10**8 - 1)}"
    return f"/{section}/{_slug(rng)}-idUS{rng.randint(10**9, 10**10 - 1)}"


def _validators(rng: random.Random) -> Validators:
    mtime = rng.randint(1_700_000_000, 1_790_000_000)
    size = rng.randint(2_000, 400_000)
    kind = rng.random()
    if kind < 0.35:
        etag: str | None = f'"{mtime:x}-{size:x}"'  # nginx
    elif kind < 0.55:
        etag = f'"{size:x}-{mtime * 1_000_000 + rng.randint(0, 999_999):x}"'  # Apache
    elif kind < 0.70:
        etag = f'"{rng.getrandbits(128):032x}"'  # S3, CDNs: an MD5
    elif kind < 0.85:
        raw = base64.b64encode(rng.getrandbits(160).to_bytes(20, "big")).decode()[:27]
        etag = f'W/"{size:x}-{raw}"'  # Express and other frameworks
    else:
        etag = None
    modified = (
        format_datetime(datetime.fromtimestamp(mtime, UTC), usegmt=True)
        if rng.random() < 0.8
        else None
    )
    digest = f"{rng.getrandbits(64):016x}"
    captured = rng.randint(1_760_000_000, 1_790_000_000)
    return Validators(etag=etag, last_modified=modified, digest=digest, captured_at=captured)


def tracked_urls(count: int, hosts: int, seed: int = 23) -> Iterator[tuple[str, Validators]]:
    """``count`` distinct URLs over ``hosts`` hosts, each with its validators."""
    rng = random.Random(seed)
    seen: set[str] = set()
    n = 0
    while len(seen) < count:
        n += 1
        url = f"https://www.news{n % hosts}.example{_path(rng, n)}"
        if url not in seen:
            seen.add(url)
            yield url, _validators(rng)
