"""keys.py's helpers for code handed one key of a frontier."""

from __future__ import annotations

import pytest

from crawlfleet.frontier import JobKeys
from crawlfleet.frontier.keys import REPLICA_MARK, sibling_key


def test_a_sibling_shares_the_keys_hash_tag() -> None:
    keys = JobKeys("ns.job")
    assert sibling_key(keys.key("stats"), "meta") == keys.key("meta")
    assert sibling_key(keys.queue("a.test:8080", 2), REPLICA_MARK) == keys.key(REPLICA_MARK)
    # a partition's tag (part `partitions`: cf:{ns.job#3}:) is kept whole
    assert sibling_key("cf:{ns.job#3}:ready", "meta") == "cf:{ns.job#3}:meta"


@pytest.mark.parametrize("key", ["meta", "cf:ns.job:meta", "cf:{ns.job", "x:{ns.job}:meta"])
def test_a_key_that_is_no_frontiers_is_refused(key: str) -> None:
    with pytest.raises(ValueError, match="not a key of a crawlfleet frontier"):
        sibling_key(key, "meta")
