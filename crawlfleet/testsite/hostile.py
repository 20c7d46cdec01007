"""Bodies of the hostile-site suite: bombs in every coding, floods of links, legacy charsets, traps.

Pure functions of their arguments (cached where building costs time), kept apart from the
server, which only routes to them. None of these paths is linked from a normal page, so the
pages a correct crawler must fetch (:meth:`~crawlfleet.testsite.graph.SiteGraph.expected_pages`)
do not change: a test seeds the one it wants.
"""

from __future__ import annotations

import sys
import threading
import zlib
from typing import Final

import brotli

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

__all__ = [
    "BOMB_CODINGS",
    "CP1251_TEXT",
    "CP1251_TITLE",
    "LONG_LOCATION_CHARACTERS",
    "MANY_HEADERS",
    "MANY_HEADER_BYTES",
    "REGEX_BACKTRACK_VALUE",
    "REGEX_REFUSED_PATTERN",
    "SJIS_LINKS",
    "SJIS_TEXT",
    "SJIS_TITLE",
    "build_bomb",
    "render_cp1251_page",
    "render_link_flood",
    "render_node_flood",
    "render_regex_page",
    "render_sjis_page",
    "render_trap_page",
]

_MIB: Final = 1 << 20
#: The codings ``/bomb/<coding>`` serves besides gzip (the server's own ``build_gzip_bomb``).
BOMB_CODINGS: Final = ("deflate", "br", "zstd")
#: ``/long-location``: a redirect whose Location has this many characters.
LONG_LOCATION_CHARACTERS: Final = 100_000
#: ``/many-headers``: this many extra header fields of this many bytes each.
MANY_HEADERS: Final = 128
MANY_HEADER_BYTES: Final = 8192
#: The hrefs of ``/sjis/*`` pages as written (their path and query are Japanese).
SJIS_LINKS: Final = ("/sjis/日本語/ページ.html", "/sjis/検索?q=東京")
#: The title and the paragraph of the ``/sjis/*`` pages.
SJIS_TITLE: Final = "日本語のページ"
SJIS_TEXT: Final = "これは日本語の文章です。" * 20
#: The title and the paragraph of the ``/cp1251/*`` pages (windows-1251).
CP1251_TITLE: Final = "Русская страница"
CP1251_TEXT: Final = "Съешь же ещё этих мягких французских булок, да выпей чаю."
#: ``/regex/backtrack``'s ``<code>``: Python's backtracking re tests ``^(a+)+$`` on it in about
#: 2**64 steps (30 a's already take tens of seconds); RE2 in one pass.
REGEX_BACKTRACK_VALUE: Final = "a" * 64 + "b"
#: ``/regex/lookahead``'s ``<code>``: a pattern Python's re takes and RE2 refuses.
REGEX_REFUSED_PATTERN: Final = "(?=a)a"

_lock = threading.Lock()
_bombs: dict[tuple[str, int], bytes] = {}


def build_bomb(coding: str, inflated_bytes: int) -> bytes:
    """A body in ``coding`` that decodes to ``inflated_bytes`` zeros; built once per size."""
    if coding not in BOMB_CODINGS:
        raise ValueError(f"no {coding!r} bomb")
    if inflated_bytes <= 0 or inflated_bytes % _MIB:
        raise ValueError("inflated_bytes must be a positive multiple of 1 MiB")
    with _lock:
        cached = _bombs.get((coding, inflated_bytes))
        if cached is None:
            cached = _bombs[coding, inflated_bytes] = _compress_zeros(coding, inflated_bytes)
        return cached


