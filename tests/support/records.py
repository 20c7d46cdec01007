"""Page records as a worker writes them, for tests of the output: one builder, any field."""

from __future__ import annotations

import dataclasses
import hashlib
import uuid

from crawlfleet.crawler.worker.sinks import PageRecord

__all__ = ["page_record"]


def page_record(url: str, body: bytes, **changes: object) -> PageRecord:
    """A successful fetch of ``url`` that returned ``body``, with a fresh ``fetch_id``."""
    base = PageRecord(
        url=url,
        final_url=url,
        status=200,
        depth=1,
        parent="https://example.com/",
        fetched_at=1_700_000_000.5,
        content_type="text/html; charset=utf-8",
        length=len(body),
        sha256=hashlib.sha256(body).hexdigest(),
        title="Hello — ünïcode",
        outlinks=3,
        failure_class=None,
        attempt=1,
        worker="worker-1",
        fetch_id=uuid.uuid4().hex,
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]
