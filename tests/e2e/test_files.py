"""Files on the real control plane: a download into a bucket outlives its pod (issue 24).

The operator in its own process, the worker pods run by the kubelet double as local processes
(tests/e2e/cluster/kubelet.py), the job's frontier in a Redis the test owns, the output in the
suite's S3 server (versitygw). A CrawlJob downloads one big file (its URL the seed,
``maxDepth: 0``, a ``files`` rule) into ``s3://<bucket>/crawl/``. When about half of it has gone
out, the worker pod's process is SIGKILLed (as the OOM killer or a lost node would end it) and
the pod deleted at once, so its Deployment makes a new one. The new pod's worker finds the
multipart upload the first one left in the bucket (its parts and sidecar object), asks the
site for the rest only and completes that upload: a ``Range: bytes=N-`` request with N > 0, at
most 1.2 times the file sent in all, the stored object's sha256 the file's, and the record
written by the new pod.

Runtime: about 30 s, 40 s with the control plane started (the operator and two pods, a 200
MB file at 25 MB/s).
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import cast
from urllib.parse import urlsplit

import pytest
from kubernetes import client

from crawlfleet.local.redis_server import RedisServer
from crawlfleet.testsite import TestSite
from crawlfleet.testsite.files import FileSite, FileSiteConfig
from tests.e2e.cluster.client import Cluster
from tests.e2e.cluster.kubelet import KubeletDouble
from tests.e2e.fleets import ClusterFleet, wait_phase, wait_workers
from tests.e2e.operator_support import install_crd
from tests.e2e.test_output import credentials_secret, own_bucket
from tests.support.file_crawls import (
    KILLED_FILE_BYTES,
    KILLED_FILE_BYTES_PER_SECOND,
    PART_BYTES,
    bucket_objects,
    content_key,
    file_records,
    part_leftovers,
    resumed_from,
    served,
    sha256_of,
    stored_blobs,
    wait_sent,
)
from tests.support.s3 import S3Server

pytestmark = pytest.mark.slow

FILE_BYTES = KILLED_FILE_BYTES
NAME = "lecture.webm"
#: A new pod started and the download going on, well within the 60 s lease.
RESUMED_WITHIN_SECONDS = 30


@dataclass(frozen=True)
class Batch:
    """What a CrawlJob for a site is made from (``operator_support.crawljob`` reads these
    two): here a batch of file URLs and their hosts."""

    seeds: list[str]
    hosts: list[str]


@pytest.fixture(scope="module")
def crd(cluster: Cluster) -> None:
    install_crd(cluster)


def test_a_download_into_a_bucket_is_resumed_by_a_new_pod_after_its_pod_is_killed(
    cluster: Cluster,
    crd: None,
    kubelet: KubeletDouble,
    namespace: str,
    redis_server: RedisServer,
    core: client.CoreV1Api,
    s3_server: S3Server,
    tmp_path: Path,
) -> None:
    bucket = s3_server.create_bucket(f"files-{namespace}")
    credentials_secret(core, namespace, s3_server, "store-keys")
    with FileSite(FileSiteConfig(bytes_per_second=KILLED_FILE_BYTES_PER_SECOND)) as site:
        url = site.url("ranges", f"/files/{NAME}?size={FILE_BYTES}")
        batch = Batch(seeds=[url], hosts=[urlsplit(url).netloc])
        fleet = ClusterFleet(
            "files", cast(TestSite, batch), redis_server.url, tmp_path, cluster, namespace, kubelet
        )
        try:
            fleet.start(
                scope={"maxDepth": 0},
                files={"rules": [{"match": r"\.webm(\?|$)"}], "partSizeBytes": PART_BYTES},
                output={**own_bucket(s3_server, bucket), "ephemeral": False},
                workers={"minReplicas": 1, "maxReplicas": 1},
            )  # the lease as operator_support's: 60 s, dead after 4 s without a heartbeat
            ((killed, pid),) = wait_workers(fleet, 1).items()
            at_kill = wait_sent(site, [("ranges", NAME, FILE_BYTES)])[NAME]
            os.kill(pid, signal.SIGKILL)  # the container's process, mid-body
            killed_at = time.monotonic()  # the site's clock (FileRequestRecord.at)
            cluster.kubectl(
                "delete", "pod", killed, "-n", namespace, "--grace-period=0", "--force",
                "--wait=false",
            )  # fmt: skip
            wait_phase(fleet, "Succeeded", timeout=180)
            log = served(site, "ranges", NAME)
        finally:
            fleet.close()

    # The new pod asked for the rest only.
    start = resumed_from(log, at_kill, FILE_BYTES)
    # Once the pod is gone its file slot comes back with its lease, not a lease ttl later.
    assert log[-1].at - killed_at < RESUMED_WITHIN_SECONDS, log[-1].at - killed_at

    # It completed the same upload: the stored object is the file, written by the new pod.
    objects = bucket_objects(s3_server, bucket, "crawl/")
    (record,) = file_records(objects)
    sha256 = site.sha256(NAME, FILE_BYTES)
    assert (record["url"], record["sha256"], record["resumed_from"]) == (url, sha256, start)
    assert str(record["worker"]).split("#")[0] != killed
    blobs = stored_blobs(objects)
    assert list(blobs) == [content_key(sha256)]
    assert sha256_of(blobs[content_key(sha256)]) == sha256
    assert part_leftovers(objects) == []
