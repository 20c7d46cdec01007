"""The embedded backend (``crawlfleet run``): a private redis-server, worker processes forked
from a zygote, and the steering tick applied to them.

Names are imported on first use: the zygote (``crawlfleet.local.zygote``) starts before
anything heavy is imported, and importing it must not import the runner.
"""

from typing import TYPE_CHECKING

from crawlfleet._exports import lazy_exports

if TYPE_CHECKING:
    from crawlfleet.local.processes import LocalProcessBackend
    from crawlfleet.local.redis_server import RedisServer
    from crawlfleet.local.runner import RunOptions, run_local
    from crawlfleet.local.zygote import Zygote

__all__ = ["LocalProcessBackend", "RedisServer", "RunOptions", "Zygote", "run_local"]

__getattr__ = lazy_exports(
    __name__,
    {
        "LocalProcessBackend": "crawlfleet.local.processes",
        "RedisServer": "crawlfleet.local.redis_server",
        "RunOptions": "crawlfleet.local.runner",
        "Zygote": "crawlfleet.local.zygote",
        "run_local": "crawlfleet.local.runner",
    },
)
