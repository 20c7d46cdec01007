"""A page's character encoding, for reading its links: the BOM, then the header, then ``<meta>``.

Links must be read in the page's own encoding: a Shift_JIS or windows-1251 page read as UTF-8
yields replacement characters, and its non-ASCII links become URLs that exist nowhere. The
order is the HTML standard's, as Scrapy reads it with w3lib: a byte order mark wins, then the
``charset`` of ``Content-Type``, then a ``<meta charset>`` or ``http-equiv`` in the first
4 KiB, and UTF-8 when nothing says (w3lib's ``html_to_unicode``; its names follow the WHATWG
encoding table, so ``iso-8859-1`` reads as ``cp1252`` and ``shift_jis`` as ``cp932``, as
browsers read them).

UTF-8 keeps its fast path: the bytes go to the parser as they are (lexbor reads bytes as
UTF-8) and nothing is decoded in Python. Only a page in another encoding is decoded to ``str``
first, and its encoding is handed on to the link resolver, which percent-encodes a query in it
(as browsers do; a path is always UTF-8).
"""

from __future__ import annotations

import functools
from typing import Final

from w3lib.encoding import html_body_declared_encoding, html_to_unicode, http_content_type_encoding

__all__ = ["UTF8", "decode_html"]

UTF8: Final = "utf-8"
# Byte order marks of the encodings a BOM may announce (UTF-8's is stripped by w3lib too).
_BOMS: Final = (b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff")


@functools.lru_cache(maxsize=256)
def _header_encoding(content_type: str | None) -> str | None:
    """The ``charset`` of a Content-Type, by its WHATWG name; pages repeat a few headers."""
    return http_content_type_encoding(content_type) if content_type else None


def decode_html(body: bytes, content_type: str | None) -> tuple[bytes | str, str]:
    """``body`` ready for the link parser, and its encoding.

    UTF-8 (declared, or undeclared and without a BOM) comes back as the same bytes; any other
    encoding as ``str`` decoded with it (undecodable bytes replaced, never an error).
    """
    if not body.startswith(_BOMS):
        encoding = _header_encoding(content_type)
        if encoding is None:
            encoding = html_body_declared_encoding(body) or UTF8
        if encoding == UTF8:
            return body, UTF8
    encoding, text = html_to_unicode(content_type, body)
    return text, encoding
