"""Where a job's output goes in a cluster, or why it must not start (operator/output.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from crawlfleet.config import DrainConfig
from crawlfleet.errors import ConfigError
from crawlfleet.operator.children import JobRef, config_map, worker_deployment
from crawlfleet.operator.output import NOT_DURABLE, DefaultOutput, output_plan
from tests.support.specs import job_spec

JOB = JobRef(namespace="crawl", name="books")
SECRET = JOB.names.output_secret
DEFAULT = DefaultOutput.parse(
    json.dumps(
        {
            "destination": "s3://crawls/jobs",
            "s3": {"endpoint": "http://store.crawlfleet:7070", "secretRef": {"name": "creds"}},
            "secretNamespace": "crawlfleet",
        }
    )
)


def plan(default: DefaultOutput | None = None, **output: Any) -> Any:
    return output_plan(JOB, job_spec({"output": output}), default, output_secret=SECRET)


def worker_env(spec: Any) -> dict[str, Any]:
    manifest = worker_deployment(JOB, spec, replicas=1, image="w:1", drain=DrainConfig())
    (container,) = manifest["spec"]["template"]["spec"]["containers"]
    return {var["name"]: var.get("value", var.get("valueFrom")) for var in container["env"]}


def test_an_emptydir_is_no_place_for_output_and_says_how_to_fix_it() -> None:
    refused = plan()
    assert refused.problem == NOT_DURABLE
    assert "output.destination" in NOT_DURABLE
    assert "output.volume" in NOT_DURABLE
    assert "output.ephemeral: true" in NOT_DURABLE
    assert plan(destination="crawls/books").problem == NOT_DURABLE  # a folder in the emptyDir


def test_none_ephemeral_volume_and_s3_may_start() -> None:
    assert plan(format="none").problem is None
    ephemeral = plan(ephemeral=True)
    assert (ephemeral.problem, ephemeral.folder) == (None, "/data/books")
    assert "ephemeral" in ephemeral.description
    volume = {"persistentVolumeClaim": {"claimName": "crawl-output"}}
    on_volume = plan(volume=volume, destination="crawls/books")
    assert (on_volume.problem, on_volume.folder) == (None, "/data/crawls/books")
    assert on_volume.spec.output.destination is None  # the folder travels as --out
    outside = plan(ephemeral=True, destination="/srv/books")  # the model refuses it on a volume
    assert outside.problem is not None
    assert "is not on the emptyDir, which is mounted at /data" in outside.problem
    own = plan(destination="s3://mine/books/", s3={"secretRef": {"name": "mine"}})
    assert (own.problem, own.copy_secret) == (None, None)
    assert own.spec.output.destination == "s3://mine/books/"


def test_the_default_destination_applies_to_jobs_that_name_none() -> None:
    chosen = plan(DEFAULT)
    assert chosen.problem is None
    assert chosen.spec.output.destination == "s3://crawls/jobs/crawl/books/"
    assert chosen.copy_secret == ("crawlfleet", "creds")
    assert chosen.spec.output.s3 is not None
    assert chosen.spec.output.s3.endpoint == "http://store.crawlfleet:7070"
    assert chosen.spec.output.s3.secret_ref is not None
    assert chosen.spec.output.s3.secret_ref.name == SECRET
    # A job that names its own folder, or a volume, keeps it: the default is for none.
    assert plan(DEFAULT, destination="crawls/books").problem == NOT_DURABLE
    volume = {"persistentVolumeClaim": {"claimName": "crawl-output"}}
    assert plan(DEFAULT, volume=volume).copy_secret is None


def test_credentials_reach_the_workers_from_the_secret_never_the_config_map() -> None:
    chosen = plan(DEFAULT)
    env = worker_env(chosen.spec)
    assert env["AWS_ACCESS_KEY_ID"] == {
        "secretKeyRef": {"name": SECRET, "key": "AWS_ACCESS_KEY_ID"}
    }
    assert env["AWS_SECRET_ACCESS_KEY"]["secretKeyRef"]["name"] == SECRET
    assert env["AWS_SESSION_TOKEN"]["secretKeyRef"]["optional"] is True
    assert env["CRAWLFLEET_SPOOL_DIR"].startswith("/tmp/")
    document = config_map(JOB, chosen.spec)["data"]["job.yaml"]
    assert "s3://crawls/jobs/crawl/books/" in document
    assert "AWS_SECRET_ACCESS_KEY" not in document
    assert "AWS_ACCESS_KEY_ID" not in worker_env(plan(ephemeral=True).spec)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "not JSON"),
        ('{"destination": "/srv/crawls"}', "must be an s3://bucket/prefix/ URL"),
        ('{"destination": "s3://crawls/", "s3": {"secretRef": {"name": "x"}}}', "secretNamespace"),
        ('{"destination": "s3://AK:SK@crawls/"}', "must not hold a user name, password or key"),
    ],
)
def test_a_bad_default_is_refused_at_start(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match="CRAWLFLEET_DEFAULT_OUTPUT") as refused:
        DefaultOutput.parse(text)
    assert message in str(refused.value)
    assert "SK@" not in str(refused.value)


PER_NAMESPACE = DefaultOutput.parse(
    json.dumps(
        {
            "destination": "s3://crawls/jobs",
            "s3": {"endpoint": "http://store.crawlfleet:7070", "secretRef": {"name": "creds"}},
            "secretNamespace": "crawlfleet",
            "namespaces": {
                "crawl": {
                    "destination": "s3://crawls-crawl/",
                    "s3": {
                        "endpoint": "http://store.crawlfleet:7070",
                        "secretRef": {"name": "crawl-keys"},
                    },
                },
            },
        }
    )
)


def test_a_namespace_with_its_own_default_gets_its_own_destination_and_keys_only() -> None:
    chosen = plan(PER_NAMESPACE)
    assert chosen.problem is None
    assert chosen.spec.output.destination == "s3://crawls-crawl/books/"
    assert chosen.copy_secret == ("crawlfleet", "crawl-keys")  # never the shared "creds"
    assert "for namespace crawl" in chosen.description
    other = output_plan(
        JobRef(namespace="elsewhere", name="books"),
        job_spec({}),
        PER_NAMESPACE,
        output_secret=SECRET,
    )
    assert other.spec.output.destination == "s3://crawls/jobs/elsewhere/books/"
    assert other.copy_secret == ("crawlfleet", "creds")


def test_without_a_shared_default_an_unlisted_namespace_gets_none() -> None:
    only = DefaultOutput.parse(
        json.dumps(
            {
                "secretNamespace": "crawlfleet",
                "namespaces": {"team-a": {"destination": "s3://team-a/"}},
            }
        )
    )
    assert only.output is None
    assert plan(only).problem == NOT_DURABLE  # the job's namespace is "crawl"
    assert only.for_namespace("team-a") is not None


def test_a_bad_namespace_default_is_refused_at_start_with_its_path() -> None:
    with pytest.raises(ConfigError, match=r"namespaces\.team-a\.destination must be an s3://"):
        DefaultOutput.parse(
            json.dumps({"namespaces": {"team-a": {"destination": "/srv"}}, "secretNamespace": "x"})
        )
