"""File type sniffing: which sniffer checks a download's magic bytes, one run.

    python -m bench.sniffing [--quick] [--json]

Why: a file download is verified before it counts (issue 24): its first bytes must show the
family its response declared (crawlfleet/crawler/files/sniff.py). The candidates:

- ``crawlfleet``: ``sniff.sniff``, a table of magic numbers for the nine families;
- ``puremagic``: puremagic (pure Python, a JSON database of signatures plus scanners);
- ``filetype``: filetype (pure Python, one matcher function per type).

The two libraries are installed for the benchmark only (``pip install puremagic filetype``;
puremagic 2.x asks for Python ≥ 3.12, ``--ignore-requires-python`` installs it on 3.11) and
reported as missing when they are not. Each sees the same first 4 KiB of real-looking files:
the test site's headers (crawlfleet/testsite/files.py), MP4s with the ftyp brands isom, mp42,
M4V, dash, QuickTime and 3GP ones, a QuickTime file that starts with its movie box, WebM and
Matroska, JPEG (JFIF, Exif, bare), PNG, both GIFs, PDFs (one after blank lines), ZIP (a local
header, a DOCX, an empty archive), gzip; HTML error pages as servers send them (nginx,
Cloudflare, a BOM and blank lines, a comment first, a meta refresh); and what is none of them
(JSON and S3 XML errors, plain text, random bytes, nothing). A library's answer (extension or
MIME type) is mapped to a family generously (m4v, mov, 3gp → mp4; mkv → webm; docx → zip).
Reported: right answers of the cases, the wrong ones, and microseconds per call (mean over
the cases, best of three rounds). The table was written with these cases in view, so its
score is the bar a library must reach, not proof that the table is better in the wild.
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import random
import struct
import time
from collections.abc import Callable
from typing import Any

from crawlfleet.crawler.files.sniff import HEAD_BYTES, sniff
from crawlfleet.testsite.files import file_body

Sniffer = Callable[[bytes], str | None]

_LIBRARY_FAMILIES = {
    **dict.fromkeys(("mp4", "m4v", "m4a", "mov", "3gp", "3g2", "f4v", "qt", "dash"), "mp4"),
    **dict.fromkeys(("webm", "mkv", "mka", "mk3d"), "webm"),
    **dict.fromkeys(("jpg", "jpeg", "jfif", "jpe"), "jpeg"),
    **dict.fromkeys(("zip", "docx", "xlsx", "pptx", "jar", "epub", "odt"), "zip"),
    **dict.fromkeys(("gz", "tgz", "gzip"), "gzip"),
    **dict.fromkeys(("html", "htm", "xhtml"), "html"),
    "png": "png",
    "gif": "gif",
    "pdf": "pdf",
}
_MIME_WORDS = (
    ("html", "html"),
    ("mp4", "mp4"),
    ("quicktime", "mp4"),
    ("3gpp", "mp4"),
    ("webm", "webm"),
    ("matroska", "webm"),
    ("jpeg", "jpeg"),
    ("png", "png"),
    ("gif", "gif"),
    ("pdf", "pdf"),
    ("zip", "zip"),
    ("gzip", "gzip"),
)


def _family(extension: str | None, mime: str | None) -> str | None:
    """A library's answer as one of the nine families (None: none of them)."""
    by_extension = _LIBRARY_FAMILIES.get((extension or "").lower().lstrip("."))
    if by_extension is not None:
        return by_extension
    lowered = (mime or "").lower()
    return next((family for word, family in _MIME_WORDS if word in lowered), None)


def _ftyp(major: bytes, *brands: bytes) -> bytes:
    body = b"ftyp" + major + b"\x00\x00\x00\x00" + b"".join(brands)
    return struct.pack(">I", 4 + len(body)) + body + b"\x00\x00\x00\x08free"


