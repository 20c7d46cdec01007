"""The frontier's Lua scripts, loaded once per client.

Each script is a package-data file under ``lua/`` whose header documents its KEYS, ARGV and
return codes; ``lib.lua`` (shared helpers) is prepended to each, since Lua has no include.
redis-py's Script objects run them with EVALSHA and reload them on NOSCRIPT.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib.resources import files

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript

__all__ = ["SCRIPT_NAMES", "Scripts", "script_source"]

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
    "pace",
    "robots_store",
)


@cache
def script_source(name: str) -> str:
    """The full source of one script: lib.lua followed by the script itself."""
    lua = files("crawlfleet.frontier").joinpath("lua")
    return lua.joinpath("lib.lua").read_text() + "\n" + lua.joinpath(f"{name}.lua").read_text()


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
    pace: AsyncScript
    robots_store: AsyncScript

    @classmethod
    def register(cls, client: aioredis.Redis) -> Scripts:
        return cls(**{name: client.register_script(script_source(name)) for name in SCRIPT_NAMES})
