"""How pods and heartbeats become the fleet brain's workers (the tick's join, the pod index)."""

from __future__ import annotations

from crawlfleet.fleet import FleetView, Unit, unit_of
from crawlfleet.fleet.steer import join
from crawlfleet.frontier import WorkerHeartbeat
from crawlfleet.operator.backend import PodInfo
from crawlfleet.operator.handlers import index_worker_pod

CREATED = {"creationTimestamp": "2026-11-29T12:00:00Z"}


def pod(name: str, phase: str = "Running", **meta: str) -> Unit:
    info = PodInfo.of(name, phase, {**CREATED, **meta})
    return Unit(info.name, info.running, info.started_at, info.drain_deadline)


def fleet(*units: Unit) -> FleetView:
    return FleetView(units, replicas=len(units), ready=len(units), owns="w-")


def beats(**ages: float) -> list[WorkerHeartbeat]:
    return [WorkerHeartbeat(worker.replace("_", "#"), 0.0, age) for worker, age in ages.items()]


def test_unit_of_strips_the_incarnation() -> None:
    assert unit_of("books-workers-5d9c-x2x7q#a1b2c3") == "books-workers-5d9c-x2x7q"
    assert unit_of("local-3") == "local-3"


def test_a_restarted_container_supersedes_its_earlier_incarnation() -> None:
    views, gone = join(
        fleet(pod("w-1"), pod("w-2"), pod("w-3", "Pending")),
        beats(**{"w-1_old": 30.0, "w-1_new": 0.5, "w-2_only": 1.0}),
    )
    by_id = {view.worker_id: view for view in views}
    assert set(by_id) == {"w-1#new", "w-2#only", "w-3"}
    assert by_id["w-1#new"].heartbeat_age_seconds == 0.5
    assert by_id["w-1#new"].unit == "w-1"
    assert by_id["w-3"].heartbeat_age_seconds is None  # still starting: no heartbeat yet
    assert gone == ("w-1#old",)


def test_heartbeats_of_gone_units_are_gone_but_strangers_are_left_alone() -> None:
    _, gone = join(fleet(pod("w-1")), beats(**{"w-1_a": 1.0, "w-9_b": 1.0, "by-hand": 1.0}))
    assert gone == ("w-9#b",)  # "by-hand" is not one of this backend's workers


def test_failed_pods_are_not_running() -> None:
    views, _ = join(fleet(pod("w-1", "Failed")), beats(**{"w-1_x": 1.0}))
    assert views[0].running is False


def test_a_terminating_pod_is_draining_until_its_deletion_timestamp() -> None:
    terminating = pod("w-1", deletionTimestamp="2026-11-29T12:05:00Z")
    (view,), _ = join(fleet(terminating), beats(**{"w-1_x": 1.0}))
    assert view.running
    assert view.draining
    assert view.drain_deadline == 1795953900.0


def test_pod_info_reads_the_creation_timestamp() -> None:
    assert PodInfo.of("w-1", "Running", CREATED).started_at == 1795953600.0


def test_the_pod_index_keys_pods_by_namespace_and_job_label() -> None:
    entry = index_worker_pod(
        name="books-workers-abc",
        namespace="crawls",
        labels={"crawlfleet.io/job": "books"},
        meta=CREATED,
        status={"phase": "Running"},
    )
    assert entry == {("crawls", "books"): PodInfo("books-workers-abc", "Running", 1795953600.0)}
