"""The images themselves, built from their Dockerfiles and run by podman under the pod specs
that ship: the operator's worker Deployment, the chart's operator Deployment.

- The worker image, under the worker pod spec the operator writes (read-only root, uid 65532,
  every capability dropped, no privilege escalation, the host's network for the loopback
  addresses), crawls the test site from a real redis-server into the suite's S3 server; told
  to stop (``podman stop``: SIGTERM, then the pod's grace) mid-crawl it drains and exits 0
  with no lease left, and a second worker container finishes the crawl: every page lands in
  the bucket.
- The operator image, under the chart's own Deployment (its args, env and security context)
  and nothing but the chart's RBAC (a token of the chart's ServiceAccount mounted where a pod
  gets it), reconciles a CrawlJob on the suite's API server to Succeeded; its workers run as
  the e2e suite runs them (the kubelet double).

Each image is built once per session (tests/support/images.py); ``./scripts/test`` builds them
before pytest. Containers run by podman here stand for the pods; running the images as pods on
a real kubelet is the real node's part of the suite, not this file's.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
import yaml

from crawlfleet.config import DrainConfig
from crawlfleet.crawljob import CrawlJobSpec
from crawlfleet.frontier import Frontier, FrontierSettings, canonicalize
from crawlfleet.local.redis_server import RedisServer
from crawlfleet.operator.children import JobRef, config_map, worker_deployment
from crawlfleet.testsite import SiteConfig, TestSite
from tests.e2e.cluster.client import Cluster, wait_established, wait_until
from tests.e2e.cluster.controlplane import ControlPlane, binary_dir
from tests.e2e.cluster.kubelet import KubeletDouble
from tests.e2e.operator_support import (
    apply,
    crawljob,
    get_job,
    leases_held,
    listen_port,
)
from tests.support.images import BuiltImages, ImageBuildError, built_images
from tests.support.podman import PodmanError, inspect, podman, run_container
from tests.support.s3 import REGION, S3Server

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "crawlfleet"
RELEASE = "crawlfleet"  # the chart's ServiceAccount and Role take the release's name
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


@pytest.fixture(scope="module")
def images() -> BuiltImages:
    try:
        return built_images()
    except ImageBuildError as error:
        pytest.fail(str(error), pytrace=False)


@pytest.fixture
def containers() -> Iterator[list[str]]:
    """Names of the containers a test starts; each is removed afterwards, running or not."""
    names: list[str] = []
    yield names
    for name in names:
        podman("rm", "--force", "--time", "0", name, check=False)


def container_name(role: str) -> str:
    return f"crawlfleet-test-{role}-{uuid.uuid4().hex[:8]}"


def exit_code(name: str) -> int:
    state = inspect(name)["State"]
    assert state["Status"] == "exited", state
    return int(state["ExitCode"])


def assert_restricted(name: str) -> None:
    """The container's process runs as the restricted pod spec says, by the kernel's own account
    inside the container: uid and gid 65532, no capability at all, no privilege escalation, a
    seccomp filter, and a root filesystem it cannot write."""
    status = dict(
        line.split(":\t", 1) for line in podman("exec", name, "cat", "/proc/1/status").splitlines()
    )
    assert status["Uid"].split() == ["65532"] * 4
    assert status["Gid"].split() == ["65532"] * 4
    assert status["CapEff"] == status["CapPrm"] == status["CapBnd"] == "0" * 16
    assert status["NoNewPrivs"] == "1"
    assert status["Seccomp"] == "2"  # a filter: the runtime's default profile
    with pytest.raises(PodmanError, match="Read-only file system"):
        podman("exec", name, "touch", "/opt/venv/tampered")


# -- the worker image ---------------------------------------------------------------------------


def bucket_pages(server: S3Server, bucket: str) -> set[str]:
    """The pages (fetched, 200) in the bucket's page files, as the server stored them."""
    pages = set()
    for key, path in server.stored_objects(bucket).items():
        if "/pages/" in key:
            for line in path.read_text().splitlines():
                record = json.loads(line)
                if record["status"] == 200 and not record["failure_class"]:
                    pages.add(canonicalize(record["url"]))
    return pages


async def _seed(url: str, settings: FrontierSettings, seeds: list[str]) -> None:
    """What the operator's tick does first: open the job's frontier and seed it."""
    frontier = await Frontier.connect(url, settings)
    try:
        await frontier.seed(seeds)
    finally:
        await frontier.aclose()


async def _crawled_and_done(url: str, settings: FrontierSettings) -> tuple[int, bool]:
    frontier = await Frontier.connect(url, settings)
    try:
        return (await frontier.stats()).crawled, await frontier.is_complete()
    finally:
        await frontier.aclose()


