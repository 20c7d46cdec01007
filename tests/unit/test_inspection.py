"""The words and columns of ``crawlfleet frontier`` (crawlfleet/inspection.py): pure."""

from __future__ import annotations

from dataclasses import replace

from crawlfleet.frontier import DeadLetter
from crawlfleet.frontier.introspection import DomainCounts, HostCounts, HostRow, UrlStory
from crawlfleet.inspection import (
    dead_letter_lines,
    domain_count_lines,
    host_lines,
    story_lines,
)

NOW = 1_800_000_000_000

ROW = HostRow(
    host="a.test",
    partition=2,
    counts=HostCounts(queued=17, crawled=3, dead=1, admitted=21),
    in_flight=1,
    delay_ms=1500,
    last_fetch_ms=NOW - 500,
    next_allowed_ms=NOW + 1000,
    robots_wait=None,
)

STORY = UrlStory(
    url="http://a.test/x",
    host="a.test",
    partition=2,
    seen=True,
    queued_depth=None,
    queued_position=None,
    leased_by=None,
    lease_expires_ms=None,
    lease_fetched=False,
    retry_at_ms=None,
    attempts=None,
    dead=None,
    scans_cut=(),
    now_ms=NOW,
)


def test_host_rows_say_when_and_why_not() -> None:
    rows = [
        ROW,
        replace(ROW, host="b.test", next_allowed_ms=NOW - 1, counts=HostCounts(queued=2)),
        replace(ROW, host="c.test", next_allowed_ms=None, robots_wait="503"),
        replace(ROW, host="d.test", next_allowed_ms=None, counts=HostCounts(queued=4)),
        replace(ROW, host="e.test", next_allowed_ms=None, counts=HostCounts()),
    ]
    lines = host_lines(rows, NOW)
    assert lines[0].split() == [
        "HOST", "PART", "QUEUED", "IN-FLIGHT", "CRAWLED", "DEAD", "ADMITTED", "DELAY", "NEXT",
        "ROBOTS",
    ]  # fmt: skip
    cells = [line.split() for line in lines[1:]]
    assert cells[0] == ["a.test", "2", "17", "1", "3", "1", "21", "1.5s", "in", "1.0s", "ok"]
    assert cells[1][8] == "now"
    assert cells[2][8:] == ["robots.txt", "waiting", "(503)"]
    assert cells[3][8:10] == ["slots", "full"]  # queued, not ready: its slots are in use
    assert cells[4][8] == "-"  # nothing queued
    # columns line up: every row as wide as the header's columns
    assert len({line.index("1.5s") for line in lines[1:2]}) == 1
    assert host_lines([], NOW) == ["no host has any (nothing counted yet)"]


def test_a_story_names_its_state_and_its_output() -> None:
    queued = replace(STORY, queued_depth=2, queued_position=40, attempts=0)
    assert "queued at depth 2, 40 entries from the head" in "\n".join(story_lines(queued, None))
    leased = replace(STORY, leased_by="w-1", lease_expires_ms=NOW + 30_000, lease_fetched=True)
    text = "\n".join(story_lines(leased, []))
    assert "leased by w-1 (response in, output not durable yet)" in text
    assert "(in 30.0s)" in text
    assert "output     none yet" in text
    dead = replace(STORY, dead={"failure_class": "http_404", "message": "404", "attempts": 1})
    text = "\n".join(story_lines(dead, []))
    assert "dead-lettered: http_404: 404" in text
    assert "attempts   1" in text
    done = story_lines(STORY, [("pages/w-1-0001.jsonl", {"status": 200, "fetched_at": 1.8e9})])
    assert done[3].startswith("  state      done")
    assert done[-1].startswith("  output     pages/w-1-0001.jsonl: status 200, 2027-01-15T")
    dropped = "\n".join(story_lines(STORY, []))
    assert "dropped before output" in dropped
    cut = "\n".join(story_lines(replace(STORY, scans_cut=("delayed",)), None))
    assert "bounded scans stopped early (delayed)" in cut
    unseen = story_lines(replace(STORY, seen=False), None)
    assert unseen[2] == "  seen       no (never admitted: not linked, or out of scope)"
    assert unseen[3] == "  state      unknown to the frontier"


def test_dead_letters_are_counted_by_class() -> None:
    letters = [
        DeadLetter(f"http://a.test/{k}", cls, "m", 1, 1, "", 0.0)
        for k, cls in enumerate(["http_404", "http_404", "robots"])
    ]
    lines = dead_letter_lines(letters, total=5)
    assert lines[0] == "5 dead letter(s), 3 shown: http_404 2, robots 1"
    assert lines[1] == "http://a.test/0  http_404  attempts 1  m"
    assert dead_letter_lines([], total=0) == ["0 dead letter(s)"]


def test_a_domains_count_names_its_hosts_and_says_when_the_scan_was_cut() -> None:
    from crawlfleet.frontier.introspection import HostCounts

    found = DomainCounts(
        "forum.co.uk", HostCounts(10, 5, 1, 16), ("a.forum.co.uk", "b.forum.co.uk")
    )
    assert domain_count_lines(found) == [
        "forum.co.uk: 2 host(s), queued 10, crawled 5, dead 1, admitted 16"
    ]
    cut = DomainCounts("forum.co.uk", HostCounts(), (), cut=True)
    assert "figures are a floor" in domain_count_lines(cut)[1]
