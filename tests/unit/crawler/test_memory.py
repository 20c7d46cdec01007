"""The memory budget: the cgroup limit read as the kernel lays it out, and the byte semaphore.

The cgroup trees are folders laid out like /proc and /sys/fs/cgroup (the module reads files,
nothing else), one per layout a worker meets: cgroup v2 in a namespace, v2 seen from the host,
v1, no limit.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from crawlfleet.crawler.fetching.memory import (
    DEFAULT_LIMIT_BYTES,
    MIN_BUDGET_BYTES,
    ByteBudget,
    budget_bytes,
    cgroup_memory_limit,
)

MIB = 1024 * 1024


def lay_out(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_cgroup_v2_inside_a_namespace(tmp_path: Path) -> None:
    root = lay_out(
        tmp_path,
        {"proc/self/cgroup": "0::/\n", "sys/fs/cgroup/memory.max": f"{512 * MIB}\n"},
    )
    assert cgroup_memory_limit(root) == 512 * MIB


def test_cgroup_v2_the_lowest_limit_on_the_path_binds(tmp_path: Path) -> None:
    root = lay_out(
        tmp_path,
        {
            "proc/self/cgroup": "0::/kubepods/pod1/worker\n",
            "sys/fs/cgroup/kubepods/memory.max": "max\n",
            "sys/fs/cgroup/kubepods/pod1/memory.max": f"{300 * MIB}\n",
            "sys/fs/cgroup/kubepods/pod1/worker/memory.max": "max\n",
        },
    )
    assert cgroup_memory_limit(root) == 300 * MIB


def test_cgroup_v1_memory_controller(tmp_path: Path) -> None:
    root = lay_out(
        tmp_path,
        {
            "proc/self/cgroup": "12:cpu,cpuacct:/docker/abc\n9:memory:/docker/abc\n",
            # v1 mounted at the container's own cgroup: the named path is not there
            "sys/fs/cgroup/memory/memory.limit_in_bytes": f"{256 * MIB}\n",
        },
    )
    assert cgroup_memory_limit(root) == 256 * MIB


@pytest.mark.parametrize(
    "files",
    [
        {"proc/self/cgroup": "0::/\n", "sys/fs/cgroup/memory.max": "max\n"},
        {
            "proc/self/cgroup": "4:memory:/\n",
            "sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",
        },
        {"proc/self/cgroup": "0::/\n"},  # no memory controller mounted
        {},  # no /proc at all
    ],
    ids=["v2-max", "v1-unlimited", "no-file", "no-proc"],
)
def test_no_limit(tmp_path: Path, files: dict[str, str]) -> None:
    assert cgroup_memory_limit(lay_out(tmp_path, files)) is None


def test_budget_from_a_limit() -> None:
    assert budget_bytes(1024 * MIB, max_body_bytes=50 * MIB) == 462 * MIB
    assert budget_bytes(None, max_body_bytes=50 * MIB) == DEFAULT_LIMIT_BYTES // 2 - 50 * MIB
    assert budget_bytes(64 * MIB, max_body_bytes=50 * MIB) == MIN_BUDGET_BYTES


def test_reservations_share_the_capacity_and_the_oldest_may_overrun() -> None:
    budget = ByteBudget(100)
    oldest, younger = budget.reservation(), budget.reservation()
    assert oldest.try_grow(60)
    assert younger.try_grow(40)
    assert budget.exhausted
    assert not younger.try_grow(1)  # no room, and not the oldest
    assert oldest.try_grow(30)  # the oldest always goes on: it finishes and frees the rest
    assert budget.in_use_bytes == 130
    oldest.release()
    assert budget.in_use_bytes == 40
    assert younger.try_grow(60)  # now the oldest
    younger.shrink_to(10)
    assert (younger.held, budget.in_use_bytes) == (10, 10)
    younger.release()
    younger.release()  # idempotent
    assert budget.in_use_bytes == 0


async def test_a_waiting_body_goes_on_when_room_is_given_back() -> None:
    budget = ByteBudget(100)
    holder, waiter = budget.reservation(), budget.reservation()
    assert holder.try_grow(100)
    grown = asyncio.create_task(waiter.grow(50))
    await asyncio.sleep(0.01)
    assert not grown.done()  # waits rather than exceed the budget
    holder.release()
    await asyncio.wait_for(grown, 1)
    assert (waiter.held, budget.waits) == (50, 1)


def test_no_capacity_counts_but_never_refuses() -> None:
    budget = ByteBudget(None)
    reservation = budget.reservation()
    assert reservation.try_grow(10**12)
    assert not budget.exhausted
    assert budget.in_use_bytes == 10**12
