"""A spec the model accepts cannot fail later: every component builds from it without error.

DESIGN §6: whatever a settings object, the Bloom sizing, the scope's compiled patterns or the
robots policy would refuse, the model refuses first. These tests sample specs at and between the
model's own bounds (read from its JSON schema, so a new bound is sampled too) and build each
component the operator and the workers build from a spec. A ConfigError here means the model let
through something a later component refuses: the worker would crash-loop or the operator fail
every tick.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from crawlfleet.config import DrainConfig, OutputConfig, SteeringConfig
from crawlfleet.crawler.fetching.fetch import FetchSettings
from crawlfleet.crawler.files.rules import FileRules
from crawlfleet.crawler.links.scope import Scope
from crawlfleet.crawler.politeness.robots import product_token
from crawlfleet.crawler.worker.sinks import DurableFile, OutputSink
from crawlfleet.crawljob import CrawlJobSpec
from crawlfleet.crawljob.dedup import BLOOM_MEMORY_SHARE, first_layer_bytes
from crawlfleet.crawljob.proxy import checked_proxies
from crawlfleet.crawljob.redis import REDIS_MAXMEMORY_SHARE
from crawlfleet.destinations import parse_destination
from crawlfleet.fleet.policy import FleetPolicy
from crawlfleet.frontier import BloomParams, FrontierSettings
from crawlfleet.operator.children import JobRef, config_map, redis_deployment, worker_deployment
from crawlfleet.output.stores import open_store
from crawlfleet.urls import canonicalize

SEEDS = ["https://example.com/", "http://fa\u00df.de:8080/a?b=1", "http://[::1]/x"]
USER_AGENTS = ["crawlfleet/0.1", "mybot", " padded /1.0 (+https://x.test)", "a~b/1 (x; y)"]


def _numeric_fields(schema: dict[str, Any]) -> dict[tuple[str, ...], tuple[float, float, bool]]:
    """(path) -> (low, high, is_integer) for every bounded number of the spec's JSON schema."""
    definitions = schema.get("$defs", {})
    found: dict[tuple[str, ...], tuple[float, float, bool]] = {}

    def walk(node: dict[str, Any], path: tuple[str, ...]) -> None:
        if "$ref" in node:
            node = definitions[node["$ref"].removeprefix("#/$defs/")]
        for option in node.get("anyOf", ()):
            walk(option, path)
        if node.get("type") in ("integer", "number"):
            low = node.get("minimum", node.get("exclusiveMinimum"))
            high = node.get("maximum", node.get("exclusiveMaximum"))
            if low is not None and high is not None:
                if "exclusiveMinimum" in node:
                    low = low + (1 if node["type"] == "integer" else 1e-6)
                if "exclusiveMaximum" in node:
                    high = high - (1 if node["type"] == "integer" else 1e-6)
                found[path] = (low, high, node["type"] == "integer")
        for name, sub in node.get("properties", {}).items():
            walk(sub, (*path, name))

    walk(schema, ())
    return found


NUMBERS = _numeric_fields(CrawlJobSpec.model_json_schema(by_alias=True))