def test_the_worker_image_crawls_under_the_operators_pod_spec_and_drains_on_sigterm(
    images: BuiltImages,
    containers: list[str],
    s3_server: S3Server,
    tmp_path: Path,
) -> None:
    job = JobRef(namespace=f"images-{uuid.uuid4().hex[:6]}", name="books")
    bucket = s3_server.create_bucket(f"worker-image-{uuid.uuid4().hex[:6]}")
    # Slow pages (0.8 s each, 4 at a time per host: about 6 s in all), so the first worker is
    # stopped while it holds leases and the crawl is far from done.
    config = SiteConfig(hosts=2, pages_per_host=30, hostile=False, latency_seconds=0.8)
    with TestSite(config) as site, RedisServer(tmp_path / "redis") as server:
        output = {
            "maxFileAgeSeconds": 1,
            "ephemeral": False,
            "destination": f"s3://{bucket}/crawl/",
            "s3": {
                "endpoint": s3_server.endpoint_url,
                "region": REGION,
                "secretRef": {"name": "store-keys"},
            },
        }
        spec = CrawlJobSpec.from_mapping(crawljob(job.name, site, output=output)["spec"])
        pod = worker_deployment(job, spec, replicas=1, image=images.worker, drain=DrainConfig())[
            "spec"
        ]["template"]["spec"]
        job_files = tmp_path / "job"
        job_files.mkdir()
        (job_files / "job.yaml").write_text(config_map(job, spec)["data"]["job.yaml"])
        job_files.chmod(0o755)
        (job_files / "job.yaml").chmod(0o644)
        keys = s3_server.root_credentials
        refs = {
            (job.names.redis_secret, "url"): server.url,
            ("store-keys", "AWS_ACCESS_KEY_ID"): keys.access_key_id,
            ("store-keys", "AWS_SECRET_ACCESS_KEY"): keys.secret_access_key,
        }
        settings = FrontierSettings.from_spec(f"{job.namespace}.{job.name}", spec)
        asyncio.run(_seed(server.url, settings, site.seeds))
        leases = redis.Redis.from_url(server.url, decode_responses=True)

        def start(pod_name: str) -> str:
            name = container_name("worker")
            containers.append(name)
            run_container(
                pod, name=name, pod_name=pod_name, namespace=job.namespace,
                image=images.worker, workdir=tmp_path, refs=refs,
                directories={"job": job_files},
            )  # fmt: skip
            return name

        def logs(name: str) -> str:
            return podman("logs", name, check=False)[-4000:]

        # The first worker, stopped mid-crawl while it holds leases: it drains and exits 0.
        first = start("books-workers-first")
        try:
            wait_until(
                lambda: (
                    leases_held(leases, job.namespace, job.name, "books-workers-first") > 0
                    and asyncio.run(_crawled_and_done(server.url, settings))[0] >= 5
                ),
                timeout=60,
                what="the first worker crawling, with leases held",
            )
        except AssertionError as error:
            raise AssertionError(f"{error}\n{logs(first)}") from None
        # SIGTERM, then SIGKILL after the pod's grace (podman's stop timeout): exit 0 says the
        # worker drained within it; 137 would be the kill.
        held = leases_held(leases, job.namespace, job.name, "books-workers-first")
        podman("stop", first, timeout=float(pod["terminationGracePeriodSeconds"]) + 30)
        assert exit_code(first) == 0, logs(first)
        assert leases_held(leases, job.namespace, job.name, "books-workers-first") == 0
        crawled_by_first, done = asyncio.run(_crawled_and_done(server.url, settings))
        assert not done
        assert held > 0, "the first worker held no lease when stopped: nothing was drained"
        assert bucket_pages(s3_server, bucket), "the drained worker left no durable pages"

        # A second worker finishes the crawl; stopped when the frontier is done, it exits 0.
        second = start("books-workers-second")
        # (checked on this one: it runs on after the crawl is done, where the first had to be
        # stopped promptly, mid-crawl)
        assert_restricted(second)
        try:
            wait_until(
                lambda: asyncio.run(_crawled_and_done(server.url, settings))[1],
                timeout=90,
                what="the crawl complete",
            )
        except AssertionError as error:
            raise AssertionError(f"{error}\n{logs(second)}") from None
        podman("stop", second, timeout=float(pod["terminationGracePeriodSeconds"]) + 30)
        assert exit_code(second) == 0, logs(second)
        assert leases.zcard(f"cf:{{{job.namespace}.{job.name}}}:leases") == 0

        expected = {canonicalize(url) for url in site.expected_pages()}
        assert crawled_by_first < len(expected)
        assert bucket_pages(s3_server, bucket) == expected

        leases.close()


# -- the operator image -------------------------------------------------------------------------


