"""The CrawlJob resource: spec and status models, their defaults and their validation.

This package is the one source of truth for what a CrawlJob may say: the CLI (``crawlfleet run
job.yaml``), the operator, the workers (which receive ``spec.to_mapping()``) and the CRD all take
their defaults and rules from here, so a job that ``crawlfleet run`` accepts is a job the cluster
accepts, and the other way round. Every layer reads it, so it imports none of them: only the pure
helpers of the ground floor (``crawlfleet.errors``, ``hosts``, ``urls``, ``destinations``,
``patterns``, ``selection``; tests/unit/test_layout.py holds the rule).

Field names are the contract of DESIGN.md §2: camelCase on the wire (the aliases), snake_case in
Python. Every invalid document becomes one ``ConfigError`` listing every problem, one per line,
each with its path from the document root (``spec.dedup.errorRate: ...``), because a user fixing a
YAML file wants all the mistakes at once and in the words of the file.

One module per spec section, as Kubernetes keeps one file per kind:

* ``seeds`` (seeds, seedsFrom and its lists), ``scope``, ``dedup``, ``concurrency`` (concurrency
  and workers), ``faults`` (retry and lease), ``fetch`` (fetch and userAgent), ``robots``,
  ``redis``, ``output``, ``extract``, ``scrapy`` (crawler.scrapy), ``recrawl`` (revisit rules
  and their pure policy: ``rule_for``, ``next_interval``), ``schedule`` (recurring runs),
  ``files`` (which URLs are downloaded as files, and their limits), ``frontier`` (its
  partitions by host, past one Redis);
* ``spec`` puts the sections together with the rules across them, ``status`` is what the operator
  observed, ``resource`` the whole document, ``loading`` reads one from a mapping or a file;
* beneath them, ``validation`` (problems in the user's words), ``base`` (the pydantic bases and
  the markers that state a rule in Python and in CEL), ``fields`` (types several sections
  share) and ``durations`` (Go duration strings in YAML, seconds in Python).

Rules, and where a CRD generator finds them:

* per-field rules (type, range, pattern, regex compiles, URL shape) sit on the fields, as
  ``Range``/``Pattern`` markers (which also write ``minimum``/``maximum``/``pattern`` into the
  JSON schema) or as validators of single values, beside a ``Cel`` marker where CEL can say
  the same (the seed URL shape);
* cross-field rules are ``Rule`` objects in each section's ``cross_field_rules``, each with its
  message and the same rule in CEL (for ``x-kubernetes-validations``). They are:
  workers ``minReplicas <= maxReplicas``; lease ``heartbeatSeconds < deadAfterSeconds`` and
  ``heartbeatSeconds < ttlSeconds``; retry ``backoffMaxSeconds >= backoffBaseSeconds``; redis
  "at most one of url, secretRef, managed"; a recrawl rule's "exactly one of match and kind",
  ``minInterval <= maxInterval`` and ``interval`` between them; a files rule's "at least one
  of match, context and contentTypes"; among others (the CRD test
  counts them all).
* durations (``recrawl[].interval``) are Go duration strings in YAML, checked by CEL's
  ``duration()``, and seconds in Python (``durations.DurationRange``).
* two defaults depend on other fields and so cannot be CRD defaults: ``scope.allowedDomains``
  (the seed hosts) and ``redis.managed`` (when neither url nor secretRef is given). The models fill
  them, so every consumer sees them filled.

The docstring under each field is its description for users: ``crawlfleet/operator/crd.py``
turns these models into the CRD (``kubectl explain``) and the field tables of docs/crawljob.md,
so a field, default, bound, rule or description changes here and nowhere else.
"""

from crawlfleet.crawljob.base import Rule
from crawlfleet.crawljob.concurrency import ConcurrencySpec, WorkersSpec
from crawlfleet.crawljob.dedup import DedupSpec
from crawlfleet.crawljob.extract import ExtractField, ExtractRule, ExtractSelector
from crawlfleet.crawljob.faults import LeaseSpec, RetrySpec
from crawlfleet.crawljob.fetch import DEFAULT_USER_AGENT, FetchSpec
from crawlfleet.crawljob.fields import STRING_SHAPES
from crawlfleet.crawljob.files import FileElement, FileRuleSpec, FilesSpec
from crawlfleet.crawljob.frontier import FrontierSpec
from crawlfleet.crawljob.loading import load_crawljob, parse_crawljob, read_seed_file
from crawlfleet.crawljob.output import CredentialsSecretRef, OutputSpec, S3Spec
from crawlfleet.crawljob.proxy import ProxySecretRef, ProxySpec, checked_proxies, proxy_plan
from crawlfleet.crawljob.recrawl import (
    Adaptive,
    Change,
    DocumentKind,
    RecrawlRule,
    next_interval,
    rule_for,
)
from crawlfleet.crawljob.redis import ManagedRedis, Persistence, RedisSpec, SecretRef
from crawlfleet.crawljob.resource import API_VERSION, KIND, CrawlJob, ObjectMeta
from crawlfleet.crawljob.robots import RobotsSpec
from crawlfleet.crawljob.schedule import ScheduleSpec
from crawlfleet.crawljob.scope import ScopeSpec
from crawlfleet.crawljob.scrapy import CrawlerSpec, ScrapySpec
from crawlfleet.crawljob.seed_list import SeedListBounds, parse_seed_list
from crawlfleet.crawljob.seeds import ConfigMapKeyRef, SeedsFrom
from crawlfleet.crawljob.spec import CrawlJobSpec
from crawlfleet.crawljob.status import (
    Condition,
    CrawlJobStatus,
    FilesStatus,
    FleetStatus,
    FreshnessStatus,
    Phase,
    RunStatus,
)

__all__ = [
    "API_VERSION",
    "DEFAULT_USER_AGENT",
    "KIND",
    "STRING_SHAPES",
    "Adaptive",
    "Change",
    "ConcurrencySpec",
    "Condition",
    "ConfigMapKeyRef",
    "CrawlJob",
    "CrawlJobSpec",
    "CrawlJobStatus",
    "CrawlerSpec",
    "CredentialsSecretRef",
    "DedupSpec",
    "DocumentKind",
    "ExtractField",
    "ExtractRule",
    "ExtractSelector",
    "FetchSpec",
    "FileElement",
    "FileRuleSpec",
    "FilesSpec",
    "FilesStatus",
    "FleetStatus",
    "FreshnessStatus",
    "FrontierSpec",
    "LeaseSpec",
    "ManagedRedis",
    "ObjectMeta",
    "OutputSpec",
    "Persistence",
    "Phase",
    "ProxySecretRef",
    "ProxySpec",
    "RecrawlRule",
    "RedisSpec",
    "RetrySpec",
    "RobotsSpec",
    "Rule",
    "RunStatus",
    "S3Spec",
    "ScheduleSpec",
    "ScopeSpec",
    "ScrapySpec",
    "SecretRef",
    "SeedListBounds",
    "SeedsFrom",
    "WorkersSpec",
    "checked_proxies",
    "load_crawljob",
    "next_interval",
    "parse_crawljob",
    "parse_seed_list",
    "proxy_plan",
    "read_seed_file",
    "rule_for",
]
