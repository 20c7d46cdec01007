"""CrawlJob specs for tests, in the user's words: settings objects are built only from a spec.

A test says what it changes the way a CrawlJob says it (``{"concurrency": {"perHost": 1}}``),
and every settings object (``FrontierSettings``, ``FetchSettings``, the robots policy, the
writer) is then built with its ``from_spec``, as the workers and the operator build it. So a
test cannot run on a value the model would refuse, and the defaults are the model's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from crawlfleet.crawljob import CrawlJobSpec
from crawlfleet.frontier import BloomBackend, FrontierSettings

__all__ = ["frontier_settings", "job_spec", "merged"]

Changes = Mapping[str, Any]


def merged(base: Changes, changes: Changes) -> dict[str, Any]:
    """``base`` with ``changes`` applied, sections merged key by key (one level deep)."""
    out: dict[str, Any] = dict(base)
    for key, value in changes.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


def job_spec(
    changes: Changes | None = None, *, seeds: Sequence[str] = ("http://a.test/",)
) -> CrawlJobSpec:
    """A validated spec: the model's defaults with ``changes`` (camelCase sections)."""
    return CrawlJobSpec.from_mapping(merged({"seeds": list(seeds)}, changes or {}))


def frontier_settings(
    job_id: str, changes: Changes | None = None, *, bloom_backend: BloomBackend | None = None
) -> FrontierSettings:
    """The frontier's settings for a spec with ``changes``, as a worker builds them."""
    return FrontierSettings.from_spec(job_id, job_spec(changes), bloom_backend=bloom_backend)
