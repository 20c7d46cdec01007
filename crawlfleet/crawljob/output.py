"""``spec.output``: what the workers write about each page, and where it is kept (DESIGN §8).

A destination is parsed by ``crawlfleet.destinations``, as the sinks and the command line parse
it, so the model refuses exactly what they could not use; an S3 endpoint and a volume source are
checked as the S3 client and the API server would check them.
"""

from __future__ import annotations

import re
from typing import Annotated, ClassVar, Final, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, JsonValue

from crawlfleet.crawljob.base import Cel, MaxLength, Range, Rule, Section
from crawlfleet.crawljob.fields import GIB, MIB, OBJECT_NAME, REGION
from crawlfleet.crawljob.validation import (
    problem,
    problems,
    show,
    unknown_field,
    without_userinfo,
)
from crawlfleet.destinations import (
    DESTINATION_CREDENTIALS,
    DESTINATION_MEANING,
    MAX_DESTINATION_LENGTH,
    PARENT_SEGMENT,
    PARENT_SEGMENT_PATTERN,
    VOLUME_MOUNT_PATH,
    InvalidDestination,
    parse_destination,
)

__all__ = ["CredentialsSecretRef", "OutputSpec", "S3Spec"]

_MAX_ENDPOINT_LENGTH: Final = 2048


def _destination(text: str) -> str:
    """``output.destination``: a folder, a file:// URL or s3://bucket/prefix/ (see the parser)."""
    try:
        parse_destination(text)
    except InvalidDestination as error:
        raise problem(str(error)) from None
    return text


# The API server refuses the mistakes CEL can see (credentials, a scheme we do not speak, a
# folder that climbs with '..'); the bucket's name and the prefix's shape are the operator's
# InvalidSpec.
_DESTINATION_CEL: Final = (
    Cel(r"!self.matches(r'^[a-zA-Z][a-zA-Z0-9+.-]*://[^/]*@')", DESTINATION_CREDENTIALS),
    Cel(
        r"!self.matches(r'^[a-zA-Z][a-zA-Z0-9+.-]*:') || self.startsWith('s3://')"
        r" || self.startsWith('file://')",
        DESTINATION_MEANING,
    ),
    Cel(f"self.startsWith('s3://') || !self.matches(r'{PARENT_SEGMENT_PATTERN}')", PARENT_SEGMENT),
)
# An absolute folder (a path, or a file:// URL) inside the volume's mount: '/', then any run of
# '/' and './' (which the parser drops), then the mount's name and nothing or a '/'. With '..'
# refused, that is exactly "normalises to a path under it".
_ON_VOLUME: Final = rf"^(file://(localhost)?)?/(\.?/)*{VOLUME_MOUNT_PATH.strip('/')}(/.*)?$"
_ON_VOLUME_PATTERN: Final = re.compile(_ON_VOLUME)


def _on_volume(output: OutputSpec) -> bool:
    """A folder destination with ``volume`` lies on it: relative, or under its mount."""
    destination = output.destination
    if output.volume is None or destination is None or destination.startswith("s3://"):
        return True
    if not destination.startswith(("/", "file:")):
        return True
    return _ON_VOLUME_PATTERN.match(destination) is not None


_ENDPOINT_MEANING: Final = (
    "must be an http(s)://host[:port] URL of an S3-compatible store, without a path, query"
    " or credentials"
)


def _endpoint_url(url: str) -> str:
    """``output.s3.endpoint``: where the S3 client sends its requests (obstore's ``endpoint``)."""
    try:
        parts = urlsplit(url)
        valid = (
            parts.scheme in ("http", "https")
            and bool(parts.hostname)
            and parts.path in ("", "/")
            and not parts.query
            and not parts.fragment
            and not any(char.isspace() or ord(char) < 32 for char in url)
            and parts.port != 0  # .port raises ValueError on a bad port
        )
    except ValueError:
        valid = False
    if valid and "@" in parts.netloc:
        raise problem(DESTINATION_CREDENTIALS)
    if not valid:
        raise problem(f"{_ENDPOINT_MEANING} (got {show(without_userinfo(url))})")
    return url


# Kubernetes' volume sources (core/v1 Volume): a Volume names exactly one of them.
_VOLUME_SOURCES: Final = frozenset(
    {
        "awsElasticBlockStore", "azureDisk", "azureFile", "cephfs", "cinder", "configMap",
        "csi", "downwardAPI", "emptyDir", "ephemeral", "fc", "flexVolume", "flocker",
        "gcePersistentDisk", "gitRepo", "glusterfs", "hostPath", "image", "iscsi", "nfs",
        "persistentVolumeClaim", "photonPersistentDisk", "portworxVolume", "projected",
        "quobyte", "rbd", "scaleIO", "secret", "storageos", "vsphereVolume",
    }
)  # fmt: skip


def _volume_source(volume: dict[str, JsonValue]) -> dict[str, JsonValue]:
    """One volume source, as a Pod's volume takes it (the operator adds the name)."""
    if len(volume) != 1:
        raise problem(
            "must name exactly one volume source, such as"
            " {persistentVolumeClaim: {claimName: crawl-output}}"
        )
    ((kind, source),) = volume.items()
    if kind not in _VOLUME_SOURCES:
        raise problems([((kind,), unknown_field(kind, _VOLUME_SOURCES))])
    if not isinstance(source, dict):
        raise problems([((kind,), "must be a mapping")])
    if kind == "persistentVolumeClaim" and not isinstance(source.get("claimName"), str):
        raise problems([((kind, "claimName"), "is required: the name of the claim to mount")])
    return volume