def _sample(rng: random.Random, edge: str | None = None) -> dict[str, Any]:
    """A spec with numbers at their bounds or between, made to keep the cross-field rules."""
    seeds = rng.sample(SEEDS, rng.randint(1, len(SEEDS)))
    spec = CrawlJobSpec.from_mapping({"seeds": seeds}).to_mapping()
    for path, (low, high, integer) in NUMBERS.items():
        choice = edge or rng.choice(["low", "high", "between", "default"])
        if choice == "default" and path[-1] != "replicas":
            continue
        value: float = (
            low if choice == "low" else high if choice == "high" else rng.uniform(low, high)
        )
        node: dict[str, Any] = spec
        for part in path[:-1]:
            node = node.setdefault(part, {})  # an optional section (schedule) made to hold it
        node[path[-1]] = round(value) if integer else float(value)
    if "schedule" in spec:
        spec["schedule"]["cron"] = "*/15 * * * *"
    if "files" in spec:  # a files section made to hold a number needs its rules
        rules = spec["files"].setdefault("rules", [{}])
        rules[0].update({"match": r"\.mp4$", "context": ["video", "a"]})
        rules[0]["minBytes"] = min(rules[0].get("minBytes", 0), rules[0].get("maxBytes", 1))
    if "proxy" in spec:  # a proxy section made to hold a number needs its proxies
        spec["proxy"]["urls"] = ["http://proxy.corp.example:3128"]
    spec["userAgent"] = rng.choice(USER_AGENTS)
    if rng.random() < 0.5:
        spec["scope"]["include"] = [r"/(?P<id>\d+)", r"/(?P<id>[a-z]+)/", "(?i)X"]
    # the cross-field rules, kept (each is tested on its own in test_crawljob.py)
    spec["scope"]["maxPages"] = min(spec["scope"]["maxPages"], spec["dedup"]["capacity"])
    lease = spec["lease"]
    lease["deadAfterSeconds"] = max(lease["deadAfterSeconds"], 2 * lease["heartbeatSeconds"])
    lease["ttlSeconds"] = max(lease["ttlSeconds"], 2 * lease["heartbeatSeconds"])
    fetch = spec["fetch"]
    fetch["totalTimeoutSeconds"] = max(
        fetch["totalTimeoutSeconds"], fetch["connectTimeoutSeconds"], fetch["readTimeoutSeconds"]
    )
    fetch["maxDecompressedBytes"] = max(fetch["maxDecompressedBytes"], fetch["maxBodyBytes"])
    workers = spec["workers"]
    workers["minReplicas"] = min(workers["minReplicas"], workers["maxReplicas"])
    retry = spec["retry"]
    retry["backoffMaxSeconds"] = max(retry["backoffMaxSeconds"], retry["backoffBaseSeconds"])
    robots = spec["robots"]
    robots["giveUpAfterSeconds"] = max(robots["giveUpAfterSeconds"], robots["errorTtlSeconds"])
    scope = spec["scope"]
    if (
        "schedule" in spec
        or scope["maxPages"]
        or scope["maxPagesPerDomain"]
        or scope["maxQueuedPerDomain"]
    ):  # not partitioned yet
        spec["frontier"]["shards"] = 1
    # The Bloom filter fits the managed Redis (test_dedup_memory.py): its limit raised to fit.
    need = first_layer_bytes(spec["dedup"]["capacity"], spec["dedup"]["errorRate"])
    limit_mib = math.ceil(need / BLOOM_MEMORY_SHARE / REDIS_MAXMEMORY_SHARE / (1 << 20)) + 1
    spec["redis"]["managed"]["memoryLimit"] = f"{max(limit_mib, 1024)}Mi"
    return spec


async def _ignore(generation: int, files: Sequence[DurableFile]) -> None:
    """An output sink's callback; nothing is written here."""


def _build_everything(spec: CrawlJobSpec, tmp_path: Path) -> None:
    FrontierSettings.from_spec("crawl.books", spec)
    BloomParams.for_capacity(spec.dedup.capacity, spec.dedup.error_rate)
    FetchSettings.from_spec(spec)
    checked_proxies(spec.proxy, {})
    httpx.Request("GET", "http://a.test/", headers={"User-Agent": spec.user_agent})  # ASCII only
    product_token(spec.user_agent)
    Scope.from_spec(spec.scope)
    FileRules.from_spec(spec.files)
    FleetPolicy.from_spec(spec, SteeringConfig(), completion_grace_seconds=0)
    store = open_store(parse_destination(spec.output.destination or str(tmp_path)), spec.output.s3)
    OutputSink.from_spec(
        store,
        "worker-1",
        spec.output,
        on_durable=_ignore,
        max_records_per_file=OutputConfig().max_records_per_file,
        max_pending_files=OutputConfig().max_pending_files,
        retry_max_seconds=OutputConfig().retry_max_seconds,
    )
    for seed in spec.seeds:
        canonicalize(seed)
    job = JobRef(namespace="crawl", name="books")
    config_map(job, spec)
    redis_deployment(job, spec)
    worker_deployment(
        job, spec, replicas=spec.workers.max_replicas, image="worker:1", drain=DrainConfig()
    )


def test_specs_at_and_between_the_bounds_build_every_component(tmp_path: Path) -> None:
    rng = random.Random(11)
    for _ in range(200):
        _build_everything(CrawlJobSpec.from_mapping(_sample(rng)), tmp_path)
    assert len(NUMBERS) >= 25  # the bounds were found: the test is not vacuous


@pytest.mark.parametrize("edge", ["low", "high"])
def test_every_bound_at_once_builds_every_component(edge: str, tmp_path: Path) -> None:
    _build_everything(CrawlJobSpec.from_mapping(_sample(random.Random(3), edge)), tmp_path)
