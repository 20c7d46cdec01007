"""Bad input gets a clear error and leaves nothing half-written in Redis."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from crawlfleet.errors import ConfigError, InvalidURL
from crawlfleet.frontier import (
    JobKeys,
    Link,
    canonicalize,
    try_canonicalize,
)
from tests.integration.frontier.conftest import OpenFrontier
from tests.support.specs import frontier_settings


async def job_keys(client: aioredis.Redis, job_id: str) -> dict[str, str]:
    """Every key of the job with a fingerprint of its value."""
    found = {}
    async for key in client.scan_iter(match=JobKeys(job_id).pattern):
        found[key] = str(await client.dump(key))
    return found


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"dedup": {"capacity": 0}}, "dedup.capacity"),
        ({"dedup": {"capacity": 10**13}}, "dedup.capacity"),
        ({"dedup": {"errorRate": 0.0}}, "dedup.errorRate"),
        ({"dedup": {"errorRate": 0.9}}, "dedup.errorRate"),
        ({"concurrency": {"perHost": 0}}, "concurrency.perHost"),
        ({"concurrency": {"hostDelaySeconds": -1.0}}, "concurrency.hostDelaySeconds"),
        ({"lease": {"ttlSeconds": 0.0}}, "lease.ttlSeconds"),
        ({"retry": {"taskAttempts": 0}}, "retry.taskAttempts"),
    ],
)
def test_absurd_settings_never_reach_the_frontier(
    changes: dict[str, dict[str, object]], field: str
) -> None:
    """FrontierSettings have no checks of their own: the model refuses the value, naming its
    field, so no settings object (and no write to Redis) can carry it."""
    with pytest.raises(ConfigError, match=r"spec\." + field.replace(".", r"\.")):
        frontier_settings("test.absurd", changes)


@pytest.mark.parametrize(
    "bad",
    ["ftp://a.com/x", "javascript:alert(1)", "not a url", "http://a.com/with space", "", "/rel"],
)
async def test_bad_url_in_a_batch_writes_nothing(
    open_frontier: OpenFrontier, redis_client: aioredis.Redis, job_id: str, bad: str
) -> None:
    frontier = await open_frontier()
    await frontier.seed(["http://a.com/"])
    before = await job_keys(redis_client, job_id)
    good = [Link(canonicalize(f"http://a.com/{i}"), 1, "") for i in range(3)]
    with pytest.raises(InvalidURL):
        await frontier.enqueue([*good, Link(bad, 1, "")])  # type: ignore[arg-type]
    with pytest.raises(InvalidURL):
        await frontier.add_if_new(["http://a.com/ok", bad])
    if try_canonicalize(bad) is None:  # seeds are canonicalised first; a space is fixable
        with pytest.raises(InvalidURL):
            await frontier.seed(["http://b.com/", bad])
    assert await job_keys(redis_client, job_id) == before


async def test_negative_depth_and_bad_worker_refused(open_frontier: OpenFrontier) -> None:
    frontier = await open_frontier()
    with pytest.raises(InvalidURL):
        await frontier.enqueue([Link(canonicalize("http://a.com/"), -1, "")])
    with pytest.raises(ValueError, match="worker id"):
        await frontier.claim("bad\tid", 1)
    with pytest.raises(InvalidURL, match="at least one seed"):
        await frontier.seed([])
