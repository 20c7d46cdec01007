"""Loopback HTTP test site for crawler integration tests and benchmarks.

``TestSite`` serves a deterministic, seeded multi-host page graph plus hostile paths and logs
every request server-side; see :mod:`tests.site.server` for the table of special paths and
:mod:`tests.site.graph` for the graph shape.  ``python -m tests.site`` runs it standalone.
"""

from tests.site.graph import PageRef, SiteConfig, SiteGraph, SpecialUrls, page_path
from tests.site.server import (
    RequestLog,
    RequestRecord,
    SiteServer,
    TestSite,
    build_gzip_bomb,
)

__all__ = [
    "PageRef",
    "RequestLog",
    "RequestRecord",
    "SiteConfig",
    "SiteGraph",
    "SiteServer",
    "SpecialUrls",
    "TestSite",
    "build_gzip_bomb",
    "page_path",
]
