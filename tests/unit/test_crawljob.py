"""The CrawlJob model: defaults, every validation rule, error reporting and loading."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from crawlfleet import crawljob
from crawlfleet.crawljob import (
    DEFAULT_USER_AGENT,
    CrawlJob,
    CrawlJobSpec,
    CrawlJobStatus,
    DedupSpec,
    Rule,
    load_crawljob,
    parse_crawljob,
)
from crawlfleet.errors import ConfigError

SEED = "https://example.com/start"


def job_doc(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "crawlfleet.io/v1alpha1",
        "kind": "CrawlJob",
        "metadata": {"name": "books", "namespace": "crawl"},
        "spec": {"seeds": [SEED], **spec},
    }


def merged(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    result = copy.deepcopy(base)
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merged(result[key], value)
        else:
            result[key] = value
    return result


def config_error(doc: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_crawljob(doc)
    return str(caught.value)


# --- defaults -------------------------------------------------------------------------------


def test_minimal_spec_fills_every_default() -> None:
    spec = CrawlJobSpec.from_mapping({"seeds": [SEED]})

    assert spec.to_mapping() == {
        "seeds": [SEED],
        "scope": {
            "allowedDomains": ["example.com"],
            "maxDepth": 3,
            "maxPages": 0,
            "maxPagesPerHost": 0,
            "maxQueuedPerHost": 0,
            "maxPagesPerDomain": 0,
            "maxQueuedPerDomain": 0,
            "include": [],
            "exclude": [],
            "allowPrivateNetworks": False,
            "respectNofollow": True,
            "maxLinksPerPage": 6000,
            "maxPathSegments": 20,
            "maxRepeatedSegments": 2,
            "sitemaps": False,
        },
        "dedup": {"capacity": 1_000_000, "errorRate": 0.01},
        "concurrency": {"perWorker": 16, "perHost": 2, "hostDelaySeconds": 1.0},
        "workers": {
            "minReplicas": 1,
            "maxReplicas": 10,
            "targetBacklogPerReplica": 500,
            "scaleDownDelaySeconds": 60.0,
            "autoscale": "internal",
        },
        "retry": {
            "requestAttempts": 3,
            "taskAttempts": 5,
            "backoffBaseSeconds": 1.0,
            "backoffFactor": 1.8,
            "backoffMaxSeconds": 30.0,
        },
        "lease": {"ttlSeconds": 60.0, "heartbeatSeconds": 5.0, "deadAfterSeconds": 20.0},
        "redis": {
            "managed": {
                "image": "redis:7.4-alpine",
                "persistence": {"enabled": True, "size": "1Gi"},
                "memoryRequest": "256Mi",
                "memoryLimit": "1Gi",
            },
            "onLoss": "Fail",
        },
        "frontier": {"shards": 1, "waitReplicas": 0},
        "output": {
            "format": "jsonl",
            "maxFileBytes": 256 * 1024 * 1024,
            "content": "none",
            "maxContentBytes": 2 * 1024 * 1024,
            "maxFileAgeSeconds": 30.0,
            "ephemeral": False,
        },
        "extract": [],
        "parserTimeoutSeconds": 5.0,
        "robots": {
            "obey": True,
            "ttlSeconds": 86_400.0,
            "errorTtlSeconds": 600.0,
            "giveUpAfterSeconds": 3600.0,
            "maxCrawlDelaySeconds": 60.0,
        },
        "userAgent": DEFAULT_USER_AGENT,
        "fetch": {
            "connectTimeoutSeconds": 5.0,
            "readTimeoutSeconds": 20.0,
            "totalTimeoutSeconds": 60.0,
            "maxBodyBytes": 10 * 1024 * 1024,
            "maxRedirects": 5,
            "maxDecompressedBytes": 50 * 1024 * 1024,
        },
        "recrawl": [],
        "suspend": False,
    }
    assert spec.ttl_seconds_after_finished is None
    assert spec.workers.image is None
    assert spec.redis.url is None
    assert spec.redis.secret_ref is None


def test_python_attributes_are_snake_case() -> None:
    spec = CrawlJobSpec.from_mapping({"seeds": [SEED]})

    assert spec.dedup.error_rate == 0.01
    assert spec.lease.heartbeat_seconds == 5.0
    assert spec.concurrency.host_delay_seconds == 1.0
    assert DedupSpec(error_rate=0.1).error_rate == 0.1  # populate_by_name for Python callers


def test_allowed_domains_default_to_the_seed_hosts() -> None:
    spec = CrawlJobSpec.from_mapping(
        {
            "seeds": [
                "https://Example.COM:8443/a",
                "http://example.com/b",
                "http://bücher.de/",
                "http://[::1]:8080/",
                "http://10.0.0.1/",
            ]
        }
    )

    assert spec.scope.allowed_domains == ("example.com", "xn--bcher-kva.de", "::1", "10.0.0.1")


def test_empty_allowed_domains_also_means_the_seed_hosts() -> None:
    spec = CrawlJobSpec.from_mapping({"seeds": [SEED], "scope": {"allowedDomains": []}})

    assert spec.scope.allowed_domains == ("example.com",)


def test_allowed_domains_are_normalised() -> None:
    spec = CrawlJobSpec.from_mapping(
        {
            "seeds": [SEED],
            "scope": {
                "allowedDomains": [
                    "Example.COM",
                    "example.com",
                    "docs.example.com:8080",
                    "[::1]:8080",
                    "2001:DB8::1",
                    "127.0.0.1:80",
                    "example.org.",
                ]
            },
        }
    )

    assert spec.scope.allowed_domains == (
        "example.com",
        "docs.example.com:8080",
        "[::1]:8080",
        "2001:db8::1",
        "127.0.0.1:80",
        "example.org",
    )


def test_internationalised_hosts_are_idna_2008_not_python_s_idna_2003() -> None:
    spec = CrawlJobSpec.from_mapping(
        {"seeds": ["http://fa\u00df.de/"], "scope": {"allowedDomains": []}}
    )
    explicit = CrawlJobSpec.from_mapping(
        {"seeds": [SEED], "scope": {"allowedDomains": ["Fa\u00df.de", "stra\u00dfe.de:8080"]}}
    )

    assert spec.scope.allowed_domains == ("xn--fa-hia.de",)  # IDNA 2003 says fass.de
    assert explicit.scope.allowed_domains == ("xn--fa-hia.de", "xn--strae-oqa.de:8080")


def test_a_seed_with_credentials_is_refused_without_echoing_them() -> None:
    message = config_error(job_doc(seeds=["https://ann:s3cret@example.com/"]))

    assert "spec.seeds[0]: must not hold a user name or password" in message
    assert "s3cret" not in message
    # A seed wrong in another way too is shown, but masked (the message becomes an Event).
    other = config_error(job_doc(seeds=["http://ann:s3cret@example.com:0/p?q=@x"]))
    assert '(got "http://***@example.com:0/p?q=@x")' in other
    assert "s3cret" not in other


@pytest.mark.parametrize(
    "seed", ["http://example.com:0/", "http://a_b.example/", "http://\U0001f4a9.la/"]
)
def test_a_seed_the_frontier_could_not_crawl_is_refused(seed: str) -> None:
    assert "spec.seeds[0]: must be an absolute http(s) URL" in config_error(job_doc(seeds=[seed]))


def test_url_patterns_are_re2_each_alone_and_the_list_together() -> None:
    many = [f"[a-z]{{1,1000}}x{index}" for index in range(100)]
    message = config_error(
        job_doc(scope={"include": ["ok", "a{99999999999}", "(?=x)"], "exclude": many})
    )

    assert message.splitlines()[1:] == [
        "  spec.scope.include[1]: is not a valid RE2 pattern: invalid repeat count: {99999999999}",
        "  spec.scope.include[2]: is not a valid RE2 pattern: invalid perl operator: (?=",
        "  spec.scope.exclude: are too large to match together (each is valid alone):"
        " use fewer or simpler ones",
    ]


def test_two_patterns_naming_the_same_group_are_accepted() -> None:
    spec = CrawlJobSpec.from_mapping(
        {"seeds": [SEED], "scope": {"include": ["/(?P<id>[0-9]+)", "/x/(?P<id>[a-z]+)"]}}
    )
    assert len(spec.scope.include) == 2


def test_redis_defaults_to_managed_only_when_nothing_else_is_given() -> None:
    by_url = CrawlJobSpec.from_mapping({"seeds": [SEED], "redis": {"url": "redis://r:6379/0"}})
    by_secret = CrawlJobSpec.from_mapping({"seeds": [SEED], "redis": {"secretRef": {"name": "r"}}})

    assert by_url.redis.managed is None
    assert by_secret.redis.managed is None
    assert by_secret.redis.secret_ref is not None
    assert by_secret.redis.secret_ref.key == "url"


def test_redis_url_is_not_shown_in_repr() -> None:
    spec = CrawlJobSpec.from_mapping(
        {"seeds": [SEED], "redis": {"url": "redis://:hunter2@r:6379/0"}}
    )

    assert "hunter2" not in repr(spec)


def test_models_are_frozen() -> None:
    spec = CrawlJobSpec.from_mapping({"seeds": [SEED]})

    with pytest.raises(ValidationError):
        spec.dedup.capacity = 5
    assert isinstance(spec.seeds, tuple)


# --- the rules, one bad value each ----------------------------------------------------------

RULE_CASES: list[tuple[dict[str, Any], str]] = [
    ({"seeds": []}, "spec.seeds: must not be empty"),
    ({"seeds": ["ftp://example.com/"]}, "spec.seeds[0]: must be an absolute http(s) URL"),
    ({"seeds": [SEED, "example.com/x"]}, "spec.seeds[1]: must be an absolute http(s) URL"),
    ({"seeds": ["http:///path"]}, "spec.seeds[0]: must be an absolute http(s) URL"),
    ({"seeds": ["http://exa mple.com/"]}, "spec.seeds[0]: must be an absolute http(s) URL"),
    ({"seeds": ["http://example.com:99999/"]}, "spec.seeds[0]: must be an absolute http(s) URL"),
    (
        {"dedup": {"errorRate": 0.7}},
        "spec.dedup.errorRate: must be at least 1e-09 and less than 0.5 (got 0.7)",
    ),
    ({"dedup": {"errorRate": 0}}, "spec.dedup.errorRate: must be at least 1e-09 and less than"),
    ({"dedup": {"errorRate": float("nan")}}, "spec.dedup.errorRate: must be a finite number"),
    ({"dedup": {"errorRate": "0.1"}}, 'spec.dedup.errorRate: must be a number (got "0.1")'),
    ({"dedup": {"capacity": 0}}, "spec.dedup.capacity: must be between 1 and 10000000000"),
    ({"dedup": {"capacity": 10**11}}, "spec.dedup.capacity: must be between 1 and 10000000000"),
    ({"dedup": {"capacity": "1000"}}, 'spec.dedup.capacity: must be an integer (got "1000")'),
    (
        {"workers": {"minReplicas": 11}},
        "spec.workers.minReplicas: must not be greater than maxReplicas"
        " (got minReplicas=11, maxReplicas=10)",
    ),
    ({"workers": {"minReplicas": -1}}, "spec.workers.minReplicas: must be between 0 and 1000"),
    ({"workers": {"maxReplicas": 1001}}, "spec.workers.maxReplicas: must be between 1 and 1000"),
    ({"workers": {"autoscale": "hpa"}}, "spec.workers.autoscale: must be one of"),
    ({"concurrency": {"perWorker": 0}}, "spec.concurrency.perWorker: must be between 1 and 1024"),
    (
        {"concurrency": {"perWorker": 1025}},
        "spec.concurrency.perWorker: must be between 1 and 1024 (got 1025)",
    ),
    ({"concurrency": {"perHost": 257}}, "spec.concurrency.perHost: must be between 1 and 256"),
    (
        {"concurrency": {"hostDelaySeconds": -1}},
        "spec.concurrency.hostDelaySeconds: must be between 0 and 3600",
    ),
    (
        {"concurrency": {"hostDelaySeconds": 3601}},
        "spec.concurrency.hostDelaySeconds: must be between 0 and 3600",
    ),
    (
        {"scope": {"include": ["ok", "[a-"]}},
        "spec.scope.include[1]: is not a valid RE2 pattern: missing ]: [a-",
    ),
    (
        {"scope": {"exclude": ["(x"]}},
        "spec.scope.exclude[0]: is not a valid RE2 pattern: missing ): (x",
    ),
    (
        {"scope": {"allowedDomains": ["example.com", "not a host"]}},
        "spec.scope.allowedDomains[1]: must be a host name or IP address",
    ),
    (
        {"scope": {"allowedDomains": ["example.com:70000"]}},
        "spec.scope.allowedDomains[0]: must be a host name or IP address",
    ),
    (
        {"scope": {"allowedDomains": ["https://example.com"]}},
        "spec.scope.allowedDomains[0]: must be a host name or IP address",
    ),
    (
        {"scope": {"allowedDomains": ["[example.com]:80"]}},
        "spec.scope.allowedDomains[0]: must be a host name or IP address",
    ),
    (
        {"scope": {"allowedDomains": ["*.example.com"]}},
        "spec.scope.allowedDomains[0]: must be a host name or IP address",
    ),
    ({"scope": {"maxDepth": -1}}, "spec.scope.maxDepth: must be between 0 and 1000000"),
    ({"scope": {"maxDepth": "3"}}, "spec.scope.maxDepth: must be an integer"),
    ({"scope": {"allowPrivateNetworks": "yes"}}, "spec.scope.allowPrivateNetworks: must be true"),
    (
        {"lease": {"heartbeatSeconds": 20}},
        "spec.lease.heartbeatSeconds: must be less than deadAfterSeconds",
    ),
    (
        {"lease": {"heartbeatSeconds": 30, "deadAfterSeconds": 90, "ttlSeconds": 30}},
        "spec.lease.heartbeatSeconds: must be less than ttlSeconds",
    ),
    ({"lease": {"ttlSeconds": 0}}, "spec.lease.ttlSeconds: must be between 1 and 86400"),
    ({"retry": {"backoffFactor": 0.5}}, "spec.retry.backoffFactor: must be between 1 and 10"),
    (
        {"retry": {"backoffBaseSeconds": -1}},
        "spec.retry.backoffBaseSeconds: must be between 0 and 3600",
    ),
    (
        {"retry": {"backoffBaseSeconds": 10, "backoffMaxSeconds": 5}},
        "spec.retry.backoffMaxSeconds: must be at least backoffBaseSeconds",
    ),
    ({"retry": {"requestAttempts": 0}}, "spec.retry.requestAttempts: must be between 1 and 100"),
    ({"retry": {"taskAttempts": 0}}, "spec.retry.taskAttempts: must be between 1 and 100"),
    (
        {"fetch": {"connectTimeoutSeconds": 0}},
        "spec.fetch.connectTimeoutSeconds: must be greater than 0",
    ),
    ({"fetch": {"readTimeoutSeconds": -1}}, "spec.fetch.readTimeoutSeconds: must be greater than"),
    ({"fetch": {"totalTimeoutSeconds": 0}}, "spec.fetch.totalTimeoutSeconds: must be greater"),
    ({"fetch": {"maxBodyBytes": 0}}, "spec.fetch.maxBodyBytes: must be between 1 and 1073741824"),
    ({"fetch": {"maxRedirects": -1}}, "spec.fetch.maxRedirects: must be between 0 and 100"),
    (
        {"redis": {"url": "redis://r", "secretRef": {"name": "r"}}},
        "spec.redis: url, secretRef and managed are alternatives: set at most one",
    ),
    (
        {"redis": {"url": "http://r"}},
        "spec.redis.url: must be a redis://host[:port][/db], rediss://host[:port][/db], unix:///path",
    ),
    (
        {"redis": {"url": "redis://[::1"}},
        "spec.redis.url: must be a redis://host[:port][/db], rediss://host[:port][/db], unix:///path",
    ),
    ({"redis": {"secretRef": {"name": "Bad_Name"}}}, "spec.redis.secretRef.name: must be a"),
    (
        {"redis": {"managed": {"persistence": {"size": "lots"}}}},
        "spec.redis.managed.persistence.size: must be a Kubernetes quantity",
    ),
    ({"output": {"format": "xml"}}, "spec.output.format: must be one of"),
    (
        {"output": {"maxFileBytes": 0}},
        "spec.output.maxFileBytes: must be between 1 and 68719476736",
    ),
    ({"userAgent": "bot\r\nX-Evil: 1"}, "spec.userAgent: must be a non-empty header value"),
    ({"suspend": "no"}, "spec.suspend: must be true or false"),
    (
        {"ttlSecondsAfterFinished": -1},
        "spec.ttlSecondsAfterFinished: must be between 0 and 31536000",
    ),
    ({"dedup": [1, 2]}, "spec.dedup: must be a mapping (got a list)"),
]


@pytest.mark.parametrize(("patch", "expected"), RULE_CASES)
def test_each_rule_rejects_a_bad_value_naming_the_field(
    patch: dict[str, Any], expected: str
) -> None:
    message = config_error(merged(job_doc(), {"spec": patch}))

    assert expected in message
    assert "pydantic" not in message


def test_the_error_rate_message_is_exact() -> None:
    message = config_error(job_doc(dedup={"errorRate": 0.7}))

    assert message.splitlines()[1:] == [
        "  spec.dedup.errorRate: must be at least 1e-09 and less than 0.5 (got 0.7)"
    ]


def test_a_redis_url_is_never_echoed_in_an_error() -> None:
    message = config_error(job_doc(redis={"url": "http://:hunter2@r"}))

    assert "hunter2" not in message


def test_the_boundaries_themselves_are_accepted() -> None:
    spec = CrawlJobSpec.from_mapping(
        {
            "seeds": [SEED],
            "dedup": {"capacity": 10_000_000_000, "errorRate": 0.49},
            # A filter of ten billion URLs fits only the largest managed Redis.
            "redis": {"managed": {"memoryLimit": "1Ti"}},
            "concurrency": {"perWorker": 1024, "perHost": 256, "hostDelaySeconds": 0},
            "workers": {"minReplicas": 0, "maxReplicas": 1000},
            "lease": {"ttlSeconds": 6, "heartbeatSeconds": 5, "deadAfterSeconds": 5.5},
            "retry": {"backoffFactor": 1, "backoffBaseSeconds": 0, "backoffMaxSeconds": 0},
        }
    )

    assert spec.workers.min_replicas == 0
    assert spec.concurrency.host_delay_seconds == 0


def test_every_problem_is_reported_together_one_per_line() -> None:
    doc = job_doc(
        seeds=["ftp://x"],
        dedup={"errorRate": 0.7},
        concurrency={"perHost": 0},
        workers={"minReplicas": 20},
        lease={"heartbeatSeconds": 90},
    )

    lines = config_error(doc).splitlines()

    assert lines[0] == "invalid CrawlJob (6 problems):"
    assert [line.split(": ")[0] for line in lines[1:]] == [
        "  spec.seeds[0]",
        "  spec.dedup.errorRate",
        "  spec.concurrency.perHost",
        "  spec.workers.minReplicas",
        "  spec.lease.heartbeatSeconds",
        "  spec.lease.heartbeatSeconds",
    ]


@pytest.mark.parametrize(
    ("patch", "expected"),
    [
        (
            {"dedup": {"errorRat": 0.1}},
            "spec.dedup.errorRat: unknown field; did you mean errorRate?",
        ),
        ({"seed": [SEED]}, "spec.seed: unknown field; did you mean seeds?"),
        (
            {"dedup": {"error_rate": 0.1}},
            "spec.dedup.error_rate: unknown field; did you mean errorRate?",
        ),
        ({"scope": {"zzz": 1}}, "spec.scope.zzz: unknown field (known: allowPrivateNetworks"),
        (
            {"redis": {"managed": {"persistence": {"storageClass": "x"}}}},
            "spec.redis.managed.persistence.storageClass: unknown field;"
            " did you mean storageClassName?",
        ),
    ],
)
def test_unknown_fields_are_refused_by_name(patch: dict[str, Any], expected: str) -> None:
    assert expected in config_error(merged(job_doc(), {"spec": patch}))


def test_spec_from_mapping_roots_paths_at_spec() -> None:
    with pytest.raises(ConfigError, match=r"spec\.dedup\.errorRate: must be at least 1e-09"):
        CrawlJobSpec.from_mapping({"seeds": [SEED], "dedup": {"errorRate": 1}})
    with pytest.raises(ConfigError, match=r"spec\.seeds: must not be empty: a job needs seeds"):
        CrawlJobSpec.from_mapping({})
    with pytest.raises(ConfigError, match="expected a mapping"):
        CrawlJobSpec.from_mapping([SEED])  # type: ignore[arg-type]


# --- the whole resource -------------------------------------------------------------------


def test_parse_crawljob_reads_metadata_and_job_id() -> None:
    job = parse_crawljob(job_doc())

    assert job.metadata.name == "books"
    assert job.metadata.namespace == "crawl"
    assert job.job_id == "crawl.books"
    assert job.status is None


def test_namespace_defaults_to_default() -> None:
    doc = job_doc()
    doc["metadata"] = {"name": "books.v2"}

    assert parse_crawljob(doc).job_id == "default.books.v2"


@pytest.mark.parametrize(
    ("patch", "expected"),
    [
        ({"apiVersion": "crawlfleet.io/v1"}, "apiVersion: must be 'crawlfleet.io/v1alpha1'"),
        ({"kind": "Job"}, "kind: must be 'CrawlJob' (got \"Job\")"),
        ({"metadata": {"name": "Books"}}, "metadata.name: must be a lowercase RFC 1123 name"),
        ({"metadata": {"name": "a" * 254}}, "metadata.name: must be a lowercase RFC 1123 name"),
        ({"metadata": {"namespace": "a.b"}}, "metadata.namespace: must be a lowercase RFC 1123"),
        ({"metadata": {"namepsace": "x"}}, "metadata.namepsace: unknown field; did you mean"),
        ({"specs": {}}, "specs: unknown field; did you mean spec?"),
    ],
)
def test_the_resource_envelope_is_checked(patch: dict[str, Any], expected: str) -> None:
    assert expected in config_error(merged(job_doc(), patch))


def test_missing_api_version_and_kind_are_refused() -> None:
    message = config_error({"metadata": {"name": "x"}, "spec": {"seeds": [SEED]}})

    assert "apiVersion: is required" in message
    assert "kind: is required" in message


def test_server_side_metadata_is_accepted() -> None:
    doc = merged(
        job_doc(),
        {
            "metadata": {
                "uid": "0b1c",
                "resourceVersion": "42",
                "generation": 3,
                "creationTimestamp": "2024-05-01T10:00:00Z",
                "labels": {"team": "search"},
                "managedFields": [{"manager": "kubectl"}],
            }
        },
    )

    assert parse_crawljob(doc).metadata.generation == 3


def test_round_trip_through_to_mapping_gives_the_same_model() -> None:
    spec = CrawlJobSpec.from_mapping(
        {
            "seeds": [SEED, "http://other.example/"],
            "scope": {"include": [r"^https://example\.com/books/"], "maxPages": 100},
            "dedup": {"capacity": 5_000, "errorRate": 0.001},
            "workers": {"maxReplicas": 3, "resources": {"limits": {"cpu": "1"}}},
            "redis": {"secretRef": {"name": "redis-auth", "key": "uri"}},
            "output": {"format": "warc", "volume": {"persistentVolumeClaim": {"claimName": "c"}}},
            "ttlSecondsAfterFinished": 600,
        }
    )

    assert CrawlJobSpec.from_mapping(spec.to_mapping()) == spec

    job = parse_crawljob(job_doc(**spec.to_mapping()))
    again = parse_crawljob(
        {**job.model_dump(mode="json", by_alias=True, exclude_none=True), "spec": spec.to_mapping()}
    )
    assert again == job


def test_status_is_parsed_tolerantly_and_dumps_camel_case() -> None:
    doc = job_doc()
    doc["status"] = {
        "phase": "Running",
        "conditions": [
            {
                "type": "Progressing",
                "status": "True",
                "reason": "Crawling",
                "lastTransitionTime": "2024-05-01T10:00:00Z",
            }
        ],
        "inFlight": 4,
        "pagesPerSecond": 12.5,
        "startTime": "2024-05-01T10:00:00Z",
        "fieldFromANewerOperator": 1,
    }

    status = parse_crawljob(doc).status

    assert status is not None
    assert status.phase == "Running"
    assert status.in_flight == 4
    assert status.conditions[0].last_transition_time is not None
    assert status.to_mapping()["inFlight"] == 4
    assert status.to_mapping()["startTime"] == "2024-05-01T10:00:00Z"
    assert CrawlJobStatus().phase == "Pending"
    with pytest.raises(ConfigError, match=r"status\.phase: must be one of"):
        parse_crawljob({**doc, "status": {"phase": "Done"}})


def test_every_cross_field_rule_names_a_real_field_and_carries_cel() -> None:
    sections: list[type[BaseModel]] = [
        cls
        for cls in vars(crawljob).values()
        if isinstance(cls, type) and issubclass(cls, BaseModel) and "cross_field_rules" in vars(cls)
    ]
    rules: list[tuple[type[BaseModel], Rule[Any]]] = [
        (cls, rule) for cls in sections for rule in vars(cls)["cross_field_rules"]
    ]

    assert len(rules) == 37
    for cls, rule in rules:
        aliases = {info.alias for info in cls.model_fields.values()}
        assert rule.field is None or rule.field.split(".")[0] in aliases
        assert {name.split(".")[0] for name in rule.shows} <= aliases
        # a rule over the section
        assert rule.cel.startswith(
            ("self.", "[", "has(self.", "!has(self.", "!isQuantity(self.", "!self.")
        )
        assert rule.message


# --- files --------------------------------------------------------------------------------

JOB_YAML = """\
apiVersion: crawlfleet.io/v1alpha1
kind: CrawlJob
metadata:
  name: books