def cases() -> list[tuple[str, bytes, str | None]]:
    """(label, first bytes, expected family) of every case, each padded to 4 KiB as a real
    file's head would be (error pages are short: they stay whole)."""
    rng = random.Random(24)

    def pad(head: bytes) -> bytes:
        return head + rng.randbytes(HEAD_BYTES - len(head))

    def site(name: str) -> bytes:
        return next(file_body(name, 1 << 20))[:HEAD_BYTES]

    webm_ebml = "1a45dfa39f4286810142f7810142f2810442f381084282847765626d"
    mkv_ebml = "1a45dfa3a34286810142f7810142f2810442f381084282886d6174726f736b61"
    return [
        ("mp4, the site's (isom)", site("a.mp4"), "mp4"),
        ("mp4, brand mp42", pad(_ftyp(b"mp42", b"mp42", b"isom")), "mp4"),
        ("m4v, brand M4V", pad(_ftyp(b"M4V ", b"M4V ", b"M4A ", b"mp42", b"isom")), "mp4"),
        ("mp4, brand dash", pad(_ftyp(b"dash", b"iso6", b"avc1", b"mp41")), "mp4"),
        ("mov, brand qt", pad(_ftyp(b"qt  ", b"qt  ")), "mp4"),
        ("3gp", pad(_ftyp(b"3gp4", b"3gp4", b"isom")), "mp4"),
        ("mov, moov first", pad(struct.pack(">I", 1000) + b"moov"), "mp4"),
        ("webm, the site's", site("a.webm"), "webm"),
        ("webm", pad(bytes.fromhex(webm_ebml)), "webm"),
        ("mkv", pad(bytes.fromhex(mkv_ebml)), "webm"),
        ("jpeg, the site's (JFIF)", site("a.jpg"), "jpeg"),
        ("jpeg, Exif", pad(bytes.fromhex("ffd8ffe1") + b"\x1c\x45Exif\x00\x00"), "jpeg"),
        ("jpeg, bare DQT", pad(bytes.fromhex("ffd8ffdb0043")), "jpeg"),
        ("png, the site's", site("a.png"), "png"),
        ("gif89a, the site's", site("a.gif"), "gif"),
        ("gif87a", pad(b"GIF87a\x01\x00\x01\x00"), "gif"),
        ("pdf, the site's", site("a.pdf"), "pdf"),
        ("pdf 1.4", pad(b"%PDF-1.4\n%\xc7\xec\x8f\xa2\n"), "pdf"),
        ("pdf after blank lines", pad(b"\r\n\r\n%PDF-1.5\n"), "pdf"),
        ("zip, the site's", site("a.zip"), "zip"),
        ("docx", pad(b"PK\x03\x04\x14\x00\x06\x00\x08\x00" + bytes(20) + b"[Content_Types]"),
         "zip"),
        ("zip, empty", b"PK\x05\x06" + b"\x00" * 18, "zip"),
        ("gzip, the site's", site("a.gz"), "gzip"),
        (
            "html5 404",
            b"<!DOCTYPE html>\n<html lang=\"en\"><head><title>404 Not Found</title></head>"
            b"<body>Not found</body></html>",
            "html",
        ),
        (
            "html, nginx 403",
            b"<html>\r\n<head><title>403 Forbidden</title></head>\r\n<body>\r\n<center><h1>"
            b"403 Forbidden</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n",
            "html",
        ),
        ("html, BOM and blanks", b"\xef\xbb\xbf\n  <!doctype HTML><html><body>No</body></html>",
         "html"),
        ("html, comment first", b"<!-- error -->\n<html><head></head><body>oops</body></html>",
         "html"),
        (
            "html, Cloudflare",
            b"<!DOCTYPE html>\n<!--[if lt IE 7]> <html class=\"no-js ie6 oldie\" lang=\"en-US\">"
            b" <![endif]-->\n<head><title>Attention Required! | Cloudflare</title>",
            "html",
        ),
        ("html, meta refresh", b'<head><meta http-equiv="refresh" content="0;url=/login"></head>',
         "html"),
        ("json error", b'{"error": "not found", "status": 404}', None),
        (
            "S3 XML error",
            b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code>'
            b"<Message>Access Denied</Message></Error>",
            None,
        ),
        ("plain text", b"Access Denied\n", None),
        ("random bytes", rng.randbytes(HEAD_BYTES), None),
        ("empty", b"", None),
    ]  # fmt: skip


def puremagic_family(head: bytes) -> str | None:
    puremagic = importlib.import_module("puremagic")
    try:
        matches = puremagic.magic_string(head)
    except (puremagic.PureError, ValueError):  # "could not identify", "input was empty"
        return None
    if not matches:
        return None
    return _family(matches[0].extension, matches[0].mime_type)


def filetype_family(head: bytes) -> str | None:
    kind = importlib.import_module("filetype").guess(head)
    return None if kind is None else _family(kind.extension, kind.mime)


def measure(
    sniffer: Sniffer, table: list[tuple[str, bytes, str | None]], rounds: int
) -> dict[str, Any]:
    wrong = [f"{label}: {sniffer(head)}" for label, head, want in table if sniffer(head) != want]
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(rounds):
            for _, head, _ in table:
                sniffer(head)
        best = min(best, (time.perf_counter() - started) / (rounds * len(table)))
    return {"right": len(table) - len(wrong), "cases": len(table), "us_per_call": best * 1e6,
            "wrong": wrong}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sniffing")
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--json", action="store_true", help="print the results as JSON last")
    args = parser.parse_args()
    sniffers: dict[str, Sniffer] = {"crawlfleet": sniff}
    for name, function in (("puremagic", puremagic_family), ("filetype", filetype_family)):
        try:
            module = importlib.import_module(name)
        except ImportError:
            print(f"{name} is not installed (pip install {name}): left out")
            continue
        sniffers[f"{name} {getattr(module, '__version__', '?')}"] = function
    table = cases()
    results: dict[str, Any] = {"python": platform.python_version(), "sniffers": {}}
    for name, sniffer in sniffers.items():
        rounds = 20 if args.quick else 200
        figures = measure(sniffer, table, rounds if "puremagic" in name else rounds * 10)
        results["sniffers"][name] = figures
        print(
            f"{name}: {figures['right']}/{figures['cases']} right, "
            f"{figures['us_per_call']:.1f} µs a call; wrong: {', '.join(figures['wrong']) or '-'}"
        )
    if args.json:
        print(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
