"""The frontier's slot accounting, read whole: per-host in-flight counts against the leases that
exist (DESIGN §4: "after any state change the per-host in-flight counts equal the leases that
really exist").

A host's count in the frontier (the first field of its entry in the ``hosts`` hash) must equal
its leases still fetching (plain lease tokens; a token starting with ``f`` has its response in
and gave its slot back) plus the slots held for dead workers' unfinished fetches (the ``held``
set). Read in one MULTI/EXEC, so no script runs between the reads.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import redis

from crawlfleet.frontier import JobKeys
from crawlfleet.urls import host_of

__all__ = ["SlotAccount", "read_slots"]


@dataclass(frozen=True)
class SlotAccount:
    """What the frontier counts per host, and what it should count."""

    counted: Counter[str]
    fetching: Counter[str]
    held: Counter[str]

    @property
    def wrong(self) -> dict[str, tuple[int, int, int]]:
        """Hosts whose count is off: host -> (counted, fetching leases, held slots)."""
        hosts = set(self.counted) | set(self.fetching) | set(self.held)
        return {
            host: (self.counted[host], self.fetching[host], self.held[host])
            for host in hosts
            if self.counted[host] != self.fetching[host] + self.held[host]
        }


def read_slots(client: redis.Redis, job_id: str) -> SlotAccount:
    keys = JobKeys(job_id)
    pipe = client.pipeline(transaction=True)
    pipe.hgetall(keys.key("hosts"))
    pipe.zrange(keys.key("leases"), 0, -1)
    pipe.zrange(keys.key("held"), 0, -1)
    hosts, leases, held = pipe.execute()
    counted: Counter[str] = Counter()
    for host, state in hosts.items():
        inflight = int(state.decode().split(":", 1)[0])
        if inflight:
            counted[host.decode()] = inflight
    fetching: Counter[str] = Counter()
    for token in leases:
        text = token.decode()
        if text.startswith("f"):
            continue  # its response arrived: its slot went back
        # "<number>\t<owner>\t@<deadline ms>\t<attempts>\t<depth>\t<url>\t<parent>"
        fields = text.split("\t", 6)
        url = fields[5] if fields[2].startswith("@") else fields[4]
        fetching[host_of(url)] += 1
    held_slots = Counter(member.decode().rsplit("\t", 1)[0] for member in held)
    return SlotAccount(counted, fetching, held_slots)
