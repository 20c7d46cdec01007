"""How pods and heartbeats become the fleet brain's workers (the tick's join, the pod index)."""

from __future__ import annotations

from typing import Any

from crawlfleet.fleet import FleetView, Unit, unit_of
from crawlfleet.fleet.backend import UnitWaiting
from crawlfleet.fleet.steer import join
from crawlfleet.frontier import WorkerHeartbeat
from crawlfleet.operator.backend import ContainerExit, PodInfo
from crawlfleet.operator.handlers import index_worker_pod

CREATED = {"creationTimestamp": "2026-11-29T12:00:00Z"}


def pod(name: str, phase: str = "Running", **meta: str) -> Unit:
    info = PodInfo.of(name, {"phase": phase}, {**CREATED, **meta})
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
    assert PodInfo.of("w-1", {"phase": "Running"}, CREATED).started_at == 1795953600.0


def test_the_pod_index_keys_pods_by_namespace_and_job_label() -> None:
    entry = index_worker_pod(
        name="books-workers-abc",
        namespace="crawls",
        labels={"crawlfleet.io/job": "books"},
        meta=CREATED,
        status={"phase": "Running"},
    )
    assert entry == {("crawls", "books"): PodInfo("books-workers-abc", "Running", 1795953600.0)}


def worker_status(restarts: int, state: dict[str, Any], last: dict[str, Any] | None = None) -> Any:
    """A worker pod's status as the kubelet reports a container that keeps dying."""
    container: dict[str, Any] = {"name": "worker", "restartCount": restarts, "state": state}
    if last is not None:
        container["lastState"] = {"terminated": last}
    sidecar = {"name": "other", "restartCount": 9, "state": {"running": {}}}
    return {"phase": "Running", "containerStatuses": [sidecar, container]}


REFUSED = {
    "exitCode": 2,
    "reason": "Error",
    "message": "OutputUnavailable: output destination s3://b/x/ at http://s:1: the bucket does"
    " not exist (NoSuchBucket)\n",
    "startedAt": "2026-11-29T12:01:00Z",
    "finishedAt": "2026-11-29T12:01:01Z",
}
NOW = 1795953600.0 + 120


def test_a_pod_backing_off_after_deaths_at_start_counts_them() -> None:
    status = worker_status(2, {"waiting": {"reason": "CrashLoopBackOff"}}, REFUSED)
    info = PodInfo.of("w-1", status, CREATED)
    assert info.restarts == 2
    assert info.last_exit == ContainerExit(2, REFUSED["message"], 1795953660.0, 1795953661.0)
    unit = info.unit(quick_seconds=60, now=NOW)
    assert unit.running  # the pod runs; its container is what keeps dying
    assert unit.quick_deaths == 3  # two restarts, and the death it is backing off from
    assert unit.last_exit is not None
    assert unit.last_exit.reason == "OutputUnavailable"
    assert unit.last_exit.message.endswith("the bucket does not exist (NoSuchBucket)")
    assert unit.last_exit.lived_seconds == 1.0


def test_a_restarted_container_still_young_is_still_in_its_crash_loop() -> None:
    running = {"running": {"startedAt": "2026-11-29T12:01:30Z"}}
    young = PodInfo.of("w-1", worker_status(3, running, REFUSED), CREATED)
    assert young.unit(quick_seconds=60, now=NOW).quick_deaths == 3
    # The same run, past the start-up window: it started fine, the count is over.
    assert young.unit(quick_seconds=60, now=NOW + 60).quick_deaths == 0


def test_a_death_after_a_long_run_or_a_clean_exit_is_no_crash_loop() -> None:
    long_run = {**REFUSED, "startedAt": "2026-11-29T11:00:00Z", "exitCode": 1, "message": ""}
    waiting = {"waiting": {"reason": "CrashLoopBackOff"}}
    unit = PodInfo.of("w-1", worker_status(4, waiting, long_run), CREATED).unit(
        quick_seconds=60, now=NOW
    )
    assert unit.quick_deaths == 0
    assert unit.last_exit is not None
    assert unit.last_exit.message == "exited with code 1"  # no message: the code says it
    clean = {**REFUSED, "exitCode": 0, "message": ""}
    done = PodInfo.of("w-1", worker_status(1, waiting, clean), CREATED)
    assert done.unit(quick_seconds=60, now=NOW).quick_deaths == 0


def test_a_pod_that_never_exited_has_no_exit() -> None:
    info = PodInfo.of(
        "w-1", worker_status(0, {"running": {"startedAt": CREATED["creationTimestamp"]}}), CREATED
    )
    unit = info.unit(quick_seconds=60, now=NOW)
    assert (unit.last_exit, unit.quick_deaths) == (None, 0)


def test_a_container_killed_at_start_is_no_crash_loop() -> None:
    killed = {**REFUSED, "exitCode": 137, "message": ""}
    waiting = {"waiting": {"reason": "CrashLoopBackOff"}}
    unit = PodInfo.of("w-1", worker_status(3, waiting, killed), CREATED).unit(
        quick_seconds=60, now=NOW
    )
    assert unit.quick_deaths == 0


UNSCHEDULABLE = (
    "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No"
    " preemption victims found for incoming pod."
)


def test_a_pod_the_scheduler_refused_says_why_in_the_schedulers_words() -> None:
    status = {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": UNSCHEDULABLE,
            }
        ],
    }
    unit = PodInfo.of("w-1", status, CREATED).unit(quick_seconds=60, now=NOW)
    assert unit.running  # Pending: not exited, not replaced either (fleet/policy.py)
    assert unit.waiting == UnitWaiting("Unschedulable", UNSCHEDULABLE)


def test_a_pod_whose_image_is_not_there_says_so() -> None:
    pulling = {"waiting": {"reason": "ErrImagePull", "message": "no such image"}}
    status = {**worker_status(0, pulling), "phase": "Pending"}
    unit = PodInfo.of("w-1", status, CREATED).unit(quick_seconds=60, now=NOW)
    assert unit.waiting == UnitWaiting("ErrImagePull", "no such image")


def test_a_running_worker_waits_for_nothing() -> None:
    running = {"running": {"startedAt": CREATED["creationTimestamp"]}}
    scheduled = {"type": "PodScheduled", "status": "True"}
    status = {**worker_status(0, running), "conditions": [scheduled]}
    assert PodInfo.of("w-1", status, CREATED).waiting is None
