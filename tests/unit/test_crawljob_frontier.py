"""``spec.frontier``: partitions of a job's frontier, and what cannot be partitioned yet.

The bad inputs (each refused with its field, by ``crawlfleet validate``, the API server and
the operator alike) are cases of the bad-spec corpus: tests/bad_specs/frontier-*.yaml. Here:
the defaults, what is accepted, every refusal at once, and the settings the frontier gets.
"""

from __future__ import annotations

from typing import Any

import pytest

from crawlfleet.crawljob import CrawlJobSpec, FrontierSpec, parse_crawljob
from crawlfleet.errors import ConfigError
from crawlfleet.frontier import FrontierSettings

SEED = "https://books.example/"


def spec(**sections: Any) -> CrawlJobSpec:
    return CrawlJobSpec.from_mapping({"seeds": [SEED], **sections})


def refusal(**sections: Any) -> str:
    with pytest.raises(ConfigError) as caught:
        spec(**sections)
    return str(caught.value)


def test_one_partition_and_no_wait_by_default() -> None:
    default = spec()
    assert default.frontier == FrontierSpec(shards=1, wait_replicas=0)
    assert default.to_mapping()["frontier"] == {"shards": 1, "waitReplicas": 0}
    settings = FrontierSettings.from_spec("default.books", default)
    assert (settings.shards, settings.wait_replicas) == (1, 0)


def test_partitions_and_replicas_reach_the_frontiers_settings() -> None:
    partitioned = spec(frontier={"shards": 8, "waitReplicas": 1})
    settings = FrontierSettings.from_spec("default.books", partitioned)
    assert (settings.shards, settings.wait_replicas) == (8, 1)
    # the workers get the same from the mapping they are handed
    again = CrawlJobSpec.from_mapping(partitioned.to_mapping())
    assert again.frontier == partitioned.frontier


@pytest.mark.parametrize("shards", [1, 2, 256])
def test_any_count_from_one_to_256_is_accepted(shards: int) -> None:
    assert spec(frontier={"shards": shards}).frontier.shards == shards


@pytest.mark.parametrize(
    ("frontier", "line"),
    [
        ({"shards": 0}, "spec.frontier.shards: must be between 1 and 256 (got 0)"),
        ({"shards": 257}, "spec.frontier.shards: must be between 1 and 256 (got 257)"),
        ({"shards": 2.0}, "spec.frontier.shards: must be an integer"),
        ({"waitReplicas": -1}, "spec.frontier.waitReplicas: must be between 0 and 5 (got -1)"),
        ({"partitions": 2}, "spec.frontier.partitions: unknown field"),
    ],
)
def test_out_of_range_values_are_refused_with_their_field(
    frontier: dict[str, object], line: str
) -> None:
    assert line in refusal(frontier=frontier)


def test_a_schedule_recrawl_rules_a_page_budget_and_a_scrapy_spider_keep_one_partition() -> None:
    ok = spec(
        frontier={"shards": 1},
        schedule={"cron": "@daily"},
        recrawl=[{"match": "/news/"}],
    )
    assert ok.frontier.shards == 1

    found = refusal(
        frontier={"shards": 4},
        schedule={"cron": "@daily"},
        recrawl=[{"match": "/news/"}],
    )
    lines = [line.strip() for line in found.splitlines()[1:]]
    assert lines == [
        "spec.frontier.shards: must be 1 with schedule: a run's state (its id, what it"
        " revisits, its commit) is kept in one partition, not yet across partitions (got"
        " frontier.shards=4)",
        "spec.frontier.shards: must be 1 with recrawl: revisits are kept by job, not yet by"
        " partition (got frontier.shards=4)",
    ]
    budget = refusal(frontier={"shards": 2}, scope={"maxPages": 100})
    assert "spec.frontier.shards: must be 1 with scope.maxPages: each partition counts" in budget
    assert spec(frontier={"shards": 2}, scope={"maxPages": 0}).frontier.shards == 2
    scrapy = refusal(frontier={"shards": 2}, crawler={"scrapy": {"spider": "books"}})
    assert "spec.frontier.shards: must be 1 with crawler.scrapy:" in scrapy


def test_wait_replicas_alone_is_no_reason_to_refuse_a_schedule() -> None:
    waited = spec(frontier={"waitReplicas": 1}, schedule={"cron": "@daily"})
    assert waited.frontier.wait_replicas == 1


def test_run_shards_raise_the_partitions_and_are_checked_as_the_file_would_be() -> None:
    document = {
        "apiVersion": "crawlfleet.io/v1alpha1",
        "kind": "CrawlJob",
        "metadata": {"name": "books"},
        "spec": {"seeds": [SEED], "frontier": {"shards": 4}},
    }
    job = parse_crawljob(document)
    assert job.with_shards_at_least(2) is job  # the file's 4 is more already
    raised = job.with_shards_at_least(8)
    assert raised.spec.frontier.shards == 8
    assert raised.spec.seeds == job.spec.seeds
    assert raised.spec.scope == job.spec.scope

    scheduled = parse_crawljob(
        {**document, "spec": {"seeds": [SEED], "schedule": {"cron": "@daily"}}}
    )
    assert scheduled.with_shards_at_least(1) is scheduled
    with pytest.raises(ConfigError, match=r"spec\.frontier\.shards: must be 1 with schedule"):
        scheduled.with_shards_at_least(2)
