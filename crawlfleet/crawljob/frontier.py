"""``spec.frontier``: how the job's frontier is laid out in Redis, past one Redis (DESIGN.md §7).

A job's frontier is split into ``shards`` partitions by host (a mixed CRC-32 of the host,
modulo ``shards``: ``partition_of`` in crawlfleet/frontier/keys.py): a host's queue,
politeness, leases and the dedup bits of its URLs live in one partition, each behind its own
hash tag, so a Redis Cluster spreads the partitions over its nodes while every script still
touches one slot. Partitions are logical and may outnumber the nodes. ``shards:
1`` is the layout of every job before partitions existed.

The number is fixed once the job's frontier exists: a host's keys are where its hash put
them, and a new count would look for them elsewhere. The API server refuses the change (a
transition rule, crawlfleet/operator/crd.py), and the operator refuses it too when a client
got past that (``InvalidSpec``: the status remembers what the frontier was created with).

Not yet partitioned, so refused beside ``shards > 1`` (crawlfleet/crawljob/spec.py): a
schedule (its runs' state is carried in one partition), recrawl rules (revisits are kept per
job), a page budget (``scope.maxPages``: each partition counts its own admissions) and a
Scrapy spider (its scheduler claims from one partition).
"""

from __future__ import annotations

from typing import Annotated, Final

from crawlfleet.crawljob.base import Range, Section

__all__ = ["MAX_SHARDS", "MAX_WAIT_REPLICAS", "SHARDS_CANNOT_CHANGE", "FrontierSpec"]

#: Partitions of one job at most: each costs the fleet a few keys read per tick and one
#: pipelined round trip per claim batch and node, so past a few hundred the job's own
#: bookkeeping, not Redis, is what grows.
MAX_SHARDS: Final = 256
#: Replicas an ack may wait for: Redis Cluster operators run one or two per master.
MAX_WAIT_REPLICAS: Final = 5
#: Why shards is fixed: the API server's words (a transition rule) and the operator's.
SHARDS_CANNOT_CHANGE: Final = (
    "shards cannot change on a running job: each host's queue, leases and seen URLs live in"
    " the partition its hash chose when the job was created (delete the job, and its frontier"
    " with it, to start over with another count)"
)


class FrontierSpec(Section):
    """The frontier's layout: how many partitions, and how durable a page's links must be."""

    shards: Annotated[int, Range(ge=1, le=MAX_SHARDS)] = 1
    """Partitions of the job's frontier, by host: each has its own hash tag, so a Redis
    Cluster spreads them over its nodes (give at least as many as the cluster has masters).
    1 keeps the whole frontier in one slot. Fixed once the job exists. Not yet with schedule,
    recrawl, scope.maxPages or crawler.scrapy."""
    wait_replicas: Annotated[int, Range(ge=0, le=MAX_WAIT_REPLICAS)] = 0
    """Replicas that must acknowledge a partition's new links (Redis WAIT) before the page
    they were found on is acked, so a failover cannot lose links whose parent counts as
    crawled. 0: no wait, for a Redis without replicas (a wait for one that does not exist
    would time out on every page). Set 1 on a Redis Cluster whose masters have replicas."""
