"""Where a CrawlJob's output goes in a cluster, decided before any worker exists (DESIGN §8).

A worker pod's own folders (an emptyDir) are deleted with the pod: at every scale-down and at
completion. So :func:`output_plan` gives each job one of three durable places, or none:

* an ``s3://`` destination (the job's own, with ``output.s3``; or the operator's default,
  ``defaultOutput`` of the chart: its namespace's own under ``<prefix><name>/``, else the
  shared one under ``<prefix><namespace>/<name>/``, the credentials copied into a Secret the
  job owns, ``<job>-output``);
* a folder on ``output.volume`` (mounted at ``/data``; a relative destination is a path inside
  it, none is ``/data/<name>``);
* with ``output.ephemeral: true``, a folder in the emptyDir, accepted as such.

Otherwise the job does not start: condition ``OutputNotDurable`` with the fix in its message,
and no worker is created. Pure functions of the spec and the operator's configuration, tested
without a cluster.

**Tenants apart.** Whatever credentials the default carries reach every worker pod of the
namespaces it serves (as environment; a tenant who may read Secrets, or run a parser image of
its own, reads them). So one key pair shared by all namespaces lets every tenant list and
overwrite every other's output, whatever prefix the operator chooses. The chart therefore gives
each namespace its own default (``defaultOutput.namespaces``: a destination and a Secret whose
keys the store limits to that bucket or prefix), copied into that namespace only, and refuses
shared credentials across namespaces unless told otherwise (docs/security.md measures it). The
store enforces the limit; the operator only keeps each namespace's keys in that namespace.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Final

from pydantic import ValidationError

from crawlfleet.crawljob import CrawlJobSpec, CredentialsSecretRef, OutputSpec, S3Spec
from crawlfleet.destinations import VOLUME_MOUNT_PATH, parse_destination
from crawlfleet.errors import ConfigError
from crawlfleet.operator.children import JobRef

__all__ = ["DATA_DIR", "DefaultOutput", "OutputPlan", "output_plan"]

#: Where the output volume (or, for an ephemeral job, the emptyDir) is mounted in a worker.
DATA_DIR: Final = VOLUME_MOUNT_PATH

NOT_DURABLE: Final = (
    "spec.output: the workers' files would live only in their pods' emptyDir, which is deleted"
    " at every scale-down and at completion: set output.destination to s3://bucket/prefix/"
    " (with output.s3), mount a volume (output.volume, ReadWriteMany for several workers),"
    " or set output.ephemeral: true to accept losing them"
)


@dataclass(frozen=True, slots=True)
class DefaultOutput:
    """The operator's destinations for jobs that name none (chart value ``defaultOutput``).

    Each is an output section: the destination (``s3://bucket/prefix/``), the store's endpoint,
    region and addressing, and in ``s3.secretRef`` the Secret with its credentials, which lives
    in ``secret_namespace`` (the operator's own) and is copied into the job's namespace.
    ``namespaces`` holds each namespace's own; ``output``, the shared one, serves the others
    (None: no shared default).
    """

    output: OutputSpec | None
    secret_namespace: str
    namespaces: Mapping[str, OutputSpec] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> DefaultOutput:
        """``CRAWLFLEET_DEFAULT_OUTPUT``: JSON of ``{destination, s3: {endpoint, region,
        pathStyle, secretRef: {name}}, secretNamespace, namespaces: {NAME: {destination, s3}}}``
        (the shared default optional); a ConfigError saying what is wrong."""
        try:
            raw = json.loads(text)
        except ValueError as error:
            raise ConfigError(f"CRAWLFLEET_DEFAULT_OUTPUT: not JSON: {error}") from None
        if not isinstance(raw, dict):
            raise ConfigError("CRAWLFLEET_DEFAULT_OUTPUT: must be a JSON object")
        secret_namespace = str(raw.pop("secretNamespace", None) or "")
        per_namespace = raw.pop("namespaces", None) or {}
        if not isinstance(per_namespace, dict):
            raise ConfigError("CRAWLFLEET_DEFAULT_OUTPUT: namespaces must be a JSON object")
        namespaces = {
            str(name): _default_section(entry, f"namespaces.{name}.", secret_namespace)
            for name, entry in per_namespace.items()
        }
        shared = _default_section(raw, "", secret_namespace) if raw else None
        return cls(shared, secret_namespace, namespaces)

    def for_namespace(self, namespace: str) -> tuple[OutputSpec, bool] | None:
        """The default of a job in ``namespace`` and whether it is the namespace's own (else
        the shared one); None: there is none for it."""
        own = self.namespaces.get(namespace)
        if own is not None:
            return own, True
        return None if self.output is None else (self.output, False)


def _default_section(raw: object, where: str, secret_namespace: str) -> OutputSpec:
    """One default destination of ``CRAWLFLEET_DEFAULT_OUTPUT`` (``where``: its path there)."""
    name = f"CRAWLFLEET_DEFAULT_OUTPUT: {where}"
    if not isinstance(raw, dict):
        raise ConfigError(f"{name.rstrip('. ')}: must be a JSON object")
    try:
        output = OutputSpec.model_validate(raw, by_alias=True, by_name=False)
    except ValidationError as error:
        problems = "; ".join(
            f"{where}{'.'.join(str(part) for part in e['loc'])}: {e['msg']}" for e in error.errors()
        )
        raise ConfigError(f"CRAWLFLEET_DEFAULT_OUTPUT: {problems}") from None
    if not (output.destination or "").startswith("s3://"):
        raise ConfigError(
            f"{name}destination must be an s3://bucket/prefix/ URL: a folder in the operator's"
            " cluster is no place for every job's files"
        )
    if output.s3 is not None and output.s3.secret_ref is not None and not secret_namespace:
        raise ConfigError(
            "CRAWLFLEET_DEFAULT_OUTPUT: secretNamespace is required with s3.secretRef: the"
            " namespace of the Secret the operator copies into each job's namespace"
        )
    return output


@dataclass(frozen=True, slots=True)
class OutputPlan:
    """What the workers of one job are told, or why they must not start."""

    #: The spec the workers read (their ConfigMap): an s3:// destination filled in; a folder
    #: destination taken out (it travels as ``folder``, a path the pod can rewrite).
    spec: CrawlJobSpec
    #: The worker's ``--out``: the folder it writes to when the spec names no destination.
    folder: str
    #: Where the output goes, in words for the status.
    description: str
    #: (namespace, name) of the operator's credentials Secret to copy into ``<job>-output``.
    copy_secret: tuple[str, str] | None = None
    #: Why the job must not start; None when it may.
    problem: str | None = None


def output_plan(
    job: JobRef, spec: CrawlJobSpec, default: DefaultOutput | None, *, output_secret: str
) -> OutputPlan:
    """The durable place of ``job``'s output, or the reason it has none (see the module)."""
    output = spec.output
    own_folder = f"{DATA_DIR}/{job.name}"
    if output.format == "none":
        return OutputPlan(spec, own_folder, "none (output.format: none)")
    destination = output.destination
    if destination is not None and destination.startswith("s3://"):
        return OutputPlan(spec, own_folder, destination)
    chosen = default.for_namespace(job.namespace) if default is not None else None
    if destination is None and output.volume is None and chosen is not None:
        assert default is not None
        return _default_plan(job, spec, chosen, default.secret_namespace, output_secret)
    folder = own_folder
    if destination is not None:
        path = PurePosixPath(parse_destination(destination).path)
        if path.is_absolute() and not path.is_relative_to(DATA_DIR):
            where = "output.volume" if output.volume is not None else "the emptyDir"
            return OutputPlan(
                spec,
                folder,
                "",
                problem=f"spec.output.destination: {path} is not on {where}, which is mounted"
                f" at {DATA_DIR}: give a path inside it, such as crawls/{job.name}",
            )
        folder = str(path if path.is_absolute() else PurePosixPath(DATA_DIR) / path)
    workers_read = _with_output(spec, destination=None)
    if output.volume is not None:
        return OutputPlan(workers_read, folder, f"{folder} on output.volume")
    if output.ephemeral:
        return OutputPlan(workers_read, folder, f"{folder} in each pod's emptyDir (ephemeral)")
    return OutputPlan(spec, folder, "", problem=NOT_DURABLE)


def _default_plan(
    job: JobRef,
    spec: CrawlJobSpec,
    chosen: tuple[OutputSpec, bool],
    secret_namespace: str,
    output_secret: str,
) -> OutputPlan:
    base, own = chosen
    parsed = parse_destination(base.destination or "")
    # A namespace's own default is its own already; the shared one is split by namespace.
    below = job.name if own else f"{job.namespace}/{job.name}"
    destination = f"s3://{parsed.bucket}/{parsed.prefix}{below}/"
    s3 = base.s3 or S3Spec()
    copy = None
    if s3.secret_ref is not None:
        copy = (secret_namespace, s3.secret_ref.name)
        s3 = s3.model_copy(update={"secret_ref": CredentialsSecretRef(name=output_secret)})
    effective = _with_output(spec, destination=destination, s3=s3)
    whose = (
        f"the operator's default destination for namespace {job.namespace}"
        if own
        else ("the operator's default destination")
    )
    return OutputPlan(effective, f"{DATA_DIR}/{job.name}", f"{destination} ({whose})", copy)


def _with_output(spec: CrawlJobSpec, **changes: object) -> CrawlJobSpec:
    output = spec.output.model_copy(update=changes)
    return spec.model_copy(update={"output": output})
