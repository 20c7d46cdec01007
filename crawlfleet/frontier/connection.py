"""The Redis client the frontier makes, and the one place redis-py's errors are translated.

Everything in ``frontier/`` that awaits Redis awaits it through :func:`call`, so a caller of
the frontier (worker, operator, local runner) sees :class:`FrontierUnavailable` and never a
redis-py exception, whichever command failed. Two refusals get their own class: a script's
``FRONTIER_LOST`` error (the job's meta is gone or belongs to another epoch) is
:class:`FrontierLost`, and Redis's ``OOM`` refusal of a write is :class:`FrontierFull`.

A frontier URL whose scheme is ``redis+cluster://`` (``rediss+cluster://`` with TLS) names a
Redis Cluster: :func:`connect` then makes redis-py's cluster client from any one node's
address (it discovers the rest). Every key of a job lives in one slot (keys.py), so scripts,
multi-key commands and pipelines go to the node that owns it; the few server commands the
frontier sends (INFO, CONFIG GET, TIME, SCAN, DBSIZE, PING) go there too
(:func:`job_node`), so the maxmemory checks read the node that holds the job. A failover's
redirections and refusals (MOVED, ASK, TRYAGAIN, CLUSTERDOWN, a slot no node serves yet)
become :class:`FrontierUnavailable`, as a plain Redis's restart does: callers retry. So does
a slot moved to another master (``redis-cli --cluster reshard``): while it is half moved
every script of the job is refused with TRYAGAIN, which redis-py retries for a moment and
then gives up on ("TTL exhausted"), and the caller retries it as any outage.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import Any, Final, TypeAlias, TypeVar

import redis.asyncio as aioredis
from redis import exceptions as redis_exceptions
from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import ClusterPipeline, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.cluster import PRIMARY
from redis.exceptions import (
    AskError,
    ClusterDownError,
    ClusterError,
    OutOfMemoryError,
    RedisClusterException,
    RedisError,
    ResponseError,
    TryAgainError,
)

from crawlfleet.crawljob.redis import CLUSTER_SCHEMES
from crawlfleet.errors import FrontierFull, FrontierLost, FrontierUnavailable
from crawlfleet.frontier.keys import JobKeys

__all__ = [
    "CALL_RETRIES",
    "CLUSTER_MAX_CONNECTIONS_PER_NODE",
    "LOST_CODE",
    "MAX_CONNECTIONS",
    "RedisClient",
    "call",
    "check_epoch",
    "close_quietly",
    "connect",
    "execute_keeping_refusals",
    "job_node",
    "retry_window_seconds",
    "translate",
]

#: The error code lib.lua's scripts answer with when the job's meta is missing or another's.
LOST_CODE = "FRONTIER_LOST"

log = logging.getLogger(__name__)

_T = TypeVar("_T")

#: What the frontier talks to: one Redis, or a Redis Cluster's client.
RedisClient: TypeAlias = aioredis.Redis | RedisCluster


#: How often redis-py sends a command again after a connection error or a timeout. Reads and
#: idempotent scripts may be re-sent blindly; the state changes that may not are sent with a
#: call id (scripts.ONCE_SCRIPTS), so a re-sent one returns the first one's reply.
CALL_RETRIES: Final = 3
_BACKOFF_CAP_SECONDS: Final = 1.0
#: Connections one client opens at most; more concurrent calls wait for one. Every connection
#: costs Redis some 20-40 KB of buffers, counted against ``maxmemory``: a worker that opened
#: one per concurrent fetch (robots, pacing, the flush, claims) had 22 open, and two such
#: workers held 1.6 MB of a 4 MiB Redis, which refused the frontier's writes before the
#: fleet's memory backpressure could see it coming. Every call is one short round trip (no
#: blocking commands), so a few connections carry a worker.
MAX_CONNECTIONS: Final = 8
#: A cluster client's connections to each node. redis-py's asyncio cluster client does not
#: wait for a free connection as the plain client's blocking pool does: past its bound a
#: call fails at once (``MaxConnectionsError``). A partitioned frontier's calls fan out (a
#: claim, an extend, an enqueue ask every partition at once; each new host's robots.txt
#: takes a lock and a store), and eight proved too few: under a chaos test's slot move a
#: worker's robots checks failed so, and two hosts' seeds waited a minute for their retry.
#: A cluster is always one the user runs and sizes, never the small managed Redis the
#: bound above protects.
CLUSTER_MAX_CONNECTIONS_PER_NODE: Final = 32


class _ClusterClient(RedisCluster):
    """redis-py's cluster client (8.1), which does not keep a node that is down as its default.

    After any connection error it reloads the slots before the next command and asks
    ``COMMAND`` of its default node: the first primary of its node cache, which is the master
    of slot 0 unless a command sent to it failed (only then is a node moved to the end). One
    that failed in a pipeline, or in that very ``COMMAND``, stays first, and every command of
    the client then fails before it is sent, for as long as that node is down: a worker of
    the chaos test claimed nothing for 25 s. Here the node that failed ``COMMAND`` is moved
    aside and the reload tried once more, with the next primary."""

    async def initialize(self, *args: Any, **kwargs: Any) -> RedisCluster:
        try:
            return await super().initialize(*args, **kwargs)
        except (redis_exceptions.ConnectionError, redis_exceptions.TimeoutError):
            primaries = self.nodes_manager.get_nodes_by_server_type(PRIMARY)
            if len(primaries) < 2:
                raise
            self.nodes_manager.move_node_to_end_of_cached_nodes(primaries[0].name)
            return await super().initialize(*args, **kwargs)


def connect(
    url: str, *, timeout_seconds: float = 10.0, max_connections: int = MAX_CONNECTIONS
) -> RedisClient:
    """The client the frontier expects: decoded replies, bounded waits, health checks, a
    bounded retry (its window is :func:`retry_window_seconds`) and a bounded pool (a call
    waits up to ``timeout_seconds`` for a free connection).

    A cluster URL gives redis-py's cluster client, with the same bounds per node: it follows
    MOVED and ASK itself and, after a connection error or CLUSTERDOWN, reloads the slot map
    and tries again (``CALL_RETRIES`` times), so a failover that completes within its
    retries is not even seen by the caller."""
    options: dict[str, Any] = {
        "max_connections": max_connections,
        "decode_responses": True,
        "socket_timeout": timeout_seconds,
        "socket_connect_timeout": timeout_seconds,
        "health_check_interval": 30,
        "retry": Retry(
            ExponentialWithJitterBackoff(base=0.01, cap=_BACKOFF_CAP_SECONDS), CALL_RETRIES
        ),
    }
    scheme, _, rest = url.partition("://")
    if scheme in CLUSTER_SCHEMES:
        options["max_connections"] = max(max_connections, CLUSTER_MAX_CONNECTIONS_PER_NODE)
        return _ClusterClient.from_url(f"{CLUSTER_SCHEMES[scheme]}://{rest}", **options)
    pool = aioredis.BlockingConnectionPool.from_url(url, timeout=timeout_seconds, **options)
    return aioredis.Redis.from_pool(pool)


async def job_node(client: RedisClient, key: str) -> dict[str, Any]:
    """Keyword arguments that send a keyless command (INFO, TIME, SCAN, ...) to the node
    holding ``key`` (any of the job's keys): ``{}`` on one Redis, where there is one node.

    On a cluster the node is read from the client's slot map, which a failover changes: a
    command sent to a master that just died fails as unavailable, and the map is reloaded
    before the caller's next try."""
    if not isinstance(client, RedisCluster):
        return {}
    try:
        await client.initialize()  # at once when it already is
        return {"target_nodes": client.get_node_from_key(key)}
    except (RedisError, RedisClusterException, OSError) as exc:
        raise translate(exc) from exc


def retry_window_seconds(client: RedisClient) -> float:
    """The longest a client may go on re-sending one command: each try may wait its socket
    timeout and a backoff. A call's reply is kept this long (and a little more) for a retry."""
    if isinstance(client, RedisCluster):
        kwargs = client.nodes_manager.connection_kwargs
        retry: Retry | None = client.retry
    else:
        kwargs = client.connection_pool.connection_kwargs
        retry = client.get_retry()
    timeout = kwargs.get("socket_timeout") or 10.0
    retries = retry.get_retries() if retry is not None else 0
    return (retries + 1) * (float(timeout) + _BACKOFF_CAP_SECONDS) + 10.0


async def call(awaitable: Awaitable[_T]) -> _T:
    """Await one Redis operation, translating redis-py's errors at this one boundary.

    ``OSError`` too: a socket error redis-py has not wrapped is as much "Redis unavailable",
    and so is a cluster's slot that no node serves yet (``SlotNotCoveredError``, which is no
    ``RedisError``), and a connection the cluster client closed under the command
    (:func:`_closed_under_us`).
    """
    try:
        return await awaitable
    except (RedisError, RedisClusterException, OSError) as exc:
        raise translate(exc) from exc
    except AttributeError as exc:
        if not _closed_under_us(exc):
            raise
        raise FrontierUnavailable(
            f"Redis unavailable: the connection was closed under the command ({exc})"
        ) from exc


def _closed_under_us(exc: AttributeError) -> bool:
    """redis-py's asyncio cluster client (8.1) closes every connection of its nodes, those in
    use included, when it reloads the slot map after a failover's refusals
    (``RedisCluster.aclose()``); a command another task was sending or reading on one of them
    then finds its stream gone (``'NoneType' object has no attribute 'writelines'``), which is
    a lost connection like any other, found by a cluster chaos test. Other attribute errors are
    bugs and stay what they are."""
    return exc.obj is None and exc.name is not None  # an attribute looked up on None


#: Replies that are a cluster's redirection or refusal mid-failover, not the command's own.
_CLUSTER_REFUSALS: Final = (AskError, ClusterDownError, TryAgainError)


async def execute_keeping_refusals(pipe: Pipeline | ClusterPipeline) -> list[Any]:
    """Run a pipeline whose commands Redis may refuse one by one (a module's command, INFO on
    a managed Redis): each refusal stays in its place as the ``ResponseError``, and anything
    else raises, translated.

    A cluster pipeline answers a lost connection or a failover's refusal in place of each
    reply too, where a plain one raises: raised here alike, so a reader never unpacks one."""
    replies = await call(pipe.execute(raise_on_error=False))
    for reply in replies:
        if isinstance(reply, BaseException) and (
            not isinstance(reply, ResponseError) or isinstance(reply, _CLUSTER_REFUSALS)
        ):
            raise translate(reply) from reply
    return replies


#: What redis-py's cluster client says when it gave up on one command after its redirections
#: and refusals (``RedisClusterRequestTTL`` tries): the reply says nothing of why.
_REDIRECTIONS_EXHAUSTED: Final = "TTL exhausted"


def translate(exc: BaseException) -> FrontierUnavailable | FrontierLost:
    """The frontier's error for one redis-py (or socket) error; the caller raises it ``from``."""
    if isinstance(exc, ClusterError) and _REDIRECTIONS_EXHAUSTED in str(exc):
        # A slot half moved refuses every script of the job (TRYAGAIN: its keys are split
        # between two nodes) until the move ends, and redis-py's asyncio client (8.1) also
        # fails each ASK redirection while it holds several connections to the target (it
        # sends ASKING on one and the command on another): the caller waits and tries again.
        return FrontierUnavailable(
            "Redis unavailable: the cluster kept redirecting or refusing the job's slot"
            " (TRYAGAIN, ASK or MOVED: a slot moving between masters, or a failover under way)"
        )
    if not isinstance(exc, ResponseError):
        # some say nothing (MaxConnectionsError): their name does
        return FrontierUnavailable(f"Redis unavailable: {str(exc) or type(exc).__name__}")
    message = str(exc)
    if message.startswith(LOST_CODE):
        # Redis 7 appends " script: <sha>, on @user_script:<line>." to a script's error.
        reason = message.removeprefix(LOST_CODE).split(" script: ", 1)[0].strip()
        return FrontierLost(reason)
    if isinstance(exc, OutOfMemoryError):
        return FrontierFull(f"Redis is out of memory (maxmemory reached): {message}")
    return FrontierUnavailable(f"Redis refused a frontier operation: {message}")


async def close_quietly(client: RedisClient) -> None:
    """Close a client whose connections may already be broken; closing never raises."""
    try:
        await client.aclose()
    except (RedisError, OSError) as exc:
        log.debug("closing the Redis client failed: %s", exc)


async def check_epoch(client: RedisClient, keys: JobKeys, expected: str, found: str | None) -> None:
    """Raise FrontierLost unless ``found`` (the meta's epoch of the partition ``keys`` name,
    read in the caller's own round trip) is ``expected``; the reasons are lib.lua's, so both
    sides say the same (and name the partition as lib.lua does: ``job <ns>.<name>#k``)."""
    if found == expected:
        return
    if found is not None:
        why = f"the frontier was re-created (epoch {found}, this handle opened {expected})"
    elif int(await call(client.dbsize(**await job_node(client, keys.key("meta"))))) == 0:
        why = "Redis is empty (restarted without its data, or flushed)"
    else:
        why = "the job's meta key is missing (deleted or evicted) while Redis holds other keys"
    raise FrontierLost(f"job {keys.tag}: {why}")
