"""Loopback HTTP test site for crawler integration tests and benchmarks.

``TestSite`` serves a deterministic, seeded multi-host page graph plus hostile paths and logs
every request server-side; see :mod:`crawlfleet.testsite.server` for the table of special
paths and :mod:`crawlfleet.testsite.graph` for the graph shape. ``NewsSite``
(:mod:`crawlfleet.testsite.news`) is the site whose listings and feeds change on a clock, for
revisit tests. ``FileSite`` (:mod:`crawlfleet.testsite.files`) serves large generated files from
hosts that honour ``Range``, ignore it, change files, reset mid-body or answer error pages, for
the file-download tests. ``python -m crawlfleet.testsite`` runs any of them standalone;
``crawlfleet demo`` crawls the first. It ships in the package so that the demo works offline on
a fresh machine.
"""

from crawlfleet.testsite.files import FileRequestRecord, FileSite, FileSiteConfig
from crawlfleet.testsite.graph import PageRef, SiteConfig, SiteGraph, SpecialUrls, page_path
from crawlfleet.testsite.news import ManualClock, NewsConfig, NewsSite
from crawlfleet.testsite.server import (
    RequestLog,
    RequestRecord,
    SiteServer,
    TestSite,
    build_gzip_bomb,
)

__all__ = [
    "FileRequestRecord",
    "FileSite",
    "FileSiteConfig",
    "ManualClock",
    "NewsConfig",
    "NewsSite",
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
