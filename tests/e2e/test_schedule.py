"""Scheduled CrawlJobs in a cluster (DESIGN §10): a run at each due time, each under its own
prefix with its manifest, the next run starting from the last *successful* run's state.

Real kube-apiserver and controllers, the process kubelet, the real operator and workers, the
loopback test site and the S3 test server. Time is the one thing not real: the operator reads
its due times from a file clock (``CRAWLFLEET_SCHEDULE_CLOCK_FILE``) that the test moves
forward, so a quarter-hourly schedule runs twice in seconds; everything a run does is real.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from crawlfleet.fleet.clock import FileClock
from crawlfleet.frontier import canonicalize
from crawlfleet.testsite import SiteConfig, TestSite
from tests.e2e.cluster.client import Cluster, wait_until
from tests.e2e.cluster.kubelet import KubeletDouble
from tests.e2e.operator_support import (
    GROUP,
    PLURAL,
    VERSION,
    OperatorProcess,
    apply,
    crawljob,
    get_job,
    install_crd,
    posted_events,
    running_operator,
    wait_crawled,
    wait_for_phase,
)
from tests.e2e.test_output import credentials_secret, output_verify, own_bucket
from tests.support.s3 import S3Server

#: Ten seconds before a quarter-hour: a quarter-hourly job's first due time is T0 + 10 s.
T0 = datetime(2026, 12, 2, 8, 14, 50, tzinfo=UTC)
QUARTER = timedelta(minutes=15)
FIRST, SECOND, THIRD = "20261202T081500Z", "20261202T083000Z", "20261202T084500Z"


@pytest.fixture(scope="module")
def crd(cluster: Cluster) -> None:
    install_crd(cluster)


@pytest.fixture
def clock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The operator's clock (it inherits the variable), at T0."""
    path = tmp_path / "clock"
    FileClock.set(path, T0)
    monkeypatch.setenv("CRAWLFLEET_SCHEDULE_CLOCK_FILE", str(path))
    return path


def scheduled_job(
    name: str, site: TestSite, server: S3Server, bucket: str, **schedule: Any
) -> dict[str, Any]:
    document = crawljob(name, site, workers={"minReplicas": 1, "maxReplicas": 1})
    document["spec"]["schedule"] = {"cron": "*/15 * * * *", **schedule}
    document["spec"]["output"] = own_bucket(server, bucket)
    return document


def fetched(site: TestSite, since: int = 0) -> Counter[str]:
    """Pages (not robots.txt) the site served since its ``since``-th request."""
    return Counter(
        canonicalize(r.url)
        for r in site.log.all_requests()[since:]
        if r.status == 200 and r.path != "/robots.txt"
    )


