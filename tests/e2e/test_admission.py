"""The CrawlJob CRD on the real API server: what it accepts, fills in, refuses, explains, scales.

The unit tests compare the generated CRD with the model as data; only kube-apiserver can say
that the CEL compiles within its cost budget, that defaulting fills in what the model fills in,
and that a refusal reads the way the model words it. Each refusal here is also checked against
``crawlfleet run``'s validation, so the two sides are shown to agree on the same documents.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from crawlfleet.crawljob import CrawlJobSpec
from crawlfleet.crawljob.frontier import SHARDS_CANNOT_CHANGE
from crawlfleet.errors import ConfigError
from crawlfleet.operator import crd
from tests.e2e.cluster.client import Cluster, wait_established, wait_until

REPO = Path(__file__).resolve().parents[2]
SEED = "https://books.example/"
# Filled by the operator and `crawlfleet run` (they depend on other fields), not by the CRD.
DEPENDENT_DEFAULTS = (("scope", "allowedDomains"), ("redis", "managed"))


@pytest.fixture(scope="module")
def crawljob_crd(cluster: Cluster) -> None:
    """crds/crawljob.yaml applied as committed, and Established (its CEL compiled)."""
    # Server-side: client-side apply would keep a copy of this large CRD in an annotation.
    cluster.kubectl(
        "apply", "--server-side", "--force-conflicts", "--field-manager=admission-test",
        "-f", str(REPO / crd.CRD_FILE),
    )  # fmt: skip
    wait_established(cluster, crd.CRD_NAME)
    # Discovery (kubectl's short names, explain) can trail Established by a moment.
    wait_until(
        lambda: "crawljobs" in cluster.kubectl("api-resources", "--api-group=crawlfleet.io").stdout,
        what="crawljobs in discovery",
    )


@pytest.fixture
def jobs(cluster: Cluster, crawljob_crd: None, namespace: str) -> Jobs:
    return Jobs(client.CustomObjectsApi(cluster.api), namespace)


class Jobs:
    """CrawlJobs of one namespace through the API, as the operator and kubectl reach them."""

    def __init__(self, api: client.CustomObjectsApi, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.where = (crd.GROUP, crd.VERSION, namespace, crd.PLURAL)

    def create(self, spec: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        body = {
            "apiVersion": f"{crd.GROUP}/{crd.VERSION}",
            "kind": "CrawlJob",
            "metadata": {"name": f"job-{uuid.uuid4().hex[:8]}"},
            "spec": spec,
        }
        extra = {"dry_run": "All"} if dry_run else {}
        created: dict[str, Any] = self.api.create_namespaced_custom_object(
            *self.where, body, field_validation="Strict", **extra
        )
        return created

    def refusal(self, spec: dict[str, Any]) -> str:
        """The API server's message for a spec it must refuse."""
        with pytest.raises(ApiException) as caught:
            self.create(spec, dry_run=True)
        return message_of(caught.value)

    def get(self, name: str) -> dict[str, Any]:
        job: dict[str, Any] = self.api.get_namespaced_custom_object(*self.where, name)
        return job

    def patch_spec(self, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        patched: dict[str, Any] = self.api.patch_namespaced_custom_object(
            *self.where, name, {"spec": spec}
        )
        return patched

    def patch_status(self, name: str, status: dict[str, Any]) -> dict[str, Any]:
        patched: dict[str, Any] = self.api.patch_namespaced_custom_object_status(
            *self.where, name, {"status": status}
        )
        return patched


def message_of(error: ApiException) -> str:
    # 422 Invalid from validation; 400 BadRequest from strict decoding (an unknown field).
    assert error.status in (400, 422), (error.status, error.body)
    return str(json.loads(error.body)["message"])


def python_refusal(spec: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as caught:
        CrawlJobSpec.from_mapping(spec)
    return str(caught.value)


def without_dependent_defaults(spec: dict[str, Any]) -> dict[str, Any]:
    result = json.loads(json.dumps(spec))
    for section, field in DEPENDENT_DEFAULTS:
        result.get(section, {}).pop(field, None)
    return result


# --- accepted, and filled in ------------------------------------------------------------------


def test_a_minimal_job_is_accepted_and_the_api_server_fills_the_models_defaults(
    jobs: Jobs,
) -> None:
    created = jobs.create({"seeds": [SEED]})

    stored = jobs.get(created["metadata"]["name"])["spec"]
    assert stored == without_dependent_defaults(
        CrawlJobSpec.from_mapping({"seeds": [SEED]}).to_mapping()
    )
    assert stored["dedup"] == {"capacity": 1_000_000, "errorRate": 0.01}
    # managed is the model's choice, made from the other fields; onLoss is a plain default
    assert stored["redis"] == {"onLoss": "Fail"}
    assert CrawlJobSpec.from_mapping(stored) == CrawlJobSpec.from_mapping({"seeds": [SEED]})


def test_recrawl_rules_and_a_schedule_get_the_models_defaults_as_durations(jobs: Jobs) -> None:
    # Durations are strings to the API server (CEL's duration() checks them) and seconds to
    # the model: the defaults the CRD fills must read back to the model's own.
    spec = {
        "seeds": [SEED],
        "recrawl": [{"kind": "feed", "interval": "10m"}, {"match": "/news/"}],
        "schedule": {"cron": "*/15 6-22 * * MON-FRI", "timeZone": "Europe/Berlin"},
    }

    created = jobs.create(spec)

    stored = jobs.get(created["metadata"]["name"])["spec"]
    by_model = CrawlJobSpec.from_mapping(spec).to_mapping()
    assert stored["recrawl"] == by_model["recrawl"]
    assert stored["recrawl"][1]["maxInterval"] == "720h"
    assert stored["schedule"] == by_model["schedule"]
    assert CrawlJobSpec.from_mapping(stored) == CrawlJobSpec.from_mapping(spec)


def test_files_rules_get_the_models_defaults(jobs: Jobs) -> None:
    spec = {
        "seeds": [SEED],
        "files": {
            "rules": [
                {"match": r"\.mp4$"},
                {"context": ["img", "source"], "contentTypes": ["image/*"], "minBytes": 64},
                {"contentTypes": ["application/pdf"]},
            ]
        },
    }

    created = jobs.create(spec)

    stored = jobs.get(created["metadata"]["name"])["spec"]
    by_model = CrawlJobSpec.from_mapping(spec).to_mapping()
    assert stored["files"] == by_model["files"]
    assert stored["files"]["rules"][0]["maxBytes"] == 4 * 1024**3
    assert stored["files"]["partSizeBytes"] == 16 * 1024**2
    assert CrawlJobSpec.from_mapping(stored) == CrawlJobSpec.from_mapping(spec)


def test_the_largest_files_section_passes_within_the_cel_budget(jobs: Jobs) -> None:
    # 32 rules, each with the longest pattern, every element and 16 of the longest types: the
    # RE2 checks and the element and type rules run for all of them on every write.
    longest_type = "application/" + "x" * 115
    rule = {
        "match": "/media/" + "a" * 1017,
        "context": ["a", "audio", "embed", "img", "link", "object", "source", "video"],
        "contentTypes": [longest_type[:-2] + f"{index:02d}" for index in range(16)],
    }
    spec = {"seeds": [SEED], "files": {"rules": [rule] * 32}}
    CrawlJobSpec.from_mapping(spec)  # crawlfleet run agrees

    jobs.create(spec, dry_run=True)

    assert "spec.files.rules" in jobs.refusal({"seeds": [SEED], "files": {"rules": [rule] * 33}})


@pytest.mark.parametrize("name", ["files-batch.yaml", "files-pdfs.yaml"])
def test_the_file_examples_are_accepted_and_read_back_as_written(jobs: Jobs, name: str) -> None:
    example = yaml.safe_load((REPO / "examples" / name).read_text())

    created = jobs.create(example["spec"])

    stored = jobs.get(created["metadata"]["name"])["spec"]
    assert CrawlJobSpec.from_mapping(stored) == CrawlJobSpec.from_mapping(example["spec"])


def test_the_example_job_is_accepted_and_reads_back_as_written(jobs: Jobs) -> None:
    example = yaml.safe_load((REPO / "examples" / "crawljob.yaml").read_text())

    created = jobs.create(example["spec"])

    stored = jobs.get(created["metadata"]["name"])["spec"]
    assert CrawlJobSpec.from_mapping(stored) == CrawlJobSpec.from_mapping(example["spec"])


def test_a_partly_given_section_gets_the_rest_of_its_defaults(jobs: Jobs) -> None:
    spec = {"seeds": [SEED], "workers": {"maxReplicas": 3}, "redis": {"managed": {}}}

    created = jobs.create(spec)

    stored = jobs.get(created["metadata"]["name"])["spec"]
    assert stored["workers"] == CrawlJobSpec.from_mapping(spec).to_mapping()["workers"]
    assert stored["redis"] == {
        "managed": {
            "image": "redis:7.4-alpine",
            "persistence": {"enabled": True, "size": "1Gi"},
            "memoryRequest": "256Mi",
            "memoryLimit": "1Gi",
        },
        "onLoss": "Fail",
    }


# --- refused, in the model's words ------------------------------------------------------------

# (id, spec, the field the refusal names, what it says): every one also refused by Python.
REFUSALS: list[tuple[str, dict[str, Any], str, str]] = [
    (
        "seed-scheme",
        {"seeds": ["ftp://books.example/"]},
        "spec.seeds[0]",
        "must be an absolute http(s) URL with a host, at most 2048 characters",
    ),
    (
        "min-over-max-replicas",
        {"seeds": [SEED], "workers": {"minReplicas": 5, "maxReplicas": 2}},
        "spec.workers.minReplicas",
        "must not be greater than maxReplicas",
    ),
    *[
        (
            f"error-rate-{rate}",
            {"seeds": [SEED], "dedup": {"errorRate": rate}},
            "spec.dedup.errorRate",
            "must be at least 1e-09 and less than 0.5",
        )
        for rate in (0, 0.5)
    ],
    (
        "heartbeat-not-below-dead-after",
        {"seeds": [SEED], "lease": {"heartbeatSeconds": 20, "deadAfterSeconds": 20}},
        "spec.lease.heartbeatSeconds",
        "must be less than deadAfterSeconds",
    ),
    (
        "heartbeat-not-below-ttl",
        {"seeds": [SEED], "lease": {"heartbeatSeconds": 10, "ttlSeconds": 5}},
        "spec.lease.heartbeatSeconds",
        "must be less than ttlSeconds",
    ),
    (
        "backoff-max-below-base",
        {"seeds": [SEED], "retry": {"backoffBaseSeconds": 10, "backoffMaxSeconds": 5}},
        "spec.retry.backoffMaxSeconds",
        "must be at least backoffBaseSeconds",
    ),
    (
        "two-redis-sources",
        {"seeds": [SEED], "redis": {"url": "redis://redis:6379", "managed": {}}},
        "spec.redis",
        "url, secretRef and managed are alternatives: set at most one",
    ),
    ("no-seeds", {"seeds": []}, "spec.seeds", "at least 1"),
    (
        "format",
        {"seeds": [SEED], "output": {"format": "csv"}},
        "spec.output.format",
        "must be one of 'jsonl', 'warc' or 'none'",
    ),
    ("typo", {"seeds": [SEED], "scope": {"maxDepht": 3}}, "spec.scope.maxDepht", "unknown field"),
]


@pytest.mark.parametrize(
    ("spec", "field", "message"), [pytest.param(*rest, id=name) for name, *rest in REFUSALS]
)
def test_invalid_jobs_are_refused_with_the_rule_message(
    jobs: Jobs, spec: dict[str, Any], field: str, message: str
) -> None:
    refusal = jobs.refusal(spec)

    assert field in refusal
    assert message in refusal
    # crawlfleet run refuses the same document, at the same field.
    assert f"{field}: " in python_refusal(spec)


def test_error_rate_zero_gets_one_clear_message(jobs: Jobs) -> None:
    # With schema bounds, kube-apiserver compares the integer 0 with the bound 0.5 truncated to
    # 0 and adds "should be less than 0": the CRD states this range in CEL instead.
    refusal = jobs.refusal({"seeds": [SEED], "dedup": {"errorRate": 0}})
    assert "should be less than 0" not in refusal
    assert refusal.count("spec.dedup.errorRate") == 1


# Seeds on which the API server's CEL and crawlfleet run's Python must agree. The port range is
# the one thing left out of CEL (its cost); the operator flags such a spec InvalidSpec.
SEEDS = [
    "https://books.example/",
    "HTTP://Books.Example/catalogue?page=2#top",
    "https://books.example:8443/",
    "http://[::1]:8080/",
    "http://127.0.0.1/",
    "ftp://books.example/",
    "books.example/page",
    "//books.example/",
    "mailto:someone@books.example",
    "http:///only-a-path",
    "http://books .example/",
    "http://books.example/a page",
    "http://books.example:port/",
    "https://",
]
# Python refuses these, the API server's CEL cannot afford to (see crawljob._SEED_CEL): the
# operator marks such a job InvalidSpec (tests/e2e/test_bad_specs.py).
LEFT_TO_THE_OPERATOR = {
    "http://books.example:99999/": "must be an absolute http(s) URL",
    "http://books.example:0/": "must be an absolute http(s) URL",
    "https://user:secret@books.example/": "must not hold a user name or password",
}


@pytest.mark.parametrize("seed", SEEDS)
def test_the_api_server_and_crawlfleet_run_agree_on_seeds(jobs: Jobs, seed: str) -> None:
    try:
        CrawlJobSpec.from_mapping({"seeds": [seed]})
        python_accepts = True
    except ConfigError:
        python_accepts = False
    refusal = None
    try:
        jobs.create({"seeds": [seed]}, dry_run=True)
    except ApiException as error:
        refusal = message_of(error)
    assert (refusal is None) == python_accepts, refusal
    assert refusal is None or "must be an absolute http(s) URL with a host" in refusal


@pytest.mark.parametrize(("seed", "message"), LEFT_TO_THE_OPERATOR.items())
def test_seeds_cel_cannot_afford_to_check_are_left_to_the_operator(
    jobs: Jobs, seed: str, message: str
) -> None:
    jobs.create({"seeds": [seed]}, dry_run=True)  # accepted by the API server
    assert message in python_refusal({"seeds": [seed]})


def test_the_largest_seed_lists_an_object_can_hold_pass_within_the_cel_budget(
    jobs: Jobs,
) -> None:
    # An object holds ~1.5 MB: 10,000 ordinary seeds, or ~600 of the longest ones. Both must
    # pass the seed rules within the API server's runtime CEL budget.
    many = [f"https://books.example/catalogue/page-{index:05d}.html" for index in range(10_000)]
    jobs.create({"seeds": many}, dry_run=True)
    prefix = "https://books.example/"
    longest = [f"{prefix}{index:05d}".ljust(2048, "p") for index in range(600)]
    jobs.create({"seeds": longest}, dry_run=True)

    assert "spec.seeds" in jobs.refusal({"seeds": [*many, "https://books.example/one-more"]})
    assert "spec.seeds[0]" in jobs.refusal({"seeds": [longest[0] + "p"]})


# --- the Bloom filter is sized once -----------------------------------------------------------


def test_changing_dedup_is_refused_but_other_changes_are_not(jobs: Jobs) -> None:
    name = jobs.create({"seeds": [SEED], "dedup": {"capacity": 50_000}})["metadata"]["name"]
    immutable = (
        "dedup.capacity and dedup.errorRate cannot change after creation:"
        " the Bloom filter is sized once"
    )

    for change in ({"capacity": 100_000}, {"errorRate": 0.001}):
        with pytest.raises(ApiException) as caught:
            jobs.patch_spec(name, {"dedup": change})
        assert f'spec.dedup: Invalid value: "object": {immutable}' in message_of(caught.value)

    patched = jobs.patch_spec(name, {"scope": {"maxPages": 10}, "dedup": {"capacity": 50_000}})
    assert patched["spec"]["scope"]["maxPages"] == 10
    assert patched["spec"]["dedup"] == {"capacity": 50_000, "errorRate": 0.01}


def test_changing_the_frontiers_partitions_is_refused_but_its_replica_wait_is_not(
    jobs: Jobs,
) -> None:
    name = jobs.create({"seeds": [SEED], "frontier": {"shards": 4}})["metadata"]["name"]

    for shards in (1, 8):
        with pytest.raises(ApiException) as caught:
            jobs.patch_spec(name, {"frontier": {"shards": shards}})
        message = message_of(caught.value)
        assert "spec.frontier.shards: Invalid value" in message
        assert SHARDS_CANNOT_CHANGE in message

    patched = jobs.patch_spec(name, {"frontier": {"shards": 4, "waitReplicas": 1}})
    assert patched["spec"]["frontier"] == {"shards": 4, "waitReplicas": 1}
    # a job made without the section gets it filled, and keeps it
    plain = jobs.create({"seeds": [SEED]})
    assert plain["spec"]["frontier"] == {"shards": 1, "waitReplicas": 0}
    with pytest.raises(ApiException) as caught:
        jobs.patch_spec(plain["metadata"]["name"], {"frontier": {"shards": 2}})
    assert SHARDS_CANNOT_CHANGE in message_of(caught.value)


# --- kubectl ----------------------------------------------------------------------------------


def test_kubectl_explain_shows_the_model_descriptions(cluster: Cluster, crawljob_crd: None) -> None:
    dedup = cluster.kubectl("explain", "crawljob.spec.dedup").stdout
    assert "The Bloom filter that makes every URL crawled once." in dedup
    assert "errorRate\t<number>" in dedup

    error_rate = " ".join(
        cluster.kubectl("explain", "crawljob.spec.dedup.errorRate").stdout.split()
    )
    assert "false-positive rate at capacity" in error_rate
    assert "Must be at least 1e-09 and less than 0.5. Defaults to 0.01." in error_rate

    root = cluster.kubectl("explain", "crawljob").stdout
    assert "A CrawlJob crawls the web from its seeds" in root


def test_kubectl_scale_sets_workers_replicas_through_the_scale_subresource(
    cluster: Cluster, jobs: Jobs
) -> None:
    name = jobs.create({"seeds": [SEED], "workers": {"autoscale": "external"}})["metadata"]["name"]
    selector = f"crawlfleet.io/job={name},crawlfleet.io/component=worker"
    jobs.patch_status(name, {"replicas": 1, "selector": selector})

    cluster.kubectl("scale", f"crawljob/{name}", "--replicas", "3", "-n", jobs.namespace)

    assert jobs.get(name)["spec"]["workers"]["replicas"] == 3
    scale = jobs.api.get_namespaced_custom_object_scale(*jobs.where, name)
    assert scale["spec"]["replicas"] == 3
    assert scale["status"] == {"replicas": 1, "selector": selector}  # what an HPA or KEDA reads


def test_kubectl_get_prints_the_columns_from_status(cluster: Cluster, jobs: Jobs) -> None:
    name = jobs.create({"seeds": [SEED]})["metadata"]["name"]
    jobs.patch_status(
        name,
        {
            "phase": "Running",
            "readyReplicas": 2,
            "desiredReplicas": 3,
            "workers": "2/3",
            "queued": 1210,
            "inFlight": 16,
            "seen": 1614,
            "crawled": 388,
            "failed": 2,
            "pagesPerSecond": 41.5,
            "message": "crawling",
            "waiting": "RobotsTxt",
            "freshness": {"tracked": 40, "due": 3, "nextRevisitAt": "2026-12-02T10:30:00Z"},
            "nextRunAt": "2026-12-03T06:00:00Z",
        },
    )

    table = cluster.kubectl("get", "crawljobs", name, "-n", jobs.namespace).stdout.split("\n")
    assert table[0].split() == [
        "NAME", "PHASE", "WORKERS", "QUEUED", "CRAWLED", "FAILED", "WAITING", "NEXT-REVISIT",
        "NEXT-RUN", "AGE",
    ]  # fmt: skip
    assert table[1].split()[:9] == [
        name, "Running", "2/3", "1210", "388", "2", "RobotsTxt", "2026-12-02T10:30:00Z",
        "2026-12-03T06:00:00Z",
    ]  # fmt: skip

    wide = cluster.kubectl("get", "crawljobs", name, "-n", jobs.namespace, "-o", "wide")
    assert wide.stdout.split("\n")[0].split()[-5:] == [
        "IN-FLIGHT", "SEEN", "RATE", "DUE", "MESSAGE"
    ]  # fmt: skip
    assert wide.stdout.split("\n")[1].split()[-5:] == ["16", "1614", "41.5", "3", "crawling"]

    short = cluster.kubectl("get", "cjob", name, "-n", jobs.namespace)
    assert name in short.stdout
    assert "Warning" not in short.stderr  # "cj" would have been taken for a CronJob
    by_category = cluster.kubectl("get", "crawlfleet", "-n", jobs.namespace).stdout
    assert name in by_category


def test_status_keeps_only_the_models_fields(jobs: Jobs) -> None:
    # The status schema prunes: kopf's default progress storage (status.kopf) would vanish, so
    # the operator keeps its progress and diff-base in annotations.
    name = jobs.create({"seeds": [SEED]})["metadata"]["name"]

    status = jobs.patch_status(name, {"phase": "Running", "kopf": {"progress": {"ensure": {}}}})[
        "status"
    ]

    assert "kopf" not in status
    assert status["phase"] == "Running"
    assert status["crawled"] == 0  # the counters' defaults, so columns never show blanks
    assert status["conditions"] == []


def test_status_keeps_what_a_job_with_files_stored(jobs: Jobs) -> None:
    # The operator writes status.files for a job with spec.files; the schema must not prune it.
    name = jobs.create({"seeds": [SEED]})["metadata"]["name"]
    files = {"stored": 3, "bytes": 3 * 2**30, "duplicates": 1}

    status = jobs.patch_status(name, {"phase": "Running", "files": files})["status"]

    assert status["files"] == files
