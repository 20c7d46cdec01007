"""Durable crawl output (DESIGN §8): the stores behind destinations, manifests, readers.

A worker's files are made durable in the destination before the leases of their records are
acked (``crawlfleet.crawler.worker.sinks``); this package holds what every side shares: the store of
each kind (a folder with fsync, an S3-compatible bucket), the manifest written at completion,
and the readers behind ``crawlfleet output``. See docs/output.md. Parsing
``output.destination`` is the model's vocabulary, so it lives on the ground floor, in
``crawlfleet.destinations``.

Names are imported on first use: nothing here should load obstore (or anything heavy) into a
process that does not need it.
"""

from typing import TYPE_CHECKING

from crawlfleet._exports import lazy_exports

if TYPE_CHECKING:
    from crawlfleet.output.manifest import finish_output
    from crawlfleet.output.reader import Verification, item_records, page_records, verify
    from crawlfleet.output.stores import (
        BucketStore,
        FolderStore,
        OutputStore,
        StoredObject,
        checked_store,
        open_store,
    )

__all__ = [
    "BucketStore",
    "FolderStore",
    "OutputStore",
    "StoredObject",
    "Verification",
    "checked_store",
    "finish_output",
    "item_records",
    "open_store",
    "page_records",
    "verify",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "BucketStore": "crawlfleet.output.stores",
        "FolderStore": "crawlfleet.output.stores",
        "OutputStore": "crawlfleet.output.stores",
        "StoredObject": "crawlfleet.output.stores",
        "Verification": "crawlfleet.output.reader",
        "checked_store": "crawlfleet.output.stores",
        "finish_output": "crawlfleet.output.manifest",
        "item_records": "crawlfleet.output.reader",
        "open_store": "crawlfleet.output.stores",
        "page_records": "crawlfleet.output.reader",
        "verify": "crawlfleet.output.reader",
    },
)
