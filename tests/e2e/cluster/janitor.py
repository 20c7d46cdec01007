"""Lets the e2e tests' namespaces go once their operators are gone.

A test's operator stops with the test, so nothing removes the ``crawlfleet.io/finalizer`` of
the CrawlJobs it handled, and the namespace the test deletes stays Terminating for the rest
of the session: the namespace controller lists every kind in it again and again (forty such
namespaces cost the API server about half a core in one suite run). Stripping the finalizer
when the namespace is deleted races with an operator that still runs (some tests stop theirs
after the namespace fixture's teardown) and re-adds it; so a thread looks every few seconds
for the tests' namespaces that have been Terminating longer than an operator needs to finish
its own deletion handlers, and drops the finalizers of what is left in them.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Final

from kubernetes import client

from crawlfleet.operator.crd import GROUP, PLURAL, VERSION

__all__ = ["NamespaceJanitor"]

#: The prefix of the namespaces the ``namespace`` fixture makes: no other is touched.
TEST_NAMESPACE_PREFIX: Final = "e2e-"
#: How long a deleted namespace is left to its operator before its finalizers are dropped.
GRACE_SECONDS: Final = 20.0
SWEEP_SECONDS: Final = 5.0


class NamespaceJanitor:
    """A daemon thread over its own API client; :meth:`stop` ends it."""

    def __init__(self, api: client.ApiClient) -> None:
        self._core = client.CoreV1Api(api)
        self._jobs = client.CustomObjectsApi(api)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="namespace-janitor", daemon=True)

    def start(self) -> NamespaceJanitor:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stopping.wait(SWEEP_SECONDS):
            try:
                self.sweep()
            except Exception:  # an API hiccup: the next sweep tries again
                continue

    def sweep(self) -> None:
        now = datetime.now(UTC)
        for namespace in self._core.list_namespace(_request_timeout=10).items:
            meta = namespace.metadata
            deleted = meta.deletion_timestamp
            if not meta.name.startswith(TEST_NAMESPACE_PREFIX) or deleted is None:
                continue
            if (now - deleted).total_seconds() < GRACE_SECONDS:
                continue
            self._drop_finalizers(meta.name)

    def _drop_finalizers(self, namespace: str) -> None:
        found = self._jobs.list_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, _request_timeout=10
        )
        for job in found["items"]:
            meta = job["metadata"]
            if not meta.get("finalizers"):
                continue
            try:
                self._jobs.patch_namespaced_custom_object(
                    GROUP,
                    VERSION,
                    namespace,
                    PLURAL,
                    meta["name"],
                    {"metadata": {"finalizers": None}},
                )
            except client.ApiException as error:
                if error.status != 404:  # gone meanwhile: what was wanted
                    raise
