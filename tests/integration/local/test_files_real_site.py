"""A crawl that keeps a real site's images, on Debian's PostgreSQL manual behind nginx (issue 24).

``crawlfleet run`` of the manual (tests/support/real_site.py) with ``perHost: 2`` and a files rule
by link context. The manual's images are SVG diagrams embedded with ``<object data=...>`` (it
has no ``<img>``), so the rule keeps both contexts: ``[img, object]``. The nginx serves the
tree on a mirror too, from which a few pages (those embedding the diagrams) are seeds, as a
crawl meets the same files under other URLs.

What is expected is counted from the HTML on disk, not from the crawler: every image an allowed
page references is downloaded once per URL, stored once per content (the mirror's copies are
records marked ``duplicate`` that point at the same stored key), each record names the page
that embedded it, and no page is lost to the downloads (every allowed page crawled, none twice).

Runtime: about 15 s (the ~980 allowed pages at perHost 2, one worker).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.file_crawls import (
    content_key,
    file_records,
    folder_objects,
    sha256_of,
    stored_blobs,
    summary_of,
)
from tests.support.real_site import DocSite, postgresql_manual
from tests.support.runs import crawlfleet, no_stray_runs  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_stray_runs")]

#: Where an HTML page references an image: ``<img src>`` and ``<object data>``.
_EMBEDS = re.compile(r"""<(?:img\s[^>]*?\bsrc|object\s[^>]*?\bdata)\s*=\s*["']([^"']+)["']""")


def embedded(root: Path, pages: set[str]) -> dict[str, set[str]]:
    """``{image path: pages embedding it}`` of ``pages``, read from the files on disk."""
    found: dict[str, set[str]] = {}
    for page in pages:
        for target in _EMBEDS.findall((root / page.lstrip("/")).read_text(errors="replace")):
            found.setdefault("/" + target, set()).add(page)
    return found


def _allowed(site: DocSite) -> set[str]:
    return {p for p in site.pages() if not p.startswith("/sql-") or p == "/sql-commands.html"}


def _job(site: DocSite, mirrored: list[str]) -> dict[str, Any]:
    mirror = re.escape(f"http://{site.mirror_netloc}/")
    return {
        "apiVersion": "crawlfleet.io/v1alpha1",
        "kind": "CrawlJob",
        "metadata": {"name": "manual-images"},
        "spec": {
            "seeds": [f"http://{site.netloc}/index.html"]
            + [f"http://{site.mirror_netloc}{page}" for page in mirrored],
            "scope": {
                "allowedDomains": [site.netloc, site.mirror_netloc],
                "maxDepth": 30,
                "allowPrivateNetworks": True,
                # The whole manual; of the mirror, only the seeds and their diagrams.
                "include": [
                    re.escape(f"http://{site.netloc}/"),
                    mirror + r"[^/]+\.svg$",
                    *(mirror + re.escape(page.lstrip("/")) + "$" for page in mirrored),
                ],
            },
            "concurrency": {"perHost": 2, "perWorker": 16, "hostDelaySeconds": 0},
            "files": {"rules": [{"context": ["img", "object"]}], "perHost": 2},
        },
    }


def test_the_manual_s_images_are_kept_once_by_content_and_no_page_is_lost(tmp_path: Path) -> None:
    root = postgresql_manual()
    with DocSite(root, tmp_path / "site", mirror=True) as site:
        allowed = _allowed(site)
        images = embedded(root, allowed)
        mirrored = sorted(set().union(*images.values()))  # the pages embedding a diagram
        job_file = tmp_path / "job.yaml"
        job_file.write_text(yaml.safe_dump(_job(site, mirrored)))
        out = tmp_path / "out"
        run = crawlfleet(
            "run", str(job_file), "--out", str(out), "--workers", "1", "--json", cwd=tmp_path
        )
        stdout, err = run.communicate(timeout=300)
        assert run.returncode == 0, err[-3000:]
        requested = site.requests()
        requested_on_mirror = site.requests(mirror=True)

    assert len(images) >= 3  # the manual's diagrams, counted from its HTML
    primary = {f"http://{site.netloc}{image}" for image in images}
    copies = {f"http://{site.mirror_netloc}{image}" for image in images}

    # No page lost, none twice; every image fetched once per URL.
    pages = {path for path in requested if path.endswith(".html")}
    assert pages == allowed
    assert [path for path, n in requested.items() if n > 1] == []
    assert {path: n for path, n in requested_on_mirror.items() if path != "/robots.txt"} == {
        **dict.fromkeys(mirrored, 1),
        **dict.fromkeys(images, 1),
    }
    summary = summary_of(stdout)
    assert summary["crawled"] == len(allowed) + len(mirrored) + len(primary) + len(copies)

    # Stored once by content: the bytes of each distinct image, at its content key.
    objects = folder_objects(out)
    records = file_records(objects)
    by_url = {record["url"]: record for record in records}
    assert len(by_url) == len(records)  # one record per image URL
    assert set(by_url) == primary | copies
    on_disk = {
        hashlib.sha256((root / image.lstrip("/")).read_bytes()).hexdigest() for image in images
    }
    blobs = stored_blobs(objects)
    assert sorted(blobs) == sorted(content_key(sha) for sha in on_disk)
    assert {sha256_of(path) for path in blobs.values()} == on_disk
    # Each content stored by one record; every other record of it is a recorded duplicate.
    stored_by = Counter(r["sha256"] for r in records if not r["duplicate"])
    assert stored_by == Counter(on_disk)
    duplicates = [r for r in records if r["duplicate"]]
    assert len(duplicates) == len(records) - len(on_disk)
    assert all(r["stored"] == content_key(r["sha256"]) for r in records)

    # Each record names the page that embedded it; no page record for a file.
    for image, embedding in images.items():
        assert by_url[f"http://{site.netloc}{image}"]["parent"] in {
            f"http://{site.netloc}{page}" for page in embedding
        }
        assert by_url[f"http://{site.mirror_netloc}{image}"]["parent"] in {
            f"http://{site.mirror_netloc}{page}" for page in embedding
        }
    page_urls = {
        json.loads(line)["url"]
        for path in out.glob("pages/*.jsonl")
        for line in path.read_text().splitlines()
    }
    assert page_urls.isdisjoint(primary | copies)
