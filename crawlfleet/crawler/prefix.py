"""A URL's ``scheme://netloc`` prefix, for answers that depend on nothing else.

Several checks run before every request and look only at a URL's scheme, host and port: the
SSR guard's target, the robots.txt origin. A crawl asks them about thousands of URLs of a
few hosts, and ``urlsplit`` plus its ``hostname`` and ``port`` properties cost several
microseconds each time. Their callers cache the answer per prefix instead, which is right
only where ``urlsplit`` would read that prefix exactly as it reads the whole URL; so only
plain prefixes (printable ASCII, no space, backslash, ``?`` or ``#``, followed by a ``/``)
are offered, and every other URL keeps the full parse.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Final, TypeVar

__all__ = ["authority_prefix", "per_authority"]

_T = TypeVar("_T")

# Characters that make urlsplit look past, or rewrite, a URL's scheme://netloc.
_SPECIAL: Final = frozenset(" \\?#")


def authority_prefix(url: str) -> str | None:
    """``scheme://netloc`` when it stands for ``url``'s own, for answers per host; else None."""
    parts = url.split("/", 3)
    if len(parts) != 4 or parts[1]:
        return None
    prefix = f"{parts[0]}//{parts[2]}"
    if prefix.isascii() and prefix.isprintable() and _SPECIAL.isdisjoint(prefix):
        return prefix
    return None


def per_authority(
    compute: Callable[[str], _T], *, errors: type[Exception], maxsize: int
) -> Callable[[str], _T]:
    """``compute(url)`` answered from a cache of ``compute(prefix)`` where a prefix stands in.

    ``compute`` must depend on the URL's scheme and netloc only. When the prefix raises one
    of ``errors``, the whole URL is computed again, so that the error names the URL.
    """
    cached = functools.lru_cache(maxsize=maxsize)(compute)

    def answer(url: str) -> _T:
        prefix = authority_prefix(url)
        if prefix is not None:
            with contextlib.suppress(errors):
                return cached(prefix)
        return compute(url)

    return answer