def helm(*args: str) -> str:
    """The helm the test bed built (tests/e2e/cluster/build.sh)."""
    done = subprocess.run(
        [str(binary_dir() / "helm"), *args], capture_output=True, text=True, timeout=120
    )
    if done.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def service_account_files(
    cluster: Cluster, control_plane: ControlPlane, namespace: str, where: Path
) -> Path:
    """What a pod of the chart's ServiceAccount gets mounted: a token from the TokenRequest API,
    the cluster's CA and the namespace, readable by the container's user."""
    where.mkdir()
    token = cluster.kubectl(
        "create", "token", RELEASE, "--namespace", namespace, "--duration=1h"
    ).stdout.strip()
    (where / "token").write_text(token)
    (where / "ca.crt").write_bytes(control_plane.pki.ca_cert.read_bytes())
    (where / "namespace").write_text(namespace)
    where.chmod(0o755)
    for path in where.iterdir():
        path.chmod(0o644)
    return where


def test_the_operator_image_reconciles_a_job_under_the_charts_deployment_and_rbac(
    images: BuiltImages,
    containers: list[str],
    cluster: Cluster,
    control_plane: ControlPlane | None,
    kubelet: KubeletDouble,
    namespace: str,
    tmp_path: Path,
) -> None:
    assert control_plane is not None  # the kubelet fixture skips on an external cluster
    cluster.kubectl(
        "apply", "--server-side", "--force-conflicts", "--field-manager=images-test",
        "-f", str(CHART / "crds"),
    )  # fmt: skip
    wait_established(cluster, "crawljobs.crawlfleet.io")
    health, metrics = listen_port(), listen_port()
    values = [
        "--namespace", namespace,
        "--set", f"peering.name={namespace}",
        "--set", "image.tag=dev", "--set", "workerImage.tag=dev",
        # The host's network: the ports are free ones of this machine, on its loopback.
        "--set", f"healthPort={health}", "--set", f"metrics.port={metrics}",
        "--set", "bindAddress=127.0.0.1",
    ]  # fmt: skip
    where = ["--kubeconfig", str(cluster.kubeconfig)]
    helm(*where, "install", RELEASE, str(CHART), "--set", "replicas=0", *values)
    try:
        rendered = helm("template", RELEASE, str(CHART), *values)
        (deployment,) = [
            doc for doc in yaml.safe_load_all(rendered) if doc and doc["kind"] == "Deployment"
        ]
        pod = deployment["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == RELEASE
        assert pod["containers"][0]["image"] == images.operator

        # In-cluster login, as in the pod: the ServiceAccount's files and the API's address.
        account = service_account_files(cluster, control_plane, namespace, tmp_path / "sa")
        server = urlsplit(
            yaml.safe_load(cluster.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
        )
        pod = {
            **pod,
            "volumes": [*pod["volumes"], {"name": "sa", "secret": {"secretName": "token"}}],
        }
        (container,) = pod["containers"]
        container = {
            **container,
            "volumeMounts": [
                *container["volumeMounts"],
                {"name": "sa", "mountPath": SERVICE_ACCOUNT_DIR, "readOnly": True},
            ],
            "env": [
                {"name": "KUBERNETES_SERVICE_HOST", "value": server.hostname},
                {"name": "KUBERNETES_SERVICE_PORT", "value": str(server.port)},
                *container["env"],
            ],
        }
        pod["containers"] = [container]
        name = container_name("operator")
        containers.append(name)
        run_container(
            pod, name=name, pod_name="crawlfleet-operator-0", namespace=namespace,
            image=images.operator, workdir=tmp_path, directories={"sa": account},
        )  # fmt: skip

        def logs() -> str:
            return podman("logs", name, check=False)[-6000:]

        def healthy() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{health}/healthz", timeout=2) as r:
                    return bool(r.status == 200)
            except OSError:
                return False

        with TestSite(SiteConfig(hosts=2, pages_per_host=20, hostile=False)) as site:
            try:
                wait_until(healthy, timeout=60, what="the operator container healthy")
                assert_restricted(name)
                apply(
                    cluster,
                    crawljob("books", site, workers={"image": images.worker}),
                    namespace=namespace,
                )
                wait_until(
                    lambda: (
                        get_job(cluster, namespace, "books").get("status", {}).get("phase")
                        == "Succeeded"
                    ),
                    timeout=150,
                    interval=0.5,
                    what="books to reach Succeeded",
                )
            except AssertionError as error:
                raise AssertionError(f"{error}\n{logs()}") from None
            job: dict[str, Any] = get_job(cluster, namespace, "books")
            assert job["status"]["crawled"] == len(site.expected_pages())
        log = logs()
        refused = [line for line in log.splitlines() if "forbidden" in line.lower()]
        assert refused == [], "\n".join(refused)
        podman("stop", name, timeout=float(pod["terminationGracePeriodSeconds"]) + 30)
        assert exit_code(name) == 0, logs()
    finally:
        helm(*where, "--namespace", namespace, "uninstall", RELEASE, "--wait", "--timeout=60s")
