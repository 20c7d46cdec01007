"""Which client a frontier URL gives, and the errors a cluster's failover becomes."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import (
    AskError,
    ClusterDownError,
    ClusterError,
    MaxConnectionsError,
    MovedError,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)

from crawlfleet.errors import FrontierUnavailable
from crawlfleet.frontier.connection import (
    CLUSTER_MAX_CONNECTIONS_PER_NODE,
    call,
    connect,
    retry_window_seconds,
    translate,
)


async def test_a_cluster_url_gives_the_cluster_client_with_the_same_bounds() -> None:
    plain = connect("redis://:pw@r.example:7000/0")
    cluster = connect("rediss+cluster://:pw@r.example:7000")
    try:
        assert isinstance(plain, aioredis.Redis)
        assert isinstance(cluster, RedisCluster)
        assert cluster.nodes_manager.connection_kwargs["password"] == "pw"
        assert cluster.nodes_manager.connection_kwargs["decode_responses"] is True
        # no blocking pool on a cluster: a call past the bound fails, so the bound is wider
        assert cluster.nodes_manager.connection_kwargs["max_connections"] == (
            CLUSTER_MAX_CONNECTIONS_PER_NODE
        )
        assert retry_window_seconds(cluster) == retry_window_seconds(plain)
    finally:
        await plain.aclose()
        await cluster.aclose()


@pytest.mark.parametrize(
    "error",
    [
        ClusterDownError("CLUSTERDOWN The cluster is down"),
        TryAgainError("TRYAGAIN"),
        MovedError("3999 127.0.0.1:6381"),
        AskError("3999 127.0.0.1:6381"),
    ],
)
def test_a_failovers_refusals_are_unavailable_not_a_crash(error: ResponseError) -> None:
    assert type(translate(error)) is FrontierUnavailable


async def test_a_slot_no_node_serves_yet_is_unavailable() -> None:
    async def uncovered() -> None:
        raise SlotNotCoveredError("slot 3999 is not covered by the cluster")

    with pytest.raises(FrontierUnavailable, match="not covered"):
        await call(uncovered())


def test_a_slot_that_kept_redirecting_is_unavailable_and_says_why() -> None:
    """redis-py's cluster client gives up after its redirections with a bare "TTL exhausted."
    (a slot half moved: every script refused with TRYAGAIN): the caller waits, and the run's
    line says what the cluster was doing."""
    error = translate(ClusterError("TTL exhausted."))
    assert type(error) is FrontierUnavailable
    assert "a slot moving between masters, or a failover under way" in str(error)


async def test_a_connection_closed_under_a_command_is_unavailable() -> None:
    """redis-py's cluster client closes in-use connections when it reloads its slot map; the
    command on one finds its stream gone: unavailable (the caller retries), not a crash."""

    async def sending() -> None:
        writer = None
        writer.writelines([b"PING"])  # type: ignore[attr-defined]

    with pytest.raises(FrontierUnavailable, match="closed under the command"):
        await call(sending())


async def test_any_other_attribute_error_is_a_bug_and_stays_one() -> None:
    async def buggy() -> None:
        raise AttributeError("a bug of ours")

    async def misspelt() -> None:
        "text".no_such_method()  # type: ignore[attr-defined]

    for bug in (buggy, misspelt):
        with pytest.raises(AttributeError):
            await call(bug())


def test_an_error_without_a_message_is_named() -> None:
    assert str(translate(MaxConnectionsError())) == "Redis unavailable: MaxConnectionsError"
