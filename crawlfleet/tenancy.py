"""The operator's tenancy policy: what a CrawlJob may ask the operator to run on its behalf.

Whoever may create a CrawlJob gets pods made by the operator's ServiceAccount, which may
create pods. Without a policy that is a confused deputy: a user refused Pods by RBAC would
get pods with any image, any volume (a hostPath of the node's disk) and any Secret of the
namespace as environment. So the operator, configured by its administrator (the chart's
``policy`` values, ``crawlfleet.config.OperatorConfig``), refuses a spec that asks for more
than that policy gives, with the condition ``InvalidSpec`` and a ``field: sentence`` line, before
it creates any child:

- images: ``spec.workers.image`` and ``spec.redis.managed.image`` must match one of the allowed
  prefixes (the worker image's own repository by default; ``redis`` for Redis);
- ``spec.output.volume`` must be of an allowed volume type (``persistentVolumeClaim``,
  ``ephemeral`` and ``emptyDir`` by default);
- every Secret a spec names (``spec.redis.secretRef``, ``spec.output.s3.secretRef``,
  ``spec.proxy.secretRef``) must carry
  the label that says it is meant for CrawlJobs (``crawlfleet.io/crawljob-secret=true``);
- the ConfigMap a spec reads its seeds from (``spec.seedsFrom.configMapKeyRef``) must carry
  :data:`SEED_LIST_LABEL` (``crawlfleet.io/crawljob-seeds=true``): the operator reads any
  ConfigMap of the namespace, its tenant may not, and a seed list is read in full;
- an external Redis (``spec.redis.url``, or the URL in ``redis.secretRef``'s Secret) must be on a
  host the administrator allows (chart value ``policy.redisUrls``; none by default, so every job
  gets a managed Redis). The operator connects to a job's Redis from its own pod, with its own
  network position: a URL a tenant writes would otherwise make it knock on any address of the
  cluster (another job's Redis, a database on port 6379, a node's service), a confused deputy
  of the network. The check is on the URL's host as written, before any connection; a name
  resolves later, so list names whose DNS you trust.

Everything here is pure: the image, volume and ``redis.url`` checks need the spec alone
(``crawlfleet validate --policy`` runs them too), the Secret checks its labels and URL, which
the operator reads.
docs/security.md is the user-facing account.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from crawlfleet.config import OperatorConfig
from crawlfleet.crawljob import CrawlJobSpec
from crawlfleet.crawljob.redis import CLUSTER_SCHEMES
from crawlfleet.errors import ConfigError

__all__ = [
    "ANY_IMAGE",
    "ANY_REDIS_HOST",
    "PROXY_SECRET_FIELD",
    "REDIS_SECRET_FIELD",
    "REDIS_URL_FIELD",
    "SEED_LIST_LABEL",
    "SecretUse",
    "TenancyPolicy",
    "image_allowed",
    "redis_host_allowed",
    "repository_of",
]

#: Where a spec names its Redis's Secret: the field path of a refusal.
REDIS_SECRET_FIELD: Final = "spec.redis.secretRef.name"
#: The field that names the Secret with the job's proxy list.
PROXY_SECRET_FIELD: Final = "spec.proxy.secretRef.name"
#: Where a spec names an external Redis by its URL: the field path of a refusal.
REDIS_URL_FIELD: Final = "spec.redis.url"
#: An allowed-image entry that admits every image: the administrator's explicit opt-out.
ANY_IMAGE: Final = "*"
#: The label a ConfigMap must carry for a job to read it as its seed list: a label of its own,
#: not the Secrets' one, since labelling says what the object is meant for (its whole content
#: read, by a job of the namespace).
SEED_LIST_LABEL: Final = ("crawlfleet.io/crawljob-seeds", "true")
#: An allowed-Redis-host entry that admits every host, a unix socket of the operator's own
#: machine included: the administrator's explicit opt-out.
ANY_REDIS_HOST: Final = "*"


def repository_of(image: str) -> str:
    """``registry/path/name`` of an image reference, without its tag and digest."""
    name = image.split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name


def image_allowed(image: str, prefixes: Iterable[str]) -> bool:
    """Whether ``image`` matches one of ``prefixes``.

    A prefix ending in ``/`` admits every repository below it (``registry.example/crawl/``);
    any other prefix names one repository and admits it at any tag or digest, so
    ``crawlfleet/worker`` admits ``crawlfleet/worker:1.2`` but not ``crawlfleet/worker-evil``.
    ``*`` admits everything.
    """
    repository = repository_of(image)
    for prefix in prefixes:
        if prefix == ANY_IMAGE:
            return True
        if prefix.endswith("/") and repository.startswith(prefix):
            return True
        if repository_of(prefix) == repository and image.startswith(prefix):
            return True
    return False


def redis_host_allowed(url: str, hosts: Iterable[str]) -> bool:
    """Whether the Redis at ``url`` is on one of ``hosts`` (entries as ``policy.redisUrls``).

    An entry is a host name (``redis.shared``, exact, any case), a name suffix starting with
    ``.`` (``.redis.example`` admits ``a.redis.example``), an IP address or network
    (``10.20.0.5``, ``10.20.0.0/16``: IP literals in the URL only, never a name that resolves
    into it), or ``*``. A ``unix://`` socket is a file of the operator's own machine: ``*`` only.
    A cluster URL (``redis+cluster://``) is checked by the node it names: the client then
    also connects to the nodes that node announces, so admit a cluster you trust as a whole.
    Whatever cannot be read is refused.
    """
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").rstrip(".").lower()
    except ValueError:
        return False
    entries = tuple(hosts)
    if ANY_REDIS_HOST in entries:
        return True
    if parts.scheme not in ("redis", "rediss", *CLUSTER_SCHEMES) or not host:
        return False
    address = _ip(host)
    for entry in (entry.lower() for entry in entries):
        if entry.startswith("."):
            if host.endswith(entry) and address is None:
                return True
        elif "/" in entry or _ip(entry) is not None:
            network = ipaddress.ip_network(entry, strict=False)
            if address is not None and address in network:
                return True
        elif host == entry.rstrip("."):
            return True
    return False


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class SecretUse:
    """A Secret a spec names, and where it names it (the field path of the refusal)."""

    field: str
    name: str


@dataclass(frozen=True, slots=True)
class TenancyPolicy:
    """What CrawlJobs may ask for; built once from the operator's configuration."""

    worker_images: tuple[str, ...]
    redis_images: tuple[str, ...]
    volume_types: frozenset[str]
    #: (key, value) a Secret must carry; None: any Secret of the namespace will do.
    secret_label: tuple[str, str] | None
    #: (key, value) a seedsFrom ConfigMap must carry; None: any ConfigMap of the namespace.
    seeds_label: tuple[str, str] | None = SEED_LIST_LABEL
    #: Hosts an external Redis may be on (:func:`redis_host_allowed`); empty: none.
    redis_hosts: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, knobs: OperatorConfig) -> TenancyPolicy:
        """The policy of ``knobs``; no allowed worker images means the worker image's own
        repository (the chart's ``workerImage.repository``)."""
        return cls(
            worker_images=knobs.allowed_worker_images or (repository_of(knobs.worker_image),),
            redis_images=knobs.allowed_redis_images,
            volume_types=frozenset(knobs.allowed_volume_types),
            secret_label=_label(knobs.secret_label, "CRAWLFLEET_SECRET_LABEL"),
            seeds_label=(
                SEED_LIST_LABEL
                if knobs.seeds_label is None
                else _label(knobs.seeds_label, "CRAWLFLEET_SEEDS_LABEL")
            ),
            redis_hosts=_redis_hosts(knobs.allowed_redis_hosts),
        )

    def spec_problems(self, spec: CrawlJobSpec) -> list[str]:
        """What the spec asks for beyond the policy, one ``field: sentence`` each."""
        found: list[str] = []
        image = spec.workers.image
        if image is not None and not image_allowed(image, self.worker_images):
            found.append(_image_problem("spec.workers.image", self.worker_images, "workerImages"))
        managed = spec.redis.managed
        if managed is not None and not image_allowed(managed.image, self.redis_images):
            found.append(
                _image_problem("spec.redis.managed.image", self.redis_images, "redisImages")
            )
        volume = spec.output.volume
        if volume is not None:
            (kind,) = volume
            if kind not in self.volume_types:
                allowed = ", ".join(sorted(self.volume_types)) or "none"
                found.append(
                    f"spec.output.volume.{kind}: is not a volume type this operator allows"
                    f" (allowed: {allowed}); its administrator chooses them"
                    " (chart value policy.volumeTypes)"
                )
        if spec.redis.url is not None:
            problem = self.redis_url_problem(REDIS_URL_FIELD, spec.redis.url)
            if problem is not None:
                found.append(problem)
        return found

    def redis_url_problem(self, field: str, url: str) -> str | None:
        """Why the operator must not connect to ``url`` (None: it may). Names the host only:
        the URL may carry a password."""
        if redis_host_allowed(url, self.redis_hosts):
            return None
        try:
            host = urlsplit(url).hostname or "a unix socket"
        except ValueError:
            host = "an unreadable host"
        allowed = ", ".join(self.redis_hosts) or "none: every job gets a managed Redis"
        return (
            f"{field}: names a Redis on {host}, which this operator does not connect to"
            f" (allowed: {allowed}); leave redis unset for a managed one, or ask its"
            " administrator (chart value policy.redisUrls)"
        )

    @staticmethod
    def secret_uses(spec: CrawlJobSpec) -> list[SecretUse]:
        """Every Secret of the job's namespace that the spec names."""
        uses: list[SecretUse] = []
        if spec.redis.secret_ref is not None:
            uses.append(SecretUse(REDIS_SECRET_FIELD, spec.redis.secret_ref.name))
        s3 = spec.output.s3
        if s3 is not None and s3.secret_ref is not None:
            uses.append(SecretUse("spec.output.s3.secretRef.name", s3.secret_ref.name))
        if spec.proxy is not None and spec.proxy.secret_ref is not None:
            uses.append(SecretUse(PROXY_SECRET_FIELD, spec.proxy.secret_ref.name))
        return uses

    def secret_problem(self, use: SecretUse, labels: Mapping[str, str] | None) -> str | None:
        """Why the job may not use the Secret (None: it may); ``labels`` None: no such Secret."""
        if labels is None:
            return f"{use.field}: Secret {use.name} does not exist in the job's namespace"
        subject = f"{use.field}: Secret {use.name}"
        return _missing_label(subject, "Secret", "use a Secret", self.secret_label, labels)

    def seed_list_problem(
        self, where: str, name: str, labels: Mapping[str, str] | None
    ) -> str | None:
        """Why the job may not read ConfigMap ``name`` as its seed list (None: it may);
        ``labels`` None: no such ConfigMap (the caller waits for it).

        Judged on the ConfigMap's metadata alone, and the sentence names the ConfigMap and the
        label, nothing of its content: it goes to the job's status and Events, which whoever
        wrote the job reads.
        """
        if labels is None:
            return None
        lets = "read a ConfigMap as their seed list"
        found = _missing_label(
            f"{where}: ConfigMap {name}", "ConfigMap", lets, self.seeds_label, labels
        )
        return None if found is None else f"{found}; its content was not read"


