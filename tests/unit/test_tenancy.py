"""The tenancy policy: which images, volumes and Secrets a CrawlJob may ask the operator for."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from crawlfleet.config import Config, OperatorConfig
from crawlfleet.crawljob import CrawlJobSpec
from crawlfleet.errors import ConfigError
from crawlfleet.tenancy import (
    SEED_LIST_LABEL,
    SecretUse,
    TenancyPolicy,
    image_allowed,
    redis_host_allowed,
    repository_of,
)

DEFAULT = TenancyPolicy.from_config(OperatorConfig(worker_image="crawlfleet/worker:1.4.0"))


def spec(**fields: Any) -> CrawlJobSpec:
    return CrawlJobSpec.from_mapping({"seeds": ["https://books.example/"], **fields})


@pytest.mark.parametrize(
    ("image", "repository"),
    [
        ("crawlfleet/worker:1.4.0", "crawlfleet/worker"),
        ("crawlfleet/worker", "crawlfleet/worker"),
        ("registry.example:5000/team/worker:dev", "registry.example:5000/team/worker"),
        ("registry.example:5000/team/worker", "registry.example:5000/team/worker"),
        ("crawlfleet/worker@sha256:" + "a" * 64, "crawlfleet/worker"),
        ("crawlfleet/worker:1@sha256:" + "a" * 64, "crawlfleet/worker"),
    ],
)
def test_the_repository_of_an_image_drops_its_tag_and_digest(image: str, repository: str) -> None:
    assert repository_of(image) == repository


@pytest.mark.parametrize(
    ("image", "prefixes", "allowed"),
    [
        ("crawlfleet/worker:dev", ["crawlfleet/worker"], True),
        ("crawlfleet/worker@sha256:" + "b" * 64, ["crawlfleet/worker"], True),
        ("crawlfleet/worker", ["crawlfleet/worker"], True),
        # A repository prefix is a whole repository, not the start of a name.
        ("crawlfleet/worker-evil:1", ["crawlfleet/worker"], False),
        ("crawlfleet/workers:1", ["crawlfleet/worker"], False),
        ("evil.example/crawlfleet/worker:1", ["crawlfleet/worker"], False),
        # A prefix ending in / is a folder of repositories.
        ("registry.example/crawl/worker:2", ["registry.example/crawl/"], True),
        ("registry.example/crawl/team/parser:2", ["registry.example/crawl/"], True),
        ("registry.example/crawler/worker:2", ["registry.example/crawl/"], False),
        # A tag prefix narrows a repository to some of its tags.
        ("crawlfleet/worker:1.4.2", ["crawlfleet/worker:1.4"], True),
        ("crawlfleet/worker:2.0", ["crawlfleet/worker:1.4"], False),
        ("anything/at:all", ["*"], True),
        ("redis:7.4-alpine", [], False),
    ],
)
def test_an_image_is_allowed_by_a_matching_prefix_only(
    image: str, prefixes: list[str], allowed: bool
) -> None:
    assert image_allowed(image, prefixes) is allowed


def test_the_defaults_allow_the_operators_own_images_and_a_plain_spec() -> None:
    assert DEFAULT.worker_images == ("crawlfleet/worker",)
    assert DEFAULT.spec_problems(spec()) == []
    assert DEFAULT.spec_problems(spec(workers={"image": "crawlfleet/worker:dev"})) == []
    assert DEFAULT.spec_problems(spec(redis={"managed": {"image": "redis:7.4-alpine"}})) == []
    assert (
        DEFAULT.spec_problems(spec(redis={"managed": {"image": "docker.io/library/redis:8"}})) == []
    )
    claim = {"persistentVolumeClaim": {"claimName": "out"}}
    assert DEFAULT.spec_problems(spec(output={"volume": claim})) == []
    assert DEFAULT.spec_problems(spec(output={"volume": {"emptyDir": {}}})) == []


def test_a_foreign_worker_image_is_refused_at_its_field() -> None:
    assert DEFAULT.spec_problems(spec(workers={"image": "evil.example/miner:1"})) == [
        "spec.workers.image: is not an image this operator allows (allowed: crawlfleet/worker);"
        " its administrator chooses them (chart value policy.workerImages)"
    ]


def test_a_foreign_redis_image_is_refused_at_its_field() -> None:
    (problem,) = DEFAULT.spec_problems(spec(redis={"managed": {"image": "evil/redis:7"}}))
    assert problem.startswith("spec.redis.managed.image: is not an image this operator allows")


@pytest.mark.parametrize("kind", ["hostPath", "nfs", "projected", "secret", "csi", "iscsi"])
def test_volume_types_that_reach_past_the_namespace_are_refused_by_default(kind: str) -> None:
    source: dict[str, Any] = {"hostPath": {"path": "/"}, "nfs": {"server": "n", "path": "/"}}
    volume = {kind: source.get(kind, {})}
    assert DEFAULT.spec_problems(spec(output={"volume": volume})) == [
        f"spec.output.volume.{kind}: is not a volume type this operator allows (allowed:"
        " emptyDir, ephemeral, persistentVolumeClaim); its administrator chooses them"
        " (chart value policy.volumeTypes)"
    ]


def test_every_problem_is_reported_at_once() -> None:
    bad = spec(workers={"image": "x/y:1"}, output={"volume": {"hostPath": {"path": "/"}}})
    assert [line.split(":")[0] for line in DEFAULT.spec_problems(bad)] == [
        "spec.workers.image",
        "spec.output.volume.hostPath",
    ]


def test_the_administrator_widens_the_policy() -> None:
    knobs = OperatorConfig(
        allowed_worker_images=("registry.example/crawl/",),
        allowed_volume_types=("persistentVolumeClaim", "nfs"),
    )
    policy = TenancyPolicy.from_config(knobs)
    nfs = {"nfs": {"server": "files.example", "path": "/crawls"}}
    assert policy.spec_problems(spec(output={"volume": nfs})) == []
    assert policy.spec_problems(spec(workers={"image": "registry.example/crawl/mine:1"})) == []
    # The administrator's list replaces the default: the chart's own image must be listed too.
    assert policy.spec_problems(spec(workers={"image": "crawlfleet/worker:1"}))


def test_the_policy_is_read_from_the_environment() -> None:
    config = Config.from_env(
        {
            "CRAWLFLEET_ALLOWED_WORKER_IMAGES": "a.example/w, b.example/",
            "CRAWLFLEET_ALLOWED_REDIS_IMAGES": "*",
            "CRAWLFLEET_ALLOWED_VOLUME_TYPES": "persistentVolumeClaim",
            "CRAWLFLEET_SECRET_LABEL": "team.example/crawl=yes",
        }
    )
    policy = TenancyPolicy.from_config(config.operator)
    assert policy == TenancyPolicy(
        worker_images=("a.example/w", "b.example/"),
        redis_images=("*",),
        volume_types=frozenset({"persistentVolumeClaim"}),
        secret_label=("team.example/crawl", "yes"),
    )


@pytest.mark.parametrize("label", ["crawl", "=yes", "key="])
def test_a_secret_label_that_is_not_key_value_is_a_config_error(label: str) -> None:
    with pytest.raises(ConfigError, match=r"CRAWLFLEET_SECRET_LABEL=.*must be key=value"):
        TenancyPolicy.from_config(OperatorConfig(secret_label=label))


def test_the_secrets_a_spec_names_are_found_with_their_fields() -> None:
    named = spec(
        redis={"secretRef": {"name": "team-redis"}},
        output={
            "destination": "s3://bucket/crawl/",
            "s3": {"secretRef": {"name": "team-keys"}},
        },
    )
    assert TenancyPolicy.secret_uses(named) == [
        SecretUse("spec.redis.secretRef.name", "team-redis"),
        SecretUse("spec.output.s3.secretRef.name", "team-keys"),
    ]
    assert TenancyPolicy.secret_uses(spec()) == []


def test_a_secret_is_usable_only_with_the_label() -> None:
    use = SecretUse("spec.redis.secretRef.name", "team-redis")
    assert DEFAULT.secret_problem(use, {"crawlfleet.io/crawljob-secret": "true"}) is None
    assert DEFAULT.secret_problem(use, {"crawlfleet.io/crawljob-secret": "false"}) == (
        "spec.redis.secretRef.name: Secret team-redis is not labelled"
        " crawlfleet.io/crawljob-secret=true, the label that lets CrawlJobs use a Secret (add it"
        " if this Secret is meant for crawlfleet)"
    )
    assert DEFAULT.secret_problem(use, {}) is not None
    assert DEFAULT.secret_problem(use, None) == (
        "spec.redis.secretRef.name: Secret team-redis does not exist in the job's namespace"
    )
    anything = dataclasses.replace(DEFAULT, secret_label=None)
    assert anything.secret_problem(use, {}) is None
    assert anything.secret_problem(use, None) is not None


def test_a_seed_list_config_map_needs_the_seeds_label_and_its_refusal_quotes_nothing() -> None:
    policy = TenancyPolicy.from_config(OperatorConfig())
    assert policy.seeds_label == SEED_LIST_LABEL == ("crawlfleet.io/crawljob-seeds", "true")
    where = "spec.seedsFrom.configMapKeyRef (ConfigMap app-env, key env)"
    assert policy.seed_list_problem(where, "seeds", {SEED_LIST_LABEL[0]: "true"}) is None
    assert policy.seed_list_problem(where, "seeds", None) is None  # missing: waited for
    refused = policy.seed_list_problem(where, "app-env", {"crawlfleet.io/crawljob-secret": "true"})
    assert refused == (
        f"{where}: ConfigMap app-env is not labelled crawlfleet.io/crawljob-seeds=true, the label"
        " that lets CrawlJobs read a ConfigMap as their seed list (add it if this ConfigMap is"
        " meant for crawlfleet); its content was not read"
    )
    chosen = TenancyPolicy.from_config(OperatorConfig(seeds_label="team.example/seeds=yes"))
    assert chosen.seed_list_problem(where, "s", {"team.example/seeds": "yes"}) is None
    anything = TenancyPolicy.from_config(OperatorConfig(seeds_label=""))
    assert anything.seed_list_problem(where, "app-env", {}) is None
    with pytest.raises(ConfigError, match=r"CRAWLFLEET_SEEDS_LABEL=.*must be key=value"):
        TenancyPolicy.from_config(Config.from_env({"CRAWLFLEET_SEEDS_LABEL": "seeds"}).operator)


@pytest.mark.parametrize(
    ("url", "hosts", "allowed"),
    [
        ("redis://redis.shared:6379/0", ["redis.shared"], True),
        ("redis://:pw@REDIS.Shared.:6379/0", ["redis.shared"], True),
        ("rediss://a.redis.example:6380", [".redis.example"], True),
        ("redis+cluster://:pw@cluster.redis.example:6379", [".redis.example"], True),
        ("rediss+cluster://evil.example:6379", [".redis.example"], False),
        ("redis://redis.example", [".redis.example"], False),  # a suffix admits names below it
        ("redis://evilredis.example", [".redis.example"], False),
        ("redis://10.20.3.4:6379", ["10.20.0.0/16"], True),
        ("redis://10.21.3.4:6379", ["10.20.0.0/16"], False),
        ("redis://[fd00::5]:6379", ["fd00::/64"], True),
        ("redis://10.20.3.4", ["10.20.3.4"], True),
        # A network admits IP literals only: never a name that may resolve into it.
        ("redis://ten.example", ["10.0.0.0/8"], False),
        ("redis://167772161", ["10.0.0.0/8"], False),  # 10.0.0.1 to getaddrinfo
        ("unix:///var/run/redis.sock", ["redis.shared", "10.0.0.0/8"], False),
        ("unix:///var/run/redis.sock", ["*"], True),
        ("redis://anything.example", ["*"], True),
        ("redis://redis.shared", [], False),
    ],
)
def test_a_redis_url_is_allowed_by_its_host_only(url: str, hosts: list[str], allowed: bool) -> None:
    assert redis_host_allowed(url, hosts) is allowed


def test_an_external_redis_is_refused_by_default_without_echoing_its_password() -> None:
    url = "redis://:hunter2@10.96.0.12:6379/0"
    assert DEFAULT.spec_problems(spec(redis={"url": url})) == [
        "spec.redis.url: names a Redis on 10.96.0.12, which this operator does not connect to"
        " (allowed: none: every job gets a managed Redis); leave redis unset for a managed one,"
        " or ask its administrator (chart value policy.redisUrls)"
    ]
    shared = TenancyPolicy.from_config(OperatorConfig(allowed_redis_hosts=("10.96.0.0/12",)))
    assert shared.spec_problems(spec(redis={"url": url})) == []
    assert shared.redis_url_problem("spec.redis.secretRef.name", "redis://db.internal") == (
        "spec.redis.secretRef.name: names a Redis on db.internal, which this operator does not"
        " connect to (allowed: 10.96.0.0/12); leave redis unset for a managed one, or ask its"
        " administrator (chart value policy.redisUrls)"
    )


def test_the_allowed_redis_hosts_are_read_from_the_environment_and_checked() -> None:
    config = Config.from_env({"CRAWLFLEET_ALLOWED_REDIS_HOSTS": "redis.shared, 10.20.0.0/16"})
    policy = TenancyPolicy.from_config(config.operator)
    assert policy.redis_hosts == ("redis.shared", "10.20.0.0/16")
    with pytest.raises(ConfigError, match=r"'10\.20\.0\.0/33' is not an IP network"):
        TenancyPolicy.from_config(OperatorConfig(allowed_redis_hosts=("10.20.0.0/33",)))
