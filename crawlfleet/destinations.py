"""Where a crawl's output goes: ``output.destination`` parsed once, for the model and the sinks.

Three spellings, one meaning each:

* a path (``crawl-output/books``, ``/mnt/crawls/books``) or a ``file://`` URL
  (``file:///mnt/crawls/books``): a folder on the machine that writes it;
* ``s3://bucket/prefix/``: objects under ``prefix`` in ``bucket`` of any S3-compatible store
  (the endpoint, region and credentials are ``output.s3``'s, never the URL's).

Anything else that looks like a URL (``gs://``, ``https://``, ``ftp:``) is refused rather than
taken for a folder of that name, and so is a URL that carries credentials: the spec is
readable by everyone who can read the CrawlJob, so keys belong in a Secret.

A folder is normalised here, once, before anything checks where it is: ``.`` segments and
repeated slashes go (``crawls/./books//`` is ``crawls/books``), and a ``..`` segment, spelled
plainly or percent-encoded in a ``file://`` URL, is refused; so is a key prefix segment of an
``s3://`` destination that is, or decodes to, ``.`` or ``..``, or holds an encoded ``/``.
Whoever checks that a folder lies on a volume (the model with ``output.volume``, the operator
with an emptyDir) then compares plain names: ``/data/../tmp/x`` can never pass as "under
/data" and land somewhere else. A path a user gives on the command line is one of their own
machine and may climb (``--output ../crawls``): :func:`destination_flag` makes it absolute
first, resolving ``..`` against the working directory, as the shell would.

The messages here are the model's own (``crawlfleet.crawljob`` raises them with the field's
path). The module is on the ground floor, beside ``hosts`` and ``urls``: it imports nothing of
crawlfleet's but ``crawlfleet.errors``, so the model, the sinks and the CLI can all use it.
"""

from __future__ import annotations

import json
import os
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
    "PARENT_SEGMENT",
    "PARENT_SEGMENT_PATTERN",
    "RUNS_FOLDER",
    "VOLUME_MOUNT_PATH",
    "Destination",
    "InvalidDestination",
    "destination_flag",
    "parse_destination",
]

MAX_DESTINATION_LENGTH: Final = 1024
#: The layout under every destination (docs/output.md): nothing else there is the crawl's.
LAYOUT_FOLDERS: Final = ("pages", "items", "warc", "files")
LAYOUT_FILES: Final = ("dead-letters.jsonl", "manifest.json")
#: A scheduled job's runs each write the layout under ``runs/<run-id>/`` of the destination.
RUNS_FOLDER: Final = "runs"
_RUN_ID: Final = re.compile(r"[0-9A-Za-z][0-9A-Za-z_-]{0,63}")
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
#: Where a cluster job's folder lives: its ``output.volume`` (or the emptyDir of an ephemeral
#: job) is mounted here in every worker, and a folder destination must lie inside it.
VOLUME_MOUNT_PATH: Final = "/data"
#: A ``..`` segment of a folder destination, as RE2 (the CRD's CEL says the same): plain, or
#: with its dots or the slashes around it percent-encoded, which a ``file://`` URL decodes.
PARENT_SEGMENT_PATTERN: Final = r"(?i)(^|/|%2f)(\.|%2e)(\.|%2e)(/|%2f|$)"
_PARENT_SEGMENT: Final = re.compile(PARENT_SEGMENT_PATTERN)
PARENT_SEGMENT: Final = (
    "must not climb out of its folder with '..': name the folder itself (a path inside the"
    " output volume in a cluster)"
)


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

    def for_run(self, run_id: str) -> Destination:
        """Where one run of a scheduled job writes: ``runs/<run_id>/`` under this one.

        ``run_id`` is a plain name (``20261202T081500Z``): a ValueError otherwise, never a
        path that climbs or nests.
        """
        if not _RUN_ID.fullmatch(run_id):
            raise ValueError(f"not a run id: {run_id!r}")
        if self.kind == "s3":
            return Destination(
                "s3", bucket=self.bucket, prefix=f"{self.prefix}{RUNS_FOLDER}/{run_id}/"
            )
        return Destination("folder", path=self.key(f"{RUNS_FOLDER}/{run_id}"))


def parse_destination(text: str) -> Destination:
    """Parse ``output.destination``; raises :class:`InvalidDestination` with the model's words."""
    if len(text) > MAX_DESTINATION_LENGTH:
        raise InvalidDestination(
            f"must be at most {MAX_DESTINATION_LENGTH} characters long (got {len(text)})"
        )
    if not text.strip() or any(ord(char) < 32 or ord(char) == 127 for char in text):
        raise InvalidDestination(f"{DESTINATION_MEANING}, without control characters")
    if not _SCHEME.match(text):
        return Destination("folder", path=_folder(text, shown=text))
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
        path = _folder(parts.path, shown=text, decoded=unquote(parts.path))
        return Destination("folder", path=path)
    bucket = parts.netloc
    if not _BUCKET.fullmatch(bucket) or ".." in bucket:
        raise InvalidDestination(
            "must name an S3 bucket of 3-63 lower-case letters, digits, '.' and '-', starting"
            f" and ending with a letter or digit: s3://bucket/prefix/ (got {_quoted(text)})"
        )
    prefix = parts.path[1:]  # after the "/" that ends the bucket
    segments = prefix.rstrip("/").split("/") if prefix else []
    # S3 keeps a key's characters as they are, but tools that show, copy or mirror the keys
    # (a posix-backed gateway, `aws s3 sync` to a folder) decode them: a segment that decodes
    # to '.', '..' or holds an encoded '/' is refused as its plain spelling is.
    if any(_odd_segment(segment) for segment in segments):
        raise InvalidDestination(
            "must have a key prefix of plain names separated by single '/', without '.' or"
            f" '..', plain or percent-encoded (got {_quoted(text)})"
        )
    return Destination("s3", bucket=bucket, prefix="".join(f"{s}/" for s in segments))


def destination_flag(text: str, flag: str) -> Destination:
    """A destination given on a command line (``--output``): refused in the model's words.

    A folder there is one of the user's own machine, which may climb: one with ``..`` is made
    absolute against the working directory first (``../crawls`` is the folder beside it).
    """
    if not _SCHEME.match(text) and _PARENT_SEGMENT.search(text):
        text = os.path.abspath(text)
    try:
        return parse_destination(text)
    except InvalidDestination as error:
        raise ConfigError(f"{flag}: {error}") from None


def _folder(path: str, *, shown: str, decoded: str | None = None) -> str:
    """``path`` without ``.`` segments and repeated slashes; InvalidDestination for ``..``.

    ``decoded`` is the path a ``file://`` URL stands for (percent-escapes decoded); the raw
    text is checked too, so the rule is the CRD's regular expression, word for word.
    """
    if _PARENT_SEGMENT.search(path) or ".." in (decoded or path).split("/"):
        raise InvalidDestination(f"{PARENT_SEGMENT} (got {_quoted(shown)})")
    plain = decoded if decoded is not None else path
    names = [name for name in plain.split("/") if name not in ("", ".")]
    root = "/" if plain.startswith("/") else ""
    return root + "/".join(names) if names or root else "."


def _odd_segment(segment: str) -> bool:
    """A key-prefix segment that is empty, ``.`` or ``..``, or that decodes to one or to a path."""
    decoded = unquote(segment)
    return segment in ("", ".", "..") or decoded in (".", "..") or "/" in decoded


def _quoted(text: str) -> str:
    """As the model shows a value it refuses: JSON-quoted and kept short."""
    shown = json.dumps(text, ensure_ascii=False)
    return shown if len(shown) <= 80 else shown[:77] + "..."