def stored_manifest(server: S3Server, bucket: str, run: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(
        server.stored_objects(bucket)[f"crawl/runs/{run}/manifest.json"].read_text()
    )
    return loaded


def wait_status(
    cluster: Cluster,
    namespace: str,
    name: str,
    what: str,
    probe: Any,
    operator: OperatorProcess,
    timeout: float = 120,
) -> dict[str, Any]:
    """Poll the job until ``probe(status)`` holds; a timeout shows the job's last status and
    the operator's log (its warnings and errors first: a log of ticks alone says nothing)."""
    last: dict[str, Any] = {}

    def found() -> dict[str, Any] | None:
        job = get_job(cluster, namespace, name)
        last["status"] = job.get("status")
        return job if probe(job.get("status") or {}) else None

    try:
        job: dict[str, Any] = wait_until(found, timeout=timeout, interval=0.3, what=what)
    except AssertionError as error:
        log = operator.log_file.read_text(errors="replace").splitlines()
        loud = [line for line in log if '"level": "info"' not in line][-40:]
        raise AssertionError(
            f"{error}\nstatus: {last.get('status')}\nwarnings: {loud}\n{operator.log()}"
        ) from None
    return job


def run_outcomes(status: dict[str, Any]) -> list[tuple[str, str]]:
    return [(run["id"], run["outcome"]) for run in status.get("runs") or ()]


def events(core: client.CoreV1Api, namespace: str, reason: str, at_least: int = 1) -> list[Any]:
    return posted_events(core, namespace, reason, at_least)


def test_a_scheduled_job_runs_at_each_due_time_and_the_second_revisits_its_seeds_conditionally(
    cluster: Cluster,
    crd: None,
    kubelet: KubeletDouble,
    namespace: str,
    tmp_path: Path,
    core: client.CoreV1Api,
    s3_server: S3Server,
    clock: Path,
) -> None:
    """Between runs the job is Scheduled with no workers and says when its next run is (the
    NEXT-RUN column); at each due time a run starts, writes under runs/<run-id>/ with its
    manifest, commits, and is recorded. The second run starts from the first's committed
    state: its seeds, tracked by a revisit rule, are fetched again with the validators the
    first run kept (one host sends ETags, the other Last-Modified) -- the edited one changed,
    the other 304 Not Modified -- and every other page is seen and, with no rule, not fetched
    again."""
    bucket = s3_server.create_bucket(f"runs-{namespace}")
    credentials_secret(core, namespace, s3_server, "store-keys")
    with (
        TestSite(
            SiteConfig(
                hosts=2,
                pages_per_host=20,
                hostile=False,
                etag_hosts=(0,),
                last_modified_hosts=(1,),
            )
        ) as site,
        running_operator(cluster, namespace, tmp_path) as operator,
    ):
        document = scheduled_job("news", site, s3_server, bucket)
        document["spec"]["recrawl"] = [{"match": r"^http://[^/]+/$", "interval": "1h"}]
        apply(cluster, document, namespace=namespace)
        job = wait_for_phase(cluster, namespace, "news", "Scheduled", operator=operator)
        assert job["status"]["nextRunAt"] == "2026-12-02T08:15:00Z"
        listed = cluster.kubectl("get", "crawljobs", "-n", namespace).stdout
        assert "NEXT-RUN" in listed.splitlines()[0]
        assert "2026-12-02T08:15:00Z" in listed
        assert not site.log.all_requests()  # nothing runs before its due time

        FileClock.set(clock, T0 + timedelta(seconds=10))
        job = wait_status(
            cluster, namespace, "news", "the first run",
            lambda s: run_outcomes(s) == [(FIRST, "Succeeded")] and s.get("phase") == "Scheduled",
            operator,
        )  # fmt: skip
        pages = {canonicalize(url) for url in site.expected_pages()}
        first = job["status"]["runs"][0]
        assert (first["pages"], first["changed"], first["unchanged"]) == (len(pages), 0, 0)
        assert first["startedAt"] <= first["endedAt"]
        assert job["status"]["nextRunAt"] == "2026-12-02T08:30:00Z"
        assert "currentRun" not in job["status"] or job["status"]["currentRun"] is None
        assert set(fetched(site)) == pages
        assert stored_manifest(s3_server, bucket, FIRST)["counts"]["crawled"] == len(pages)
        assert stored_manifest(s3_server, bucket, FIRST)["run"] == FIRST
        wait_until(
            lambda: get_job(cluster, namespace, "news")["status"].get("replicas") == 0,
            timeout=60,
            what="no workers between runs",
        )
        before_second = len(site.log.all_requests())
        edited, kept = site.seeds
        site.edit_page(edited)

        FileClock.set(clock, T0 + QUARTER + timedelta(seconds=10))
        job = wait_status(
            cluster, namespace, "news", "the second run",
            lambda s: run_outcomes(s) == [(SECOND, "Succeeded"), (FIRST, "Succeeded")],
            operator,
        )  # fmt: skip
        second = [
            (canonicalize(r.url), r.status)
            for r in site.log.all_requests()[before_second:]
            if r.path != "/robots.txt"
        ]
        assert sorted(second) == sorted([(canonicalize(edited), 200), (canonicalize(kept), 304)])
        run = job["status"]["runs"][0]
        assert (run["pages"], run["changed"], run["unchanged"]) == (2, 1, 1)
        assert stored_manifest(s3_server, bucket, SECOND)["counts"]["crawled"] == 2
        started = [e.message for e in events(core, namespace, "RunStarted", at_least=2)]
        assert any(f"run {SECOND} started from the state of run {FIRST}" in m for m in started)
        assert len(events(core, namespace, "RunSucceeded", at_least=2)) == 2

    verify = output_verify(s3_server, f"s3://{bucket}/crawl/")
    assert verify.returncode == 0, verify.stderr
    for run in (FIRST, SECOND):
        assert f"s3://{bucket}/crawl/runs/{run}/: verified" in verify.stdout


def test_forbid_skips_a_due_time_and_a_run_cancelled_halfway_commits_nothing(
    cluster: Cluster,
    crd: None,
    kubelet: KubeletDouble,
    namespace: str,
    tmp_path: Path,
    core: client.CoreV1Api,
    s3_server: S3Server,
    clock: Path,
) -> None:
    """A due time that comes while a run goes is skipped (Forbid, the default), with a
    RunSkipped Event and a count. The run is then cancelled halfway (suspended): it commits
    nothing, so the next run starts from nothing kept and fetches again the pages the
    cancelled one had fetched."""
    bucket = s3_server.create_bucket(f"cancel-{namespace}")
    credentials_secret(core, namespace, s3_server, "store-keys")
    custom = client.CustomObjectsApi(cluster.api)
    # Slow enough that a run is still going when the test moves the clock and suspends it.
    slow = SiteConfig(hosts=2, pages_per_host=30, hostile=False, latency_seconds=0.2)
    with (
        TestSite(slow) as site,
        running_operator(cluster, namespace, tmp_path) as operator,
    ):
        document = scheduled_job("slow", site, s3_server, bucket)
        document["spec"]["concurrency"] = {"perWorker": 2, "perHost": 1, "hostDelaySeconds": 0}
        apply(cluster, document, namespace=namespace)
        wait_for_phase(cluster, namespace, "slow", "Scheduled", operator=operator)

        FileClock.set(clock, T0 + timedelta(seconds=10))
        wait_status(
            cluster, namespace, "slow", "the first run going",
            lambda s: s.get("currentRun") == FIRST and s.get("phase") == "Running", operator,
        )  # fmt: skip
        wait_crawled(cluster, namespace, "slow", 3)

        FileClock.set(clock, T0 + QUARTER + timedelta(seconds=10))
        job = wait_status(
            cluster, namespace, "slow", "the second due time skipped",
            lambda s: s.get("runsSkipped") == 1, operator,
        )  # fmt: skip
        assert job["status"]["currentRun"] == FIRST
        assert job["status"]["nextRunAt"] == "2026-12-02T08:45:00Z"
        (skipped,) = events(core, namespace, "RunSkipped")
        assert f"run {FIRST} is still going (concurrencyPolicy Forbid)" in skipped.message

        custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, "slow", {"spec": {"suspend": True}}
        )
        job = wait_status(
            cluster, namespace, "slow", "the run cancelled",
            lambda s: run_outcomes(s) == [(FIRST, "Cancelled")] and s.get("phase") == "Suspended",
            operator,
        )  # fmt: skip
        cancelled = job["status"]["runs"][0]["pages"]
        assert 0 < cancelled < len(site.expected_pages())  # really cut short
        assert events(core, namespace, "RunCancelled")
        wait_until(
            lambda: (
                not core.list_namespaced_pod(
                    namespace, label_selector="app.kubernetes.io/component=worker"
                ).items
            ),
            timeout=90,
            what="the cancelled run's workers gone",
        )
        before_third = len(site.log.all_requests())

        custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, "slow", {"spec": {"suspend": False}}
        )
        job = wait_for_phase(cluster, namespace, "slow", "Scheduled", operator=operator)
        assert job["status"]["nextRunAt"] == "2026-12-02T08:45:00Z"
        FileClock.set(clock, T0 + 2 * QUARTER + timedelta(seconds=10))
        job = wait_status(
            cluster, namespace, "slow", "the third run",
            lambda s: run_outcomes(s)[:1] == [(THIRD, "Succeeded")], operator, timeout=180,
        )  # fmt: skip
        started = [e.message for e in events(core, namespace, "RunStarted", at_least=2)]
        assert any(f"run {THIRD} started from nothing kept" in m for m in started)
        pages = {canonicalize(url) for url in site.expected_pages()}
        assert set(fetched(site, before_third)) == pages  # the cancelled run's pages again
        assert job["status"]["runs"][0]["pages"] == len(pages)
        assert stored_manifest(s3_server, bucket, THIRD)["counts"]["crawled"] == len(pages)
        assert f"crawl/runs/{FIRST}/manifest.json" not in s3_server.stored_objects(bucket)
