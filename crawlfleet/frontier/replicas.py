"""Wait until a frontier's writes are on its replicas (``WAIT``), before what depends on them.

Redis replicates asynchronously: a master that acknowledged a write may die before any
replica has it, and the failover then forgets the write. A worker that enqueued a page's
links and then acked the page would lose those links for good: no page is left to find them
again. So, when a job asks for it (``frontier.waitReplicas``), the partitions that received
a page's links are waited on (:func:`wait_for_replicas`) between the enqueue and the page's
ack; only once enough replicas confirmed is the page acked.

WAIT counts the replicas that have the last write *of its own connection*. A pooled client
sends the enqueue on one connection and may send WAIT on another, which has written nothing:
WAIT then answers at once with every replica, whatever they hold. So WAIT goes in one
pipeline after a small write of its own on the same node (lua/replica_mark.lua): a replica
applies the node's stream in order, so one that confirms that write has every write the node
made before it, the enqueue's included. On a Redis Cluster the pipeline goes to the master
that owns the key's slot and WAIT counts that master's replicas; on one Redis, the server's.
"""

from __future__ import annotations

import logging
from functools import cache
from importlib.resources import files

from crawlfleet.errors import FrontierLost, FrontierUnavailable, NotReplicated
from crawlfleet.frontier.connection import RedisClient, call, job_node
from crawlfleet.frontier.keys import REPLICA_MARK, sibling_key

__all__ = ["wait_for_replicas"]

log = logging.getLogger(__name__)


@cache
def _mark_source() -> str:
    """lua/replica_mark.lua, read once. Sent with EVAL (a few hundred bytes): a cluster
    pipeline cannot reload a script that a node answers NOSCRIPT for."""
    return files("crawlfleet.frontier").joinpath("lua", "replica_mark.lua").read_text()


async def wait_for_replicas(client: RedisClient, key: str, replicas: int, timeout_ms: int) -> int:
    """Wait until ``replicas`` replicas of the node that holds ``key`` (any key of a job or
    of one of its partitions) have every write that node made so far; return how many did.

    Raises :class:`NotReplicated` (a :class:`FrontierUnavailable`: wait and try again, and
    do not ack what depends on the writes) when fewer confirmed within ``timeout_ms``,
    :class:`FrontierLost` when the frontier's meta key is gone from the node, and
    :class:`FrontierUnavailable` when the node cannot be reached. ``timeout_ms`` must be
    shorter than the client's socket timeout, or the wait is cut as unavailable.
    """
    if replicas < 1:
        raise ValueError(f"replicas must be at least 1 (got {replicas}): WAIT 0 waits for none")
    if timeout_ms < 1:
        raise ValueError(f"timeout_ms must be at least 1 (got {timeout_ms}): WAIT 0 never ends")
    meta = sibling_key(key, "meta")
    node = await job_node(client, key)
    pipe = client.pipeline(transaction=False)
    pipe.eval(_mark_source(), 2, meta, sibling_key(key, REPLICA_MARK))
    pipe.execute_command("WAIT", replicas, timeout_ms, **node)
    marked, acknowledged = await call(pipe.execute())
    if int(marked) == 0:
        raise FrontierLost(
            f"{meta} is missing on the Redis that holds it: the frontier is gone "
            "(its node lost its data, or the job was deleted); nothing to wait for"
        )
    if int(acknowledged) < replicas:
        raise NotReplicated(
            f"only {acknowledged} of {replicas} replica(s) of the Redis holding "
            f"{sibling_key(key, '')} confirmed its writes within {timeout_ms} ms"
            f"{await _connected_replicas(client, key)}; they are on the master only, so what "
            "depends on them (a page's ack) waits",
            wanted=replicas,
            acknowledged=int(acknowledged),
        )
    return int(acknowledged)


async def _connected_replicas(client: RedisClient, key: str) -> str:
    """`` (it has N connected)``, for the NotReplicated sentence: a count below the one asked
    says the wait can never pass (a job asking for replicas of a Redis that has none)."""
    try:
        info = await call(client.info("replication", **await job_node(client, key)))
    except FrontierUnavailable as exc:
        log.debug("reading the replica count for the message failed: %s", exc)
        return ""
    return f" (it has {info.get('connected_slaves', 0)} connected)"
