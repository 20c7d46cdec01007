"""Sniffing a file's first bytes against its declared type (crawlfleet/crawler/files/sniff.py)."""

from __future__ import annotations

import struct

import pytest

from crawlfleet.crawler.files.sniff import (
    DEFAULT_MIN_BYTES,
    FAMILIES,
    HEAD_BYTES,
    UNKNOWN_MIN_BYTES,
    check,
    family_of,
    min_bytes,
    sniff,
)
from crawlfleet.testsite.files import CONTENT_TYPES, file_body


def _ftyp(major: bytes, *brands: bytes) -> bytes:
    body = b"ftyp" + major + b"\x00\x00\x00\x00" + b"".join(brands)
    return struct.pack(">I", 4 + len(body)) + body + b"\x00\x00\x00\x08free"


NGINX_403 = (
    b"<html>\r\n<head><title>403 Forbidden</title></head>\r\n<body>\r\n"
    b"<center><h1>403 Forbidden</h1></center>\r\n</body>\r\n</html>\r\n"
)


@pytest.mark.parametrize(
    ("head", "family"),
    [
        (_ftyp(b"isom", b"isom", b"iso2", b"avc1", b"mp41"), "mp4"),
        (_ftyp(b"mp42", b"mp42", b"isom"), "mp4"),
        (_ftyp(b"M4V ", b"M4V ", b"M4A ", b"mp42", b"isom"), "mp4"),
        (_ftyp(b"qt  ", b"qt  "), "mp4"),
        (struct.pack(">I", 1000) + b"moov" + b"\x00" * 32, "mp4"),
        (bytes.fromhex("1a45dfa39f4286810142f7810142f2810442f381084282847765626d"), "webm"),
        (bytes.fromhex("1a45dfa3a34282886d6174726f736b61"), "webm"),  # Matroska
        (bytes.fromhex("ffd8ffe000104a46494600010101004800480000"), "jpeg"),
        (bytes.fromhex("ffd8ffe1") + b"\x1c\x45Exif\x00\x00", "jpeg"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "png"),
        (b"GIF87a\x01\x00\x01\x00", "gif"),
        (b"GIF89a\x01\x00\x01\x00", "gif"),
        (b"%PDF-1.4\n%\xc7\xec\x8f\xa2\n", "pdf"),
        (b"\r\n\r\n%PDF-1.5\n", "pdf"),  # a header a reader still finds
        (b"PK\x03\x04\x14\x00\x06\x00[Content_Types].xml", "zip"),
        (b"PK\x05\x06" + b"\x00" * 18, "zip"),
        (bytes.fromhex("1f8b0800000000000003"), "gzip"),
        (b"<!DOCTYPE html>\n<html><head><title>404</title></head></html>", "html"),
        (NGINX_403, "html"),
        (b"\xef\xbb\xbf\n  <!doctype HTML><html><body>Access denied</body></html>", "html"),
        (b"<!-- error -->\n<html></html>", "html"),
        (b'<head><meta http-equiv="refresh" content="0;url=/login"></head>', "html"),
        (b'{"error": "not found"}', None),
        (b'<?xml version="1.0"?>\n<Error><Code>AccessDenied</Code></Error>', None),
        (b"Access Denied\n", None),
        (b"<abbr>not a page start</abbr>", None),
        (b"\x00\x00\x00\x04ftyp", None),  # a box smaller than its own header
        (b"", None),
    ],
)
def test_sniff(head: bytes, family: str | None) -> None:
    assert sniff(head) == family


@pytest.mark.parametrize("extension", ["mp4", "webm", "jpg", "png", "gif", "pdf", "zip", "gz"])
def test_the_test_sites_files_sniff_as_their_declared_type(extension: str) -> None:
    name = f"sample.{extension}"
    head = next(file_body(name, 1 << 20))[:HEAD_BYTES]
    verdict = check(head, CONTENT_TYPES[extension], f"http://files.test/{name}")
    assert verdict.ok, verdict.message
    assert verdict.sniffed == verdict.declared


def test_only_the_head_is_read() -> None:
    assert sniff(b" " * HEAD_BYTES + b"<html>") is None


@pytest.mark.parametrize(
    ("content_type", "url", "family"),
    [
        ("video/mp4", "http://h/a.webm", "mp4"),  # a specific type wins over the extension
        ("Video/MP4; codecs=avc1", "http://h/a", "mp4"),
        ("video/quicktime", "http://h/a.mov", "mp4"),
        ("video/x-matroska", "http://h/a", "webm"),
        (
            "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
            "http://h/d",
            "zip",
        ),
        ("application/octet-stream", "http://h/clip.MP4?x=1", "mp4"),
        (None, "http://h/photo.jpeg", "jpeg"),
        ("text/plain", "http://h/report.pdf", "pdf"),
        ("application/json", "http://h/a.zip", "zip"),
        ("text/html; charset=utf-8", "http://h/clip.mp4", "mp4"),  # an error page for a video
        ("text/html", "http://h/index.html", "html"),
        ("text/html", "http://h/download", "html"),
        ("image/webp", "http://h/photo.jpg", None),  # a type this module does not know
        ("application/octet-stream", "http://h/blob", None),
        (None, "http://h/blob.bin", None),
    ],
)
def test_family_of(content_type: str | None, url: str, family: str | None) -> None:
    assert family_of(content_type, url) == family


MP4 = _ftyp(b"isom", b"isom") + b"\x00" * 64


@pytest.mark.parametrize(
    ("head", "content_type", "url", "ok"),
    [
        (MP4, "video/mp4", "http://h/clip.mp4", True),
        (NGINX_403, "text/html", "http://h/clip.mp4", False),
        (NGINX_403, "video/mp4", "http://h/clip.mp4", False),
        (b"", "video/mp4", "http://h/clip.mp4", False),
        (b"Not found", "text/plain", "http://h/clip.mp4", False),
        (MP4, "application/octet-stream", "http://h/clip", True),
        (b"\x1f\x8b\x08" + b"\x00" * 64, "application/octet-stream", "http://h/clip.mp4", True),
        (NGINX_403, "application/octet-stream", "http://h/blob", False),
        (NGINX_403, "image/webp", "http://h/photo.webp", True),  # nothing known declared
        (b"plain words", "text/html", "http://h/page", True),
        (MP4, "text/html", "http://h/page", False),
        (b"\x89PNG\r\n\x1a\n" + b"\x00" * 64, "image/jpeg", "http://h/a.jpg", False),
    ],
)
def test_check(head: bytes, content_type: str, url: str, ok: bool) -> None:
    verdict = check(head, content_type, url)
    assert verdict.ok is ok, verdict
    assert verdict.message


def test_a_mismatch_names_both_types() -> None:
    verdict = check(NGINX_403, "text/html", "http://h/clip.mp4")
    assert (verdict.declared, verdict.sniffed) == ("mp4", "html")
    assert verdict.message == "declared mp4 (text/html), content is html"


def test_every_family_has_a_minimum_and_an_empty_body_is_always_too_small() -> None:
    assert set(DEFAULT_MIN_BYTES) == set(FAMILIES)
    assert min(DEFAULT_MIN_BYTES.values()) >= UNKNOWN_MIN_BYTES == 1
    assert min_bytes(None) == min_bytes("flac") == 1
    assert min_bytes("mp4") == 1024
    assert min_bytes("pdf") == 64
