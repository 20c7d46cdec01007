"""The pure parts of a partitioned frontier: key names, host routing, the claim's split,
lease tokens' hosts and the stats' combination."""

from __future__ import annotations

import pytest

from crawlfleet.errors import ConfigError
from crawlfleet.frontier import Backpressure, FrontierStats, FrontierWaits, JobKeys, PressureLevel
from crawlfleet.frontier.keys import MAX_PARTITIONS, partition_of, validate_job_id
from crawlfleet.frontier.partitions import combine_stats, lease_host, split_claim


def test_partition_zero_is_the_jobs_keys_of_one_partition() -> None:
    home = JobKeys("ns.crawl")
    assert home == JobKeys("ns.crawl", partition=0)
    assert home.prefix == "cf:{ns.crawl}:"
    assert home.key("meta") == "cf:{ns.crawl}:meta"
    assert home.queue("a.test", 2) == "cf:{ns.crawl}:q:2:a.test"


def test_a_partition_has_its_own_tag_that_no_job_name_can_spell() -> None:
    keys = JobKeys("ns.crawl", partition=3)
    assert keys.prefix == "cf:{ns.crawl#3}:"
    assert keys.script_keys()[0] == "cf:{ns.crawl#3}:meta"
    assert keys.queue("a.test", 0) == "cf:{ns.crawl#3}:q:0:a.test"
    assert keys.file_slots("a.test") == "cf:{ns.crawl#3}:files:slots:a.test"
    assert keys.pattern == "cf:\\{ns.crawl#3\\}:*"
    assert keys.job_id == "ns.crawl"
    with pytest.raises(ConfigError):
        validate_job_id("ns.crawl#3")  # the job id itself never holds one
    for bad in (-1, MAX_PARTITIONS):
        with pytest.raises(ConfigError):
            JobKeys("ns.crawl", partition=bad)


def test_partition_of_is_stable_and_spreads_similar_hosts() -> None:
    assert partition_of("anything.test", 1) == 0
    assert partition_of("anything.test", 0) == 0
    counts = [0] * 8
    for i in range(800):
        counts[partition_of(f"host{i}.example.com", 8)] += 1
    assert min(counts) > 70  # about 100 each; plain crc32 % 8 left 4 of 8 empty for h<i>.test
    assert {partition_of(f"h{i}.test", 8) for i in range(24)} == set(range(8))


def test_partition_of_values_do_not_change_between_versions() -> None:
    """Pinned: a changed formula would send a running job's hosts to other partitions."""
    assert [partition_of(h, 8) for h in ("a.test", "b.test", "www.example.com")] == [3, 5, 7]
    assert [partition_of(f"h{i}.test", 8) for i in range(6)] == [6, 1, 1, 2, 0, 2]
    assert partition_of("www.example.com", 256) == 255


def test_a_claim_is_split_evenly_from_a_rotating_start() -> None:
    assert split_claim(16, 0, [True] * 8) == [2] * 8
    assert split_claim(10, 0, [True] * 4) == [3, 3, 2, 2]
    assert split_claim(10, 2, [True] * 4) == [2, 2, 3, 3]
    assert split_claim(3, 5, [True] * 8) == [0, 0, 0, 0, 0, 1, 1, 1]
    assert split_claim(0, 0, [True] * 4) == [0, 0, 0, 0]
    # a count smaller than the partitions goes round as the start rotates
    asked = [0] * 8
    for start in range(8):
        for p, share in enumerate(split_claim(1, start, [True] * 8)):
            asked[p] += share
    assert asked == [1] * 8


def test_a_claim_favours_partitions_that_had_work_and_probes_the_rest() -> None:
    hungry = [True, False, False, False, False, False, False, False]
    shares = split_claim(16, 0, hungry)
    assert sum(shares) == 16
    assert shares[0] == 12  # at most a quarter probes
    assert shares[1:].count(1) == 4
    # the probes rotate over the dry partitions
    probed = set()
    for start in range(8):
        shares = split_claim(16, start, hungry)
        probed |= {p for p in range(1, 8) if shares[p]}
    assert probed == set(range(1, 8))
    # one lease: the hungry partition gets it, not a probe
    assert split_claim(1, 3, hungry) == [1, 0, 0, 0, 0, 0, 0, 0]
    # nobody hungry (an idle crawl): spread over all
    assert split_claim(8, 0, [False] * 8) == [1] * 8
    # ... but the silent ones (their node down), which are probed only
    assert split_claim(1, 1, [False] * 4, silent={1}) == [0, 0, 1, 0]
    assert split_claim(8, 0, [False] * 4, silent={0, 1}) == [1, 1, 3, 3]
    assert split_claim(2, 0, [False] * 2, silent={0, 1}) == [1, 1]  # all silent: all asked


def test_a_lease_token_names_its_host() -> None:
    token = "17\tworker-a\t@1700000000000\t0\t2\thttp://a.test:8080/x?y\thttp://b.test/"
    assert lease_host(token) == "a.test:8080"
    old = "17\tworker-a\t1\t0\thttps://c.test/p\t"  # layout 4: no fetch deadline
    assert lease_host(old) == "c.test"
    assert lease_host("garbage") == ""


def test_stats_of_partitions_are_summed_and_the_home_keeps_the_jobs_own() -> None:
    home = FrontierStats(
        queued=3,
        crawled=5,
        seen=10,
        seeded=True,
        output_finished=True,
        bloom_fill_ratio=0.2,
        bloom_false_positive_rate=0.001,
        bloom_capacity=100,
        pressure=Backpressure(PressureLevel.HIGH, 10, 5.0),
        next_retry_in_seconds=None,
        waits=FrontierWaits(robots_hosts=1, robots_next_try_in_seconds=9.0, robots_status=503),
    )
    other = FrontierStats(
        queued=4,
        crawled=1,
        seen=6,
        seeded=False,
        bloom_fill_ratio=0.4,
        bloom_false_positive_rate=0.003,
        bloom_capacity=100,
        bloom_layers=2,
        pressure=Backpressure(PressureLevel.HIGH, 10, 5.0),
        next_retry_in_seconds=2.0,
        waits=FrontierWaits(
            robots_hosts=2, robots_next_try_in_seconds=3.0, robots_status=None, ready_hosts=4
        ),
    )
    job = combine_stats([home, other])
    assert (job.queued, job.crawled, job.seen) == (7, 6, 16)
    assert job.seeded
    assert job.output_finished
    assert job.bloom_fill_ratio == pytest.approx(0.3)
    assert job.bloom_false_positive_rate == pytest.approx(0.002)
    assert job.bloom_capacity == 200
    assert job.bloom_layers == 2
    assert job.pressure == Backpressure(PressureLevel.HIGH, 10, 10.0)
    assert job.next_retry_in_seconds == 2.0
    assert job.waits.robots_hosts == 3
    assert job.waits.robots_next_try_in_seconds == 3.0
    assert job.waits.robots_status is None  # the first wait's status (none: no answer)
    assert job.waits.ready_hosts == 4
