"""``spec.files``: which URLs are downloaded as files, and what those downloads may cost.

A file is a URL whose body streams to the destination's ``files/`` instead of being read as a
page (DESIGN §11): never whole in memory, resumed with ``Range`` after an interruption, verified
before it counts, stored once by content. Rules are tried in order and the first that takes a
URL decides; a rule names URLs by one or more of three selectors:

* ``match``: an RE2 pattern searched in the canonical URL, like ``scope.include``, at claim;
* ``context``: the elements a page linked the URL from (``<img src>``, ``<video src>`` ...),
  marked on the link when the page's links are admitted; with ``match`` both must hold;
* ``contentTypes``: the response's media type, read at the response of a page fetch.

The elements are the HTML ones that link a resource by one attribute, as Heritrix's
``ExtractorHTML`` reads embeds; ``a`` and ``link`` are navigation too, so naming them without
``match`` or ``contentTypes`` is refused: every link of every page would become a download.

The bounds are the largest values that still make sense (one file of a tebibyte; a job's budget
of a pebibyte; S3's 5 MiB part minimum), so that a typo is refused with its field rather than
run. The pure policy that applies the rules is ``crawlfleet.crawler.files.rules``.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Final, Literal, get_args

from pydantic import AfterValidator

from crawlfleet.crawljob.base import MaxLength, Range, Rule, Section
from crawlfleet.crawljob.fields import (
    CONTENT_TYPE,
    GIB,
    LIST_FROM_YAML,
    MIB,
    RULE_PATTERNS,
    URLPattern,
    unique,
)

__all__ = [
    "DEFAULT_BANDWIDTH_BYTES_PER_SECOND",
    "DEFAULT_MAX_FILE_BYTES",
    "DEFAULT_MAX_TOTAL_BYTES",
    "DEFAULT_PART_SIZE_BYTES",
    "DEFAULT_PER_HOST",
    "FILE_ELEMENTS",
    "MAX_FILE_BYTES",
    "MAX_FILE_RULES",
    "MAX_PART_SIZE_BYTES",
    "MAX_TOTAL_BYTES",
    "MIN_PART_SIZE_BYTES",
    "NAVIGATION_ELEMENTS",
    "FileElement",
    "FileRuleSpec",
    "FileRuleSpecs",
    "FilesSpec",
    "files_characters",
]

#: The elements a ``context`` may name: each links one resource by one attribute (``img``
#: also by the first URL of its ``srcset``, ``video`` also by its ``poster``).
FileElement = Literal["a", "audio", "embed", "img", "link", "object", "source", "video"]
FILE_ELEMENTS: Final[tuple[FileElement, ...]] = get_args(FileElement)
#: Elements that link pages as much as files: a context of only these needs another selector.
NAVIGATION_ELEMENTS: Final[frozenset[FileElement]] = frozenset({"a", "link"})

_TIB: Final = 1024 * GIB
#: One file's size: the default cap, and the largest cap a rule may set.
DEFAULT_MAX_FILE_BYTES: Final = 4 * GIB
MAX_FILE_BYTES: Final = _TIB
#: The job's budget of stored file bytes (0: none), and the largest one.
DEFAULT_MAX_TOTAL_BYTES: Final = 0
MAX_TOTAL_BYTES: Final = 1024 * _TIB
#: Concurrent file downloads per host across the fleet: one, as a polite mirror client does.
DEFAULT_PER_HOST: Final = 1
_MAX_PER_HOST: Final = 16
#: A worker's bandwidth for all its downloads together (0: no cap); the bound is 16 GiB/s,
#: past any network interface a worker has.
DEFAULT_BANDWIDTH_BYTES_PER_SECOND: Final = 0
_MAX_BANDWIDTH_BYTES_PER_SECOND: Final = 16 * GIB
#: How often a download checkpoints (and the size of an S3 multipart part): S3 refuses parts
#: under 5 MiB (but the last), and a part is buffered on local disk until it is uploaded.
DEFAULT_PART_SIZE_BYTES: Final = 16 * MIB
MIN_PART_SIZE_BYTES: Final = 5 * MIB
MAX_PART_SIZE_BYTES: Final = 512 * MIB
#: Rules per job: each is tried in order on every URL a worker claims or a page links.
MAX_FILE_RULES: Final = 32
_MAX_CONTENT_TYPES: Final = 16  # per rule; the API server's CEL cost grows with them

_ContentTypes = Annotated[
    tuple[Annotated[str, CONTENT_TYPE], ...],
    LIST_FROM_YAML,
    MaxLength(_MAX_CONTENT_TYPES),
    AfterValidator(unique),
]
_Context = Annotated[
    tuple[FileElement, ...],
    LIST_FROM_YAML,
    MaxLength(len(FILE_ELEMENTS)),
    AfterValidator(unique),
]
_FileBytes = Annotated[int, Range(ge=1, le=MAX_FILE_BYTES)]


def _only_navigation(rule: FileRuleSpec) -> bool:
    """A context of ``a``/``link`` with nothing else to narrow it down."""
    return (
        any(element in NAVIGATION_ELEMENTS for element in rule.context)
        and rule.match is None
        and not rule.content_types
    )


_A_SELECTOR: Final[Rule[Any]] = Rule(
    field=None,
    message="must set at least one of match, context and contentTypes",
    cel="has(self.match) || (has(self.context) && size(self.context) > 0)"
    " || (has(self.contentTypes) && size(self.contentTypes) > 0)",
    holds=lambda rule: rule.match is not None or bool(rule.context) or bool(rule.content_types),
)
_NOT_EVERY_LINK: Final[Rule[Any]] = Rule(
    field="context",
    message="must not name a or link without match or contentTypes: that would make every"
    " link a download",
    cel="has(self.match) || (has(self.contentTypes) && size(self.contentTypes) > 0)"
    " || !has(self.context) || !self.context.exists(e, e == 'a' || e == 'link')",
    holds=lambda rule: not _only_navigation(rule),
)
_MIN_NOT_OVER_MAX: Final[Rule[Any]] = Rule(
    field="minBytes",
    message="must not be greater than maxBytes",
    cel="!has(self.minBytes) || self.minBytes <= self.maxBytes",
    holds=lambda rule: rule.min_bytes is None or rule.min_bytes <= rule.max_bytes,
    shows=("minBytes", "maxBytes"),
)


class FileRuleSpec(Section):
    """URLs downloaded as files: those every selector given accepts (at least one given)."""

    match: URLPattern | None = None
    """A regular expression (RE2 syntax) searched in the canonical URL, as scope.include is:
    without context, any URL the crawl meets that matches (a seed too) is a candidate, such as
    \\.(mp4|webm|pdf)$."""
    context: _Context = ()
    """Elements whose links the rule looks at: a (href), audio (src), embed (src), img (src and
    the first URL of srcset), link (href), object (data), source (src), video (src and poster).
    With match, both must hold. a or link needs match or contentTypes too: alone, every link
    would be a download. A link found this way is followed one level past scope.maxDepth, so
    the last pages keep their images."""
    content_types: _ContentTypes = ()
    """Media types, such as application/pdf or video/*: with match or context, a candidate
    becomes a file only if its response has one of them (otherwise it is crawled as a page);
    alone, any page whose response has one of them is downloaded as a file instead."""
    max_bytes: _FileBytes = DEFAULT_MAX_FILE_BYTES
    """Largest file, in bytes: a larger one fails as file_too_large (by its Content-Length,
    before any byte is stored, or once it streams past this)."""
    min_bytes: Annotated[int, Range(ge=0, le=MAX_FILE_BYTES)] | None = None
    """Smallest file, in bytes: a smaller body (an empty or tiny 200) fails as file_too_small
    and is retried. Unset: the minimum for its type (a few bytes for most; an empty body is
    always too small)."""

    cross_field_rules: ClassVar[tuple[Rule[Any], ...]] = (
        _A_SELECTOR,
        _NOT_EVERY_LINK,
        _MIN_NOT_OVER_MAX,
    )


FileRuleSpecs = Annotated[
    tuple[FileRuleSpec, ...],
    LIST_FROM_YAML,
    MaxLength(MAX_FILE_RULES),
    RULE_PATTERNS,
]


class FilesSpec(Section):
    """URLs downloaded as files into files/ of the destination, and what downloads may cost."""

    rules: FileRuleSpecs
    """Which URLs are files: rules tried in order, the first that takes a URL decides (its
    maxBytes and minBytes apply). At least one."""
    max_total_bytes: Annotated[int, Range(ge=0, le=MAX_TOTAL_BYTES)] = DEFAULT_MAX_TOTAL_BYTES
    """The job's budget of stored file bytes (a file stored once counts once): a download that
    would pass it fails as file_budget. 0: no limit."""
    per_host: Annotated[int, Range(ge=1, le=_MAX_PER_HOST)] = DEFAULT_PER_HOST
    """Most file downloads from one host at a time, across all workers (pages of the host are
    fetched beside them, under concurrency.perHost)."""
    bandwidth_bytes_per_second: Annotated[int, Range(ge=0, le=_MAX_BANDWIDTH_BYTES_PER_SECOND)] = (
        DEFAULT_BANDWIDTH_BYTES_PER_SECOND
    )
    """Most bytes per second one worker reads for all its file downloads together. 0: no
    cap."""
    part_size_bytes: Annotated[int, Range(ge=MIN_PART_SIZE_BYTES, le=MAX_PART_SIZE_BYTES)] = (
        DEFAULT_PART_SIZE_BYTES
    )
    """How often, in bytes, a download makes what it has durable (a fsync, or one part of an
    S3 multipart upload): an interrupted download resumes from its last such point."""
    verify_type: bool = True
    """Check that a file's first bytes agree with its declared type (an MP4's ftyp box, a PDF's
    %PDF-, ...): an HTML error page served as a video fails as file_type_mismatch and is
    retried."""

    cross_field_rules: ClassVar[tuple[Rule[Any], ...]] = (
        Rule(
            field="rules",
            message="must hold at least one rule",
            cel="self.rules.size() > 0",
            holds=lambda files: bool(files.rules),
        ),
    )


def files_characters(files: FilesSpec | None) -> int:
    """The characters of the section's strings: most of what it adds to the spec's JSON."""
    if files is None:
        return 0
    return sum(
        len(rule.match or "") + sum(len(kind) for kind in rule.content_types)
        for rule in files.rules
    )