class CredentialsSecretRef(Section):
    """A Secret in the job's namespace that holds an access key pair, by the AWS names."""

    name: Annotated[str, OBJECT_NAME]
    """Name of the Secret, in the CrawlJob's namespace. Its keys AWS_ACCESS_KEY_ID and
    AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN, when present) reach the workers as environment
    variables, never through a ConfigMap or a command line. The operator uses only a Secret
    labelled for CrawlJobs (crawlfleet.io/crawljob-secret=true by default; docs/security.md)."""


class S3Spec(Section):
    """How to reach an s3:// destination: any S3-compatible store (AWS, MinIO, Ceph, R2, ...)."""

    endpoint: (
        Annotated[str, MaxLength(_MAX_ENDPOINT_LENGTH), AfterValidator(_endpoint_url)] | None
    ) = None
    """The store's URL, such as https://minio.example:9000 (http:// only where the network
    is trusted). Unset: AWS S3 of the region."""
    region: Annotated[str, REGION] | None = None
    """The bucket's region (us-east-1, eu-west-3, auto ...). Unset: AWS_REGION or
    AWS_DEFAULT_REGION of the workers' environment, else us-east-1."""
    path_style: bool = True
    """Name the bucket in the path (https://endpoint/bucket/key), as MinIO, versitygw, Ceph and
    most S3-compatible stores expect. false: in the host name (https://bucket.endpoint/key),
    which some providers require."""
    secret_ref: CredentialsSecretRef | None = None
    """The Secret with the access key pair the workers sign with (in a cluster). Unset: the
    workers' own environment (instance roles, web identity); crawlfleet run always uses the
    standard AWS environment variables and files of the user who runs it."""


class OutputSpec(Section):
    """What the workers write about each page, and where it is kept."""

    format: Literal["jsonl", "warc", "none"] = "jsonl"
    """jsonl: one JSON line per fetched page (URL, status, headers, links found). warc: the same
    lines plus WARC archives of every request and response. none: no files at all."""
    destination: (
        Annotated[
            str,
            MaxLength(MAX_DESTINATION_LENGTH),
            AfterValidator(_destination),
            *_DESTINATION_CEL,
        ]
        | None
    ) = None
    """Where the files go: a folder (a path or a file:///path URL) or s3://bucket/prefix/ on
    any S3-compatible store (see s3). The layout is the same everywhere: pages/, items/,
    warc/, dead-letters.jsonl and manifest.json. Unset: ./crawl-output/<name>/ for crawlfleet
    run; in a cluster, the operator's default destination, else a folder on output.volume."""
    s3: S3Spec | None = None
    """Endpoint, region and credentials of an s3:// destination."""
    max_file_bytes: Annotated[int, Range(ge=1, le=64 * GIB)] = 256 * MIB
    """Size in bytes at which a worker starts a new output file (a record is never split)."""
    content: Literal["none", "html", "text"] = "none"
    """What of each HTML page its record holds besides the metadata. none: nothing (the
    records stay small). html: the page's HTML as text, decoded with its charset (from the
    byte order mark, Content-Type, or a <meta> tag). text: its visible text (no scripts,
    styles or markup), whitespace collapsed. A page over maxContentBytes is cut there and its
    record says content_truncated: true."""
    max_content_bytes: Annotated[int, Range(ge=1024, le=64 * MIB)] = 2 * MIB
    """Most bytes (UTF-8) of content kept in one record; the rest is cut at a character
    boundary and the record marked content_truncated."""
    max_file_age_seconds: Annotated[float, Range(ge=1, le=3600)] = 30.0
    """Longest time, in seconds, a worker keeps an output file open. A page counts as crawled
    only once the file holding its record is durable (uploaded, or written to disk with
    fsync), so this bounds how long finished pages wait; their leases are kept alive
    meanwhile."""
    volume: Annotated[dict[str, JsonValue], AfterValidator(_volume_source)] | None = None
    """A Pod volume source for the workers' files in a cluster, for example
    {persistentVolumeClaim: {claimName: crawl-output}} (ReadWriteMany when there are several
    workers), mounted at /data; a folder destination is then a path inside it. Unset, with no
    s3:// destination: an emptyDir, deleted with each pod (see ephemeral). The operator allows
    only the volume types its administrator chose (by default persistentVolumeClaim, ephemeral
    and emptyDir; never hostPath unless allowed: docs/security.md)."""
    ephemeral: bool = False
    """Accept output that lives only as long as each worker pod (an emptyDir). Without it, a
    cluster job whose output would go nowhere durable does not start (condition
    OutputNotDurable)."""

    cross_field_rules: ClassVar[tuple[Rule[OutputSpec], ...]] = (
        Rule(
            field="s3",
            message="is only for an s3:// destination",
            cel="!has(self.s3) || (has(self.destination) && self.destination.startsWith('s3://'))",
            holds=lambda output: (
                output.s3 is None or (output.destination or "").startswith("s3://")
            ),
        ),
        Rule(
            field="volume",
            message="must not be set with an s3:// destination: the workers write to one of"
            " the two",
            cel="!has(self.volume) || !has(self.destination)"
            " || !self.destination.startsWith('s3://')",
            holds=lambda output: (
                output.volume is None or not (output.destination or "").startswith("s3://")
            ),
        ),
        Rule(
            field="destination",
            message=f"must be a folder on output.volume, which is mounted at {VOLUME_MOUNT_PATH}:"
            f" a relative path (inside it), or an absolute one under {VOLUME_MOUNT_PATH}/",
            cel="!has(self.volume) || !has(self.destination)"
            " || self.destination.startsWith('s3://')"
            " || !(self.destination.startsWith('/') || self.destination.startsWith('file:'))"
            f" || self.destination.matches(r'{_ON_VOLUME}')",
            holds=_on_volume,
            shows=("destination",),
        ),
    )
