"""The whole CrawlJob resource: apiVersion, kind, metadata, spec and status."""

from __future__ import annotations

from typing import Annotated, Final, Literal, Self

from pydantic import ConfigDict, model_validator

from crawlfleet.crawljob.base import Model
from crawlfleet.crawljob.fields import NAMESPACE, OBJECT_NAME
from crawlfleet.crawljob.spec import CrawlJobSpec
from crawlfleet.crawljob.status import CrawlJobStatus
from crawlfleet.crawljob.validation import problems, unknown_field

__all__ = ["API_VERSION", "KIND", "CrawlJob", "ObjectMeta"]

API_VERSION: Final = "crawlfleet.io/v1alpha1"
KIND: Final = "CrawlJob"

_OBJECT_META_FIELDS: Final = frozenset(
    {
        "annotations",
        "creationTimestamp",
        "deletionGracePeriodSeconds",
        "deletionTimestamp",
        "finalizers",
        "generateName",
        "generation",
        "labels",
        "managedFields",
        "name",
        "namespace",
        "ownerReferences",
        "resourceVersion",
        "selfLink",
        "uid",
    }
)


class ObjectMeta(Model):
    """The metadata crawlfleet reads; the API server's own fields pass, typos do not."""

    model_config = ConfigDict(extra="allow", strict=False)

    name: Annotated[str, OBJECT_NAME]
    """The job's name, unique in its namespace."""
    namespace: Annotated[str, NAMESPACE] = "default"
    """The job's namespace."""
    generation: int | None = None
    """Bumped by the API server on every spec change."""

    @model_validator(mode="after")
    def _refuse_unknown_fields(self) -> Self:
        unknown = [key for key in self.model_extra or {} if key not in _OBJECT_META_FIELDS]
        if unknown:
            raise problems([((key,), unknown_field(key, _OBJECT_META_FIELDS)) for key in unknown])
        return self


class CrawlJob(Model):
    """The whole resource, as ``kubectl apply`` and ``crawlfleet run`` both read it."""

    api_version: Literal["crawlfleet.io/v1alpha1"]
    """The API version: crawlfleet.io/v1alpha1."""
    kind: Literal["CrawlJob"]
    """The kind: CrawlJob."""
    metadata: ObjectMeta
    """Standard object metadata: name, namespace, labels, annotations."""
    spec: CrawlJobSpec
    """What to crawl and how: seeds, scope, deduplication, politeness, workers, retries, and
    where the frontier and the output live. Only seeds is required."""
    status: CrawlJobStatus | None = None
    """What the operator observed: phase, conditions, workers and crawl progress. Written by
    the operator only."""

    def with_shards_at_least(self, shards: int) -> CrawlJob:
        """The job with at least ``shards`` frontier partitions (CrawlJobSpec's, checked)."""
        spec = self.spec.with_shards_at_least(shards)
        return self if spec is self.spec else self.model_copy(update={"spec": spec})

    @property
    def job_id(self) -> str:
        """``namespace.name``: unique per cluster (namespaces hold no dots), the Redis hash tag."""
        return f"{self.metadata.namespace}.{self.metadata.name}"