spec:
  seeds:
    - https://books.example/
  dedup:
    capacity: 200000
  lease:
    heartbeatSeconds: 2
"""


def test_load_crawljob_reads_a_yaml_file(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(JOB_YAML)

    job = load_crawljob(path)

    assert isinstance(job, CrawlJob)
    assert job.job_id == "default.books"
    assert job.spec.dedup.capacity == 200_000
    assert job.spec.lease.heartbeat_seconds == 2
    assert job.spec.scope.allowed_domains == ("books.example",)
    assert load_crawljob(str(path)) == job


def test_a_trailing_document_separator_is_fine(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("---\n" + JOB_YAML + "---\n")

    assert load_crawljob(path).metadata.name == "books"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            JOB_YAML + "---\n" + JOB_YAML,
            "holds 2 YAML documents; a CrawlJob file holds exactly one",
        ),
        ("", "holds no YAML documents"),
        ("- a\n- b\n", "expected a mapping, got list"),
        ("spec: [unclosed\n", "not valid YAML"),
        (JOB_YAML + "spec:\n  seeds: [http://evil.example/]\n", "duplicate key 'spec'"),
        (JOB_YAML.replace("name: books", "name: Books"), "metadata.name: must be"),
    ],
)
def test_load_crawljob_refuses_bad_files_naming_them(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(text)

    with pytest.raises(ConfigError) as caught:
        load_crawljob(path)

    assert str(path) in str(caught.value)
    assert expected in str(caught.value)


def test_yaml_errors_carry_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("apiVersion: x\nspec: [unclosed\n")

    with pytest.raises(ConfigError, match=r"job\.yaml:\d+:\d+: not valid YAML"):
        load_crawljob(path)


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read CrawlJob file"):
        load_crawljob(tmp_path / "absent.yaml")


# --- bounds and rules that later components would otherwise enforce ------------------------


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            {"scope": {"maxPages": 2_000_000}},
            "spec.scope.maxPages: must not be greater than dedup.capacity: the Bloom filter is"
            " sized for capacity URLs, and past it new URLs are taken for seen and never crawled"
            " (got scope.maxPages=2000000, dedup.capacity=1000000)",
        ),
        (
            {"fetch": {"connectTimeoutSeconds": 30, "totalTimeoutSeconds": 10}},
            "spec.fetch.totalTimeoutSeconds: must be at least connectTimeoutSeconds and"
            " readTimeoutSeconds",
        ),
        (
            {"fetch": {"maxBodyBytes": 2048, "maxDecompressedBytes": 1024}},
            "spec.fetch.maxDecompressedBytes: must be at least maxBodyBytes",
        ),
        ({"lease": {"ttlSeconds": 0.5}}, "spec.lease.ttlSeconds: must be between 1 and 86400"),
        ({"lease": {"heartbeatSeconds": 0.01}}, "spec.lease.heartbeatSeconds: must be between 0.1"),
        ({"dedup": {"errorRate": 1e-10}}, "spec.dedup.errorRate: must be at least 1e-09"),
        ({"concurrency": {"perHost": 257}}, "spec.concurrency.perHost: must be between 1 and 256"),
        ({"scope": {"include": ["x"] * 101}}, "spec.scope.include: must hold at most 100 items"),
        (
            {"scope": {"exclude": ["a" * 1025]}},
            "spec.scope.exclude[0]: must be at most 1024 characters long (got 1025)",
        ),
        (
            {"scope": {"allowedDomains": ["a.test"] * 1001}},
            "spec.scope.allowedDomains: must hold at most 1000 items (got 1001)",
        ),
        ({"userAgent": "x" * 1025}, "spec.userAgent: must be at most 1024 characters long"),
        ({"userAgent": "My Bot/1.0"}, "spec.userAgent: must start with a product token"),
        ({"userAgent": "/1.0"}, "spec.userAgent: must start with a product token"),
        ({"workers": {"image": "my image"}}, "spec.workers.image: must be a container image"),
        (
            {"workers": {"scaleDownDelaySeconds": 1e9}},
            "spec.workers.scaleDownDelaySeconds: must be",
        ),
        ({"retry": {"backoffFactor": 1000}}, "spec.retry.backoffFactor: must be between 1 and 10"),
        ({"scope": {"maxDepth": 10**30}}, "spec.scope.maxDepth: must be between 0 and 1000000"),
    ],
)
def test_bounds_and_rules_refuse_with_the_field_and_a_sentence(
    spec: dict[str, Any], expected: str
) -> None:
    assert expected in config_error(job_doc(**spec))


@pytest.mark.parametrize(
    "url",
    ["redis://r:99999", "redis://r:0", "redis://r/db", "redis://r/0?socket_timeout=x", "redis://",
     "unix://", "redis://r /0", "rediss://:pw@/0", "redis+cluster://:pw@r/1",
     "redis+cluster://", "redis+sentinel://r"],
)  # fmt: skip
def test_a_redis_url_redis_py_would_refuse_is_refused(url: str) -> None:
    message = config_error(job_doc(redis={"url": url}))
    assert "spec.redis.url: must be a redis://host[:port][/db]" in message
    assert "pw" not in message


@pytest.mark.parametrize(
    "url", ["redis://r", "redis://:pw@r:6379/2", "rediss://u:pw@r.example:6380", "unix:///r.sock",
            "redis://[::1]:6379/0", "redis+cluster://r:7000", "rediss+cluster://:pw@r.example/0"],
)  # fmt: skip
def test_redis_urls_redis_py_reads_are_accepted(url: str) -> None:
    assert CrawlJobSpec.from_mapping({"seeds": [SEED], "redis": {"url": url}}).redis.url == url


def test_worker_resources_are_checked_as_the_api_server_will_check_the_pod() -> None:
    ok = {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"cpu": 1, "memory": "1Gi"}}
    assert CrawlJobSpec.from_mapping({"seeds": [SEED], "workers": {"resources": ok}})

    message = config_error(
        job_doc(
            workers={
                "resources": {
                    "requests": {"cpu": "2", "memory": "lots"},
                    "limits": {"cpu": "500m"},
                    "limit": {},
                }
            }
        )
    )
    assert message.splitlines()[1:] == [
        "  spec.workers.resources.requests.memory: must be a Kubernetes quantity such as 500m"
        " or 1Gi",
        "  spec.workers.resources.limit: unknown field; a worker's resources take limits and"
        " requests",
        "  spec.workers.resources.requests.cpu: must not be greater than limits.cpu",
    ]


@pytest.mark.parametrize(
    ("volume", "expected"),
    [
        ({}, "spec.output.volume: must name exactly one volume source"),
        ({"emptyDir": {}, "hostPath": {"path": "/x"}}, "spec.output.volume: must name exactly one"),
        ({"persistentVolumeClam": {}}, "spec.output.volume.persistentVolumeClam: unknown field"),
        ({"nfs": "server"}, "spec.output.volume.nfs: must be a mapping"),
        ({"persistentVolumeClaim": {}}, "spec.output.volume.persistentVolumeClaim.claimName: is"),
    ],
)
def test_an_output_volume_is_one_volume_source(volume: dict[str, Any], expected: str) -> None:
    assert expected in config_error(job_doc(output={"volume": volume}))


def test_a_spec_the_workers_config_map_could_not_hold_is_refused() -> None:
    # ~600 seeds of 2048 characters: the API server stores it, a ConfigMap (1 MiB) could not.
    longest = [f"https://books.example/{index:05d}".ljust(2048, "p") for index in range(600)]
    message = config_error(job_doc(seeds=longest))
    assert "\n  spec: must be at most 880000 bytes as JSON to fit in the ConfigMap" in message
    fits = CrawlJobSpec.from_mapping({"seeds": longest[:420]})  # 863 kB
    assert len(fits.seeds) == 420


# --- spec.extract and output.content (issue 15) ----------------------------------------------


def test_extract_rules_round_trip_in_their_wire_names() -> None:
    rules = [
        {
            "match": "/shop/$",
            "each": {"css": "li.product"},
            "fields": {
                "name": {"css": "a::text"},
                "price": {"xpath": "./span/text()", "re": "[0-9.]+", "all": True},
                "link": {"css": "a", "attr": "href"},
            },
        }
    ]
    spec = CrawlJobSpec.from_mapping(
        {"seeds": [SEED], "extract": rules, "output": {"content": "text"}}
    )

    (rule,) = spec.extract
    assert rule.fields["price"].pattern == "[0-9.]+"
    assert rule.fields["price"].all_values
    assert spec.output.content == "text"
    wire = spec.to_mapping()["extract"]
    assert wire == [
        {
            "match": "/shop/$",
            "each": {"css": "li.product"},
            "fields": {
                "name": {"css": "a::text", "all": False},
                "price": {"xpath": "./span/text()", "re": "[0-9.]+", "all": True},
                "link": {"css": "a", "attr": "href", "all": False},
            },
        }
    ]
    assert CrawlJobSpec.from_mapping({"seeds": [SEED], "extract": wire}) == spec.model_copy(
        update={"output": CrawlJobSpec.from_mapping({"seeds": [SEED]}).output}
    )


def test_every_bad_selector_of_a_rule_is_reported_at_once_with_its_path() -> None:
    message = config_error(
        {
            "apiVersion": "crawlfleet.io/v1alpha1",
            "kind": "CrawlJob",
            "metadata": {"name": "x"},
            "spec": {
                "seeds": [SEED],
                "extract": [
                    {"match": ".", "fields": {"ok": {"css": "h1"}}},
                    {
                        "match": "(",
                        "each": {"xpath": "//li["},
                        "fields": {"a": {"css": "p["}, "b": {"xpath": "nope()"}},
                    },
                ],
            },
        }
    )
    assert "spec.extract[1].match: is not a valid RE2 pattern" in message
    assert (
        "spec.extract[1].each.xpath: is not a valid XPath selector: Invalid expression" in message
    )
    assert "spec.extract[1].fields[a].css: is not a valid CSS selector" in message
    assert "spec.extract[1].fields[b].xpath: is not a valid XPath selector" in message
    assert "extract[0]" not in message


# --- crawler.scrapy ----------------------------------------------------------------------------


def test_a_scrapy_spider_needs_no_seeds_and_keeps_its_settings_and_arguments() -> None:
    spec = CrawlJobSpec.from_mapping(
        {
            "crawler": {
                "scrapy": {
                    "spider": "books",
                    "settingsModule": "shop.settings",
                    "settings": {"DOWNLOAD_TIMEOUT": 20, "ITEM_PIPELINES": {"shop.P": 300}},
                    "args": {"category": "fiction"},
                }
            }
        }
    )
    assert spec.scrapy is not None
    assert spec.scrapy.spider == "books"
    assert spec.scrapy.settings_module == "shop.settings"
    assert spec.scrapy.settings["DOWNLOAD_TIMEOUT"] == 20
    assert spec.scrapy.args == {"category": "fiction"}
    assert spec.seeds == ()
    assert spec.to_mapping()["crawler"] == {
        "scrapy": {
            "spider": "books",
            "settingsModule": "shop.settings",
            "settings": {"DOWNLOAD_TIMEOUT": 20, "ITEM_PIPELINES": {"shop.P": 300}},
            "args": {"category": "fiction"},
        }
    }


def test_without_crawler_the_job_runs_crawlfleets_own_crawler() -> None:
    assert CrawlJobSpec.from_mapping({"seeds": [SEED]}).scrapy is None
    assert CrawlJobSpec.from_mapping({"seeds": [SEED], "crawler": {}}).scrapy is None


@pytest.mark.parametrize(
    ("patch", "expected"),
    [
        ({"scrapy": {}}, "spec.crawler.scrapy.spider"),
        ({"scrapy": {"spider": "has space"}}, "spec.crawler.scrapy.spider: must be a spider name"),
        (
            {"scrapy": {"spider": "b", "settings": {"SCHEDULER": "scrapy_redis.scheduler.S"}}},
            "spec.crawler.scrapy.settings: must not set SCHEDULER",
        ),
        (
            {"scrapy": {"spider": "b", "settings": {"DUPEFILTER_CLASS": "x.Y"}}},
            "must not set DUPEFILTER_CLASS",
        ),
        ({"scrapy": {"spider": "b", "args": {"a-b": "x"}}}, "must be Python identifiers"),
        ({"scrapy": {"spider": "b", "args": {"n": 3}}}, "spec.crawler.scrapy.args.n"),
        ({"scrapy": {"spider": "b", "settingsModule": "a..b"}}, "must be a Python module"),
    ],
)
def test_a_bad_scrapy_section_names_its_field(patch: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigError, match=expected.replace(".", r"\.")):
        CrawlJobSpec.from_mapping({"crawler": patch})


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"output": {"format": "none"}}, "spec.output.format: must not be none with crawler"),
        ({"parser": "shop.parse:page"}, "spec.crawler.scrapy: must not be set with extract"),
        ({"output": {"content": "text"}}, "spec.crawler.scrapy: must not be set with extract"),
    ],
)
def test_scrapy_refuses_what_only_crawlfleets_crawler_does(
    spec: dict[str, Any], expected: str
) -> None:
    with pytest.raises(ConfigError, match=expected.replace(".", r"\.")):
        CrawlJobSpec.from_mapping({"crawler": {"scrapy": {"spider": "b"}}, **spec})
