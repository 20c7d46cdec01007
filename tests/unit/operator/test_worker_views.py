"""How the operator maps pods and heartbeats onto the fleet brain's workers."""

from __future__ import annotations

from crawlfleet.operator.handlers import PodInfo, _worker_views, pod_of


def pod(name: str, phase: str = "Running") -> PodInfo:
    return PodInfo.of(name, phase, "2026-11-29T12:00:00Z")


def test_pod_of_strips_the_incarnation() -> None:
    assert pod_of("books-workers-5d9c-x2x7q#a1b2c3") == "books-workers-5d9c-x2x7q"
    assert pod_of("local-3") == "local-3"


def test_a_restarted_container_supersedes_its_earlier_incarnation() -> None:
    beats = {"w-1#old": 30.0, "w-1#new": 0.5, "w-2#only": 1.0}
    views, superseded = _worker_views([pod("w-1"), pod("w-2"), pod("w-3", "Pending")], beats)
    by_id = {view.worker_id: view for view in views}
    assert set(by_id) == {"w-1#new", "w-2#only", "w-3"}
    assert by_id["w-1#new"].heartbeat_age_seconds == 0.5
    assert by_id["w-3"].heartbeat_age_seconds is None  # still starting: no heartbeat yet
    assert superseded == ["w-1#old"]


def test_failed_pods_are_not_running() -> None:
    views, _ = _worker_views([pod("w-1", "Failed")], {"w-1#x": 1.0})
    assert views[0].running is False


def test_pod_info_reads_the_creation_timestamp() -> None:
    assert pod("w-1").started_at == 1795953600.0
