"""A Scrapy request as a frontier task, and back.

A queued task is four fields (``attempts, depth, url, parent``; ``frontier/parents.py``), and
what a Scrapy request carries besides its URL (callback and errback names, meta, cb_kwargs,
priority, method, headers, body, cookies, flags, a Request subclass) rides in the parent as a
*mark*, as the sitemap marks do: ``<parent URL>#scrapy=<JSON>``, the JSON being what
``Request.to_dict`` gives, less the URL and every value equal to a plain ``Request``'s.

Why the parent: it travels with the task through every script (enqueue, claim, requeue, the
dead letters) already, in the same call, so the request needs no Lua change per field, no
second key to write beside the task and no second round trip to read it back; a payload hash
would cost a write and a read per request, and a key to clean up when the task is acked or
dead-lettered. The price is the frontier's compaction: tasks of a run with one parent store it
once, and a request with extras has a parent of its own. A plain GET to the spider's default
callback with nothing else set (most links a CrawlSpider or ``response.follow`` makes with no
meta) has no mark at all: it is exactly as compact as a crawlfleet link, and a seed or a link
queued by ``crawlfleet enqueue`` is such a request.

The URL the frontier dedups and queues is the canonical one (``crawlfleet/urls.py``); when
Scrapy's URL differs (a fragment, another spelling), the original goes in the payload and is what
Scrapy fetches. Bytes (a body, header values) are kept as ``{"$b": base64}``; a meta or cb_kwargs
value JSON cannot hold (a Selector, a Response) makes the request unserializable: it is refused,
counted as dropped (``scrapy_unserializable``) and logged, never silently lost. Meta keys Scrapy
sets per download (``download_slot``, ``retry_times``, ``redirect_urls``, ``depth``: the task's
own depth field carries it) are not carried.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from crawlfleet.urls import CanonicalURL, try_canonicalize

if TYPE_CHECKING:
    from scrapy import Request, Spider

__all__ = [
    "LEASE_KEY",
    "MARK",
    "PARENT_KEY",
    "Unserializable",
    "decode_request",
    "encode_request",
]

MARK: Final = "#scrapy="
#: Meta key of a claimed request: its lease id (copied by Scrapy to its retries and redirects,
#: which stay within the lease).
LEASE_KEY: Final = "_crawlfleet_lease"
#: Meta key the spider middleware puts on a callback's request: the lease it came from.
PARENT_KEY: Final = "_crawlfleet_parent"
_BYTES: Final = "$b"

#: Per-download meta keys: Scrapy sets them again on the next download.
_TRANSIENT_META: Final = frozenset(
    {
        LEASE_KEY,
        PARENT_KEY,
        "depth",
        "download_slot",
        "download_latency",
        "retry_times",
        "redirect_times",
        "redirect_ttl",
        "redirect_urls",
        "redirect_reasons",
        "_scheduler_slot",
        "download_maxsize",
    }
)
_PLAIN: Final[Mapping[str, object]] = {
    "callback": None,
    "errback": None,
    "headers": {},
    "method": "GET",
    "body": b"",
    "cookies": {},
    "meta": {},
    "encoding": "utf-8",
    "priority": 0,
    "dont_filter": False,
    "flags": [],
    "cb_kwargs": {},
}


class Unserializable(ValueError):
    """A request the frontier cannot carry (a callback that is not a spider method, a value
    JSON cannot hold); its message says what."""


def encode_request(
    request: Request, spider: Spider, found_on: str
) -> tuple[CanonicalURL, str] | None:
    """The task's URL and parent for ``request`` found on ``found_on`` (a page URL or "");
    None when the URL is not one the frontier can queue. Raises :class:`Unserializable`."""
    url = try_canonicalize(request.url)
    if url is None:
        return None
    try:
        data = request.to_dict(spider=spider)
    except ValueError as exc:
        raise Unserializable(f"{request.url}: {exc}") from exc
    extras: dict[str, Any] = {}
    for key, value in data.items():
        if key == "url":
            continue
        if key == "meta":
            value = {k: v for k, v in value.items() if k not in _TRANSIENT_META}
        if key == "headers":
            value = {_text(k): [_text(v) for v in vs] for k, vs in value.items()}
        if key == "dont_filter":
            continue  # decided at admission (the frontier's Bloom filter), not after a claim
        if key in _PLAIN and value == _PLAIN[key]:
            continue
        extras[key] = value
    if request.url != url:
        extras["url"] = request.url
    if not extras:
        return url, found_on
    try:
        payload = json.dumps(extras, default=_jsonable, separators=(",", ":"), sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise Unserializable(f"{request.url}: {exc}") from exc
    return url, f"{found_on}{MARK}{payload}"


def decode_request(url: str, parent: str, spider: Spider, **meta: object) -> Request:
    """The Scrapy request of a claimed task (its ``url`` and ``parent``), ``meta`` added."""
    from scrapy.utils.request import request_from_dict

    at = parent.find(MARK)
    data: dict[str, Any] = {"url": url}
    if at >= 0:
        data.update(json.loads(parent[at + len(MARK) :], object_hook=_unjsonable))
    data["meta"] = {**data.get("meta", {}), **meta}
    return request_from_dict(data, spider=spider)


def found_on(parent: str) -> str:
    """The page a task was found on, its mark removed."""
    return parent.partition("#")[0]


def _text(value: str | bytes) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else value


def _jsonable(value: object) -> object:
    if isinstance(value, bytes):
        return {_BYTES: base64.b64encode(value).decode("ascii")}
    if isinstance(value, tuple | set | frozenset):
        return list(value)
    from itemadapter import ItemAdapter

    if ItemAdapter.is_item(value):
        return ItemAdapter(value).asdict()
    raise TypeError(f"a {type(value).__name__} cannot travel with a request (not JSON)")


def _unjsonable(value: dict[str, Any]) -> object:
    if len(value) == 1 and _BYTES in value:
        return base64.b64decode(value[_BYTES])
    return value
