"""A job that keeps going (revisit rules, no schedule), on both backends: ``crawlfleet run`` and
the operator on the real control plane, through the steering contract's harness.

It never completes: crawled out, it waits for its seed page's next revisit with its fleet at
zero (``minReplicas: 0``), is woken when the revisit comes due, and suspend, resume and delete
work as for any job. The site counts every fetch server-side.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from crawlfleet.frontier import canonicalize
from crawlfleet.testsite import SiteConfig, TestSite
from tests.e2e.fleets import ClusterFleet, fetches, wait_for, wait_phase
from tests.e2e.operator_support import get_job
from tests.e2e.test_steering import FleetOf, fleet_of, scales  # noqa: F401 (a fixture)

pytestmark = pytest.mark.slow

#: The shortest interval a rule may have (crawljob/recrawl.py's floor).
INTERVAL = "10s"


def _revisited(fleet: ClusterFleet) -> dict[str, Any] | None:
    """status.freshness once it counts a revisit (the operator patches it every tick)."""
    status = get_job(fleet.cluster, fleet.namespace, fleet.name).get("status", {})
    fresh: dict[str, Any] = status.get("freshness") or {}
    seen = fresh.get("changed", 0) + fresh.get("unchanged", 0) + fresh.get("notModified", 0)
    return fresh if seen else None


def test_a_job_that_keeps_going_is_woken_by_its_revisits_and_suspends_resumes_and_deletes(
    fleet_of: FleetOf,  # noqa: F811 (the fixture)
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No worker woken ahead of a revisit: the fleet goes to zero between visits.
    monkeypatch.setenv("CRAWLFLEET_RETRY_LEAD_SECONDS", "0")  # the runner or operator reads it
    with TestSite(SiteConfig(hosts=1, pages_per_host=5, hostile=False)) as site:
        (seed,) = site.seeds
        fleet = fleet_of("fresh", site)
        fleet.start(
            recrawl=[
                {
                    "match": f"^{re.escape(seed)}$",
                    "interval": INTERVAL,
                    "minInterval": INTERVAL,
                    "adaptive": {"whenChanged": 1, "whenUnchanged": 1},
                }
            ],
            workers={"minReplicas": 0, "maxReplicas": 1, "scaleDownDelaySeconds": 1},
        )
        tracked = canonicalize(seed)
        wait_for(lambda: (1, 0) in scales(fleet), fleet, "the fleet at zero", timeout=120)
        assert fleet.phase() == "Running"
        (waiting,) = fleet.events("Waiting")
        assert re.search(r"next revisit due at \S+Z \(1 tracked\)", waiting.message), waiting
        wait_for(lambda: fetches(site)[tracked] >= 2, fleet, "the revisit", timeout=60)
        moves = scales(fleet)
        assert (0, 1) in moves[moves.index((1, 0)) :], moves  # woken from zero
        if isinstance(fleet, ClusterFleet):  # status.freshness, as kubectl shows it
            fresh = wait_for(lambda: _revisited(fleet), fleet, "freshness in status", 30)
            assert fresh["tracked"] == 1
            assert fresh["nextRevisitAt"].endswith("Z")

        fleet.suspend(True)
        wait_phase(fleet, "Suspended", timeout=30)
        wait_for(lambda: not fleet.workers(), fleet, "the workers gone", timeout=60)
        visits = fetches(site)[tracked]
        fleet.suspend(False)
        wait_for(lambda: fetches(site)[tracked] > visits, fleet, "a revisit after resume", 60)
        assert fleet.phase() == "Running"
        assert fleet.events("Completed") == []
        others = {url: n for url, n in fetches(site).items() if url != tracked}
        assert len(others) == len(site.expected_pages()) - 1, others  # the other pages...
        assert all(n == 1 for n in others.values()), others  # ...fetched once each

        if isinstance(fleet, ClusterFleet):
            fleet.cluster.kubectl("delete", "crawljob", fleet.name, "-n", fleet.namespace)
            wait_for(lambda: not list(fleet._pods()), fleet, "the job's workers deleted", 90)