def _missing_label(
    subject: str,
    kind: str,
    lets: str,
    label: tuple[str, str] | None,
    labels: Mapping[str, str],
) -> str | None:
    """Why ``subject`` may not be used for want of ``label`` (None: it carries it, or the
    policy asks for none)."""
    if label is None:
        return None
    key, value = label
    if labels.get(key) == value:
        return None
    return (
        f"{subject} is not labelled {key}={value}, the label that lets CrawlJobs {lets}"
        f" (add it if this {kind} is meant for crawlfleet)"
    )


def _image_problem(field: str, allowed: tuple[str, ...], value: str) -> str:
    return (
        f"{field}: is not an image this operator allows (allowed: {', '.join(allowed)});"
        f" its administrator chooses them (chart value policy.{value})"
    )


def _redis_hosts(entries: tuple[str, ...]) -> tuple[str, ...]:
    """The allowed Redis hosts, each checked once at startup (a network must parse)."""
    for entry in entries:
        if "/" in entry:
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                raise ConfigError(
                    f"CRAWLFLEET_ALLOWED_REDIS_HOSTS: {entry!r} is not an IP network such as"
                    " 10.20.0.0/16"
                ) from None
    return tuple(entry.strip() for entry in entries if entry.strip())


def _label(text: str, source: str) -> tuple[str, str] | None:
    """``key=value`` as a pair; empty: None (no label required). ``source`` names the setting."""
    text = text.strip()
    if not text:
        return None
    key, sep, value = text.partition("=")
    if not sep or not key.strip() or not value.strip():
        raise ConfigError(
            f"{source}={text!r}: must be key=value, such as crawlfleet.io/crawljob-secret=true"
        )
    return key.strip(), value.strip()
