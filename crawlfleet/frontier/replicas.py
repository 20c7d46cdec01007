"""Durability before an ack: Redis ``WAIT`` for a page's links to reach a replica (DESIGN §7).

Redis replicates asynchronously: a master that dies right after it admitted a page's links
may take them with it, and if the page was acked meanwhile nothing will offer them again.
With ``frontier.waitReplicas`` the frontier waits, after each enqueue that admitted links
and so before the page's ack, until that many replicas have them.

``WAIT`` counts the writes of the connection it is sent on, and a pooled client may send it
on another connection than the enqueue's: so :func:`wait_for_replicas` writes a one-byte
marker to ``key`` on the connection it waits on, in one pipeline. Replication offsets are
one sequence per master, so once the marker written after the enqueue is on a replica, the
enqueue is too. ``key`` names the node: on a cluster it is any key of the partition that
received the links (the marker lives there, one small string).
"""

from __future__ import annotations

from typing import Final

from crawlfleet.frontier.connection import RedisClient, call, job_node

__all__ = ["WAIT_TIMEOUT_MS", "wait_for_replicas"]

#: How long an enqueue waits for its replicas before it fails as unavailable (and is retried).
WAIT_TIMEOUT_MS: Final = 5_000


async def wait_for_replicas(client: RedisClient, key: str, replicas: int, timeout_ms: int) -> int:
    """Wait (at most ``timeout_ms``) until ``replicas`` replicas of the node holding ``key``
    have every write made there so far; returns how many have (may be fewer after the
    timeout). Writes ``key`` (a marker) first, on the same connection."""
    if replicas <= 0:
        return 0
    node = await job_node(client, key)
    pipe = client.pipeline(transaction=False)
    pipe.set(key, "1")
    pipe.execute_command("WAIT", replicas, max(0, timeout_ms), **node)
    _, reached = await call(pipe.execute())
    return int(reached)
