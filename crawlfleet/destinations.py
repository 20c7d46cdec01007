"""Where a crawl's output goes: ``output.destination`` parsed once, for the model and the sinks.

Three spellings, one meaning each:

* a path (``crawl-output/books``, ``/mnt/crawls/books``) or a ``file://`` URL
  (``file:///mnt/crawls/books``): a folder on the machine that writes it;
* ``s3://bucket/prefix/``: objects under ``prefix`` in ``bucket`` of any S3-compatible store
  (the endpoint, region and credentials are ``output.s3``'s, never the URL's).

Anything else that looks like a URL (``gs://``, ``https://``, ``ftp:``) is refused rather than
taken for a folder of that name, and so is a URL that carries credentials: the spec is
readable by everyone who can read the CrawlJob, so keys belong in a Secret.

The messages here are the model's own (``crawlfleet.crawljob`` raises them with the field's
path). The module is on the ground floor, beside ``hosts`` and ``urls``: it imports nothing of
crawlfleet's but ``crawlfleet.errors``, so the model, the sinks and the CLI can all use it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Final, Literal
from urllib.parse import unquote, urlsplit

from crawlfleet.errors import ConfigError

__all__ = [
    "DESTINATION_CREDENTIALS",
    "DESTINATION_MEANING",
    "LAYOUT_FILES",
    "LAYOUT_FOLDERS",
    "MAX_DESTINATION_LENGTH",
    "Destination",
    "InvalidDestination",
    "destination_flag",
    "parse_destination",
]

MAX_DESTINATION_LENGTH: Final = 1024
#: The layout under every destination (docs/output.md): nothing else there is the crawl's.
LAYOUT_FOLDERS: Final = ("pages", "items", "warc")
LAYOUT_FILES: Final = ("dead-letters.jsonl", "manifest.json")
DESTINATION_MEANING: Final = "must be a folder path, a file:// URL or an s3://bucket/prefix/ URL"
DESTINATION_CREDENTIALS: Final = (
    "must not hold a user name, password or key: the spec is readable by anyone who can read"
    " the CrawlJob; give credentials in output.s3.secretRef (cluster) or the AWS environment"
    " (crawlfleet run)"
)
# AWS's bucket naming rules, which every S3-compatible store accepts: 3-63 characters of
# lower-case letters, digits, dots and hyphens, starting and ending with a letter or digit.
_BUCKET: Final = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_SCHEME: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")


class InvalidDestination(ValueError):
    """``output.destination`` cannot be used; the message is a sentence for the user."""


@dataclass(frozen=True, slots=True)
class Destination:
    """A parsed destination: a folder (``path``) or a bucket and key prefix.

    ``prefix`` is empty or ends in ``/``, so ``prefix + "pages/..."`` is always a key.
    """

    kind: Literal["folder", "s3"]
    path: str = ""
    bucket: str = ""
    prefix: str = ""

    @property
    def url(self) -> str:
        """The destination as a user reads it in messages (never with credentials)."""
        if self.kind == "s3":
            return f"s3://{self.bucket}/{self.prefix}"
        return self.path

    def key(self, relative: str) -> str:
        """The object key (s3) or path (folder) of a file of the layout, e.g. ``pages/x.jsonl``."""
        if self.kind == "s3":
            return self.prefix + relative
        return str(PurePosixPath(self.path) / relative)


def parse_destination(text: str) -> Destination:
    """Parse ``output.destination``; raises :class:`InvalidDestination` with the model's words."""
    if len(text) > MAX_DESTINATION_LENGTH:
        raise InvalidDestination(
            f"must be at most {MAX_DESTINATION_LENGTH} characters long (got {len(text)})"
        )
    if not text.strip() or any(ord(char) < 32 or ord(char) == 127 for char in text):
        raise InvalidDestination(f"{DESTINATION_MEANING}, without control characters")
    if not _SCHEME.match(text):
        return Destination("folder", path=text)
    parts = urlsplit(text)
    if "@" in parts.netloc:
        raise InvalidDestination(DESTINATION_CREDENTIALS)  # never echo it: it holds a secret
    if not text.startswith(("file://", "s3://")) or parts.query or parts.fragment:
        raise InvalidDestination(f"{DESTINATION_MEANING} (got {_quoted(text)})")
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise InvalidDestination(
                f"must be a file:///absolute/path URL on this machine (got {_quoted(text)})"
            )
        return Destination("folder", path=unquote(parts.path))
    bucket = parts.netloc
    if not _BUCKET.fullmatch(bucket) or ".." in bucket:
        raise InvalidDestination(
            "must name an S3 bucket of 3-63 lower-case letters, digits, '.' and '-', starting"
            f" and ending with a letter or digit: s3://bucket/prefix/ (got {_quoted(text)})"
        )
    prefix = parts.path[1:]  # after the "/" that ends the bucket
    segments = prefix.rstrip("/").split("/") if prefix else []
    if any(segment in ("", ".", "..") for segment in segments):
        raise InvalidDestination(
            "must have a key prefix of plain names separated by single '/', without '.' or"
            f" '..' (got {_quoted(text)})"
        )
    return Destination("s3", bucket=bucket, prefix="".join(f"{s}/" for s in segments))


def destination_flag(text: str, flag: str) -> Destination:
    """A destination given on a command line (``--output``): refused in the model's words."""
    try:
        return parse_destination(text)
    except InvalidDestination as error:
        raise ConfigError(f"{flag}: {error}") from None


def _quoted(text: str) -> str:
    """As the model shows a value it refuses: JSON-quoted and kept short."""
    shown = json.dumps(text, ensure_ascii=False)
    return shown if len(shown) <= 80 else shown[:77] + "..."