def _compress_zeros(coding: str, inflated_bytes: int) -> bytes:
    """Streamed, one MiB of zeros at a time: a GiB is never in memory."""
    zeros = bytes(_MIB)
    pieces: list[bytes]
    if coding == "deflate":
        return _deflate_zeros(inflated_bytes)
    if coding == "br":
        compressor = brotli.Compressor(quality=5)
        pieces = [compressor.process(zeros) for _ in range(inflated_bytes // _MIB)]
        pieces.append(compressor.finish())
    else:
        packer = zstd.ZstdCompressor(level=3)
        pieces = [packer.compress(zeros) for _ in range(inflated_bytes // _MIB)]
        pieces.append(packer.flush())
    return b"".join(pieces)


def _deflate_zeros(inflated_bytes: int) -> bytes:
    """zlib-wrapped deflate of zeros in milliseconds, as ``build_gzip_bomb`` builds gzip: one
    full-flushed raw block repeated, and the Adler-32 of n zeros, which is (n mod 65521) << 16 | 1.
    """
    zeros = bytes(_MIB)
    raw = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS, 9)
    first = raw.compress(zeros) + raw.flush(zlib.Z_FULL_FLUSH)
    block = raw.compress(zeros) + raw.flush(zlib.Z_FULL_FLUSH)
    final = raw.flush(zlib.Z_FINISH)
    adler = ((inflated_bytes % 65521) << 16) | 1
    blocks = inflated_bytes // _MIB
    return b"\x78\xda" + first + block * (blocks - 1) + final + adler.to_bytes(4, "big")


def render_link_flood(count: int) -> bytes:
    """A page with ``count`` distinct in-site links (``/links/to/<i>``, which answer 404)."""
    head = b"<!DOCTYPE html><html><head><title>Link flood</title></head><body>\n"
    links = b"".join(b'<a href="/links/to/%d">%d</a>\n' % (i, i) for i in range(count))
    return head + links + b"</body></html>\n"


def render_node_flood(count: int) -> bytes:
    """A page of ``count`` empty elements: a selector whose cost grows with the nodes squared
    (``//*[count(following::*) > 0]``) takes seconds on 20,000 of them."""
    head = b"<!DOCTYPE html><html><head><title>Node flood</title></head><body>\n"
    return head + b"<i></i>" * count + b"</body></html>\n"


def render_regex_page(value: str) -> bytes:
    """A page whose one ``<code>`` holds ``value``, for the EXSLT ``re:`` functions of XPath."""
    return (
        "<!DOCTYPE html><html><head><title>Regular expressions</title></head><body>\n"
        f"<code>{value}</code></body></html>\n"
    ).encode()


def render_sjis_page(*, declare_in_meta: bool) -> bytes:
    """A Shift_JIS page linking :data:`SJIS_LINKS`; its charset in a ``<meta>`` if asked
    (the server then sends no charset), else only in the header the server sends."""
    meta = '<meta charset="shift_jis">' if declare_in_meta else ""
    links = "".join(f'<a href="{href}">リンク</a>\n' for href in SJIS_LINKS)
    text = (
        f"<!DOCTYPE html><html><head>{meta}<title>{SJIS_TITLE}</title></head><body>\n"
        f"<p>{SJIS_TEXT}</p>\n{links}</body></html>\n"
    )
    return text.encode("shift_jis")


def render_cp1251_page(*, declare_in_meta: bool) -> bytes:
    """A windows-1251 page (Cyrillic); its charset in an http-equiv ``<meta>`` if asked (the
    server then sends no charset), else only in the header the server sends."""
    meta = (
        '<meta http-equiv="Content-Type" content="text/html; charset=windows-1251">'
        if declare_in_meta
        else ""
    )
    text = (
        f"<!DOCTYPE html><html><head>{meta}<title>{CP1251_TITLE}</title></head><body>\n"
        f'<h1 class="name">{CP1251_TITLE}</h1>\n<p>{CP1251_TEXT}</p>\n'
        '<script>var hidden = "не видно";</script></body></html>\n'
    )
    return text.encode("windows-1251")


def render_trap_page(path: str) -> bytes:
    """A page under ``/trap/`` whose links lead ever deeper: ``same/`` (the same segment again
    and again, the classic relative-link trap) and ``next-<n>/`` (new segments, no repeats)."""
    depth = path.count("/")
    body = (
        f"<!DOCTYPE html><html><head><title>Trap at depth {depth}</title></head><body>\n"
        f'<p>{"filler " * 20}</p>\n<a href="same/">again</a>\n'
        f'<a href="next-{depth}/">deeper</a>\n</body></html>\n'
    )
    return body.encode()
