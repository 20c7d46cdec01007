"""The frontier's Lua scripts, loaded once per client.

Each script is a package-data file under ``lua/`` whose header documents its KEYS, ARGV and
return codes; ``lib.lua`` (shared helpers) is prepended to each, since Lua has no include.
They run with EVALSHA, and on NOSCRIPT with EVAL on the node of their keys, which caches
them there (:class:`KeyedScript`; redis-py's own Script loads the script on every master of a
cluster, which fails while one of them is down, and a replica a failover promoted starts
with none).

On Redis 7 and later each script declares its flags in a shebang line (``#!lua flags=…``):
Redis then decides before a script starts whether it may run past ``maxmemory``. The scripts
that finish or give back work (ack, fail, release, requeue, and claim, extend, heartbeat,
pace, set_host_delay, defer_host, set_pressure, guarded, promote, begin_run, and the file
downloads' file_slot, file_slots_extend, file_bytes, claim_content, count_files, which
overwrite or move what exists, or write a few small values on the way to an ack) are
``allow-oom``:
a full Redis under ``noeviction`` must still let a crawl shrink its queues, and the fleet
must still be able to turn backpressure on. ``contains`` is ``no-writes``. The rest (init,
enqueue, add_if_new, robots_lock, robots_store, commit_run: a copy of the filter) may grow
memory without bound, so Redis refuses them whole, before their first write, when it is
past ``maxmemory``.

Claims, acks, fails, releases and requeues apply at most once per call (``ONCE_SCRIPTS``), and
so do the file downloads' budget, content index and counters (file_bytes, claim_content,
count_files: a reservation or a count applied twice would stay wrong for the whole run):
redis-py re-sends a command after a connection error, and a script that ran before the
connection broke would otherwise run again (a second claim, whose leases nobody knows of).

Redis 6 knows no shebang; there the scripts run bare, and Redis checks memory at a script's
first write instead: a removal passes, a write that may grow memory is refused. The
scripts that must pass start with a removal where they can (ack, fail, release, requeue
remove the lease first; claim pops before it counts); heartbeat and extend cannot, nor can
the file scripts (a slot, a reservation, an index entry or a counter is their first write), so
on Redis 6 only backpressure keeps them from being refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import Any, Final

from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError
from redis.typing import EncodableT, KeyT

from crawlfleet.frontier.connection import RedisClient

__all__ = [
    "ONCE_SCRIPTS",
    "SCRIPT_FLAGS",
    "SCRIPT_NAMES",
    "KeyedScript",
    "Scripts",
    "script_source",
]

SCRIPT_NAMES = (
    "init",
    "enqueue",
    "add_if_new",
    "contains",
    "claim",
    "ack",
    "fail",
    "extend",
    "release",
    "requeue",
    "heartbeat",
    "set_host_delay",
    "defer_host",
    "pace",
    "robots_lock",
    "robots_store",
    "set_pressure",
    "guarded",
    "promote",
    "begin_run",
    "commit_run",
    "file_slot",
    "file_slots_extend",
    "file_bytes",
    "claim_content",
    "count_files",
)

#: Each script's Redis 7 flags ('' for none: refused whole past maxmemory).
SCRIPT_FLAGS: Final[dict[str, str]] = {
    "init": "",
    "enqueue": "",
    "add_if_new": "",
    "contains": "no-writes",
    "claim": "allow-oom",
    "ack": "allow-oom",
    "fail": "allow-oom",
    "extend": "allow-oom",
    "release": "allow-oom",
    "requeue": "allow-oom",
    "heartbeat": "allow-oom",
    "set_host_delay": "allow-oom",
    "defer_host": "allow-oom",
    "pace": "allow-oom",
    "robots_lock": "",
    "robots_store": "",
    "set_pressure": "allow-oom",
    "guarded": "allow-oom",
    "promote": "allow-oom",
    "begin_run": "allow-oom",
    "commit_run": "",
    "file_slot": "allow-oom",
    "file_slots_extend": "allow-oom",
    "file_bytes": "allow-oom",
    "claim_content": "allow-oom",
    "count_files": "allow-oom",
}


#: The state changes a client's retry must not apply twice: each runs inside lib.lua's
#: ``once()``, keyed by the call id the caller sends after the epoch (frontier.py).
ONCE_SCRIPTS: Final = frozenset(
    {"claim", "ack", "fail", "release", "requeue", "file_bytes", "claim_content", "count_files"}
)


@cache
def script_source(name: str, *, flagged: bool = True) -> str:
    """The full source of one script: its shebang (``flagged``), lib.lua, then the script
    (as the body of a function that ``once()`` runs, for :data:`ONCE_SCRIPTS`)."""
    lua = files("crawlfleet.frontier").joinpath("lua")
    script = lua.joinpath(f"{name}.lua").read_text()
    if name in ONCE_SCRIPTS:
        script = f"local function apply()\n{script}\nend\nreturn once(apply)\n"
    body = lua.joinpath("lib.lua").read_text() + "\n" + script
    if not flagged:
        return body
    flags = SCRIPT_FLAGS[name]
    return (f"#!lua flags={flags}\n" if flags else "#!lua\n") + body


@dataclass(frozen=True, slots=True)
class Scripts:
    """Registered scripts of one client; attribute per script."""

    init: AsyncScript
    enqueue: AsyncScript
    add_if_new: AsyncScript
    contains: AsyncScript
    claim: AsyncScript
    ack: AsyncScript
    fail: AsyncScript
    extend: AsyncScript
    release: AsyncScript
    requeue: AsyncScript
    heartbeat: AsyncScript
    set_host_delay: AsyncScript
    defer_host: AsyncScript
    pace: AsyncScript
    robots_lock: AsyncScript
    robots_store: AsyncScript
    set_pressure: AsyncScript
    guarded: AsyncScript
    promote: AsyncScript
    begin_run: AsyncScript
    commit_run: AsyncScript
    file_slot: AsyncScript
    file_slots_extend: AsyncScript
    file_bytes: AsyncScript
    claim_content: AsyncScript
    count_files: AsyncScript

    @classmethod
    def register(cls, client: RedisClient, *, flagged: bool = True) -> Scripts:
        """The scripts for ``client``; ``flagged`` False for a Redis without script flags."""
        return cls(
            **{
                name: KeyedScript(client, script_source(name, flagged=flagged))
                for name in SCRIPT_NAMES
            }
        )


class KeyedScript(AsyncScript):
    """A script run where its keys are: EVALSHA, and EVAL on NOSCRIPT (module docstring).
    Never queued on a pipeline (the frontier runs each script on its own)."""

    async def __call__(
        self,
        keys: Sequence[KeyT] | None = None,
        args: Iterable[EncodableT] | None = None,
        client: Any = None,
    ) -> Any:
        client = self.registered_client if client is None else client
        keys = list(keys or ())
        args = list(args or ())
        try:
            return await client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            return await client.eval(self.script, len(keys), *keys, *args)
