"""``spec.schedule``: cron syntax, time zones and daylight saving, as ``next_run`` reads them.

The bad inputs (each refused with its field) are cases of the bad-spec corpus:
tests/bad_specs/schedule-*.yaml.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from crawlfleet.crawljob import CrawlJobSpec, ScheduleSpec
from crawlfleet.errors import ConfigError

SEED = "https://news.example/"
BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")


def runs(schedule: ScheduleSpec, after: datetime, count: int) -> list[datetime]:
    found = []
    for _ in range(count):
        after = schedule.next_run(after)
        found.append(after)
    return found


def at(text: str, zone: ZoneInfo | None = None) -> datetime:
    moment = datetime.fromisoformat(text)
    return moment.replace(tzinfo=zone or UTC)


def test_steps_every_quarter_hour_strictly_after() -> None:
    schedule = ScheduleSpec(cron="*/15 * * * *")
    assert runs(schedule, at("2026-12-02T08:00:00"), 3) == [
        at("2026-12-02T08:15:00"),
        at("2026-12-02T08:30:00"),
        at("2026-12-02T08:45:00"),
    ]
    assert schedule.next_run(at("2026-12-02T08:14:59.9")) == at("2026-12-02T08:15:00")


def test_ranges_lists_and_names() -> None:
    weekday_mornings = ScheduleSpec(cron="30 6,18 * * MON-FRI")
    # 2026-12-04 is a Friday: its evening, then Monday morning
    assert runs(weekday_mornings, at("2026-12-04T12:00:00"), 2) == [
        at("2026-12-04T18:30:00"),
        at("2026-12-07T06:30:00"),
    ]
    january_firsts = ScheduleSpec(cron="0 0 1-2 JAN *")
    assert runs(january_firsts, at("2026-12-02T00:00:00"), 3) == [
        at("2027-01-01T00:00:00"),
        at("2027-01-02T00:00:00"),
        at("2028-01-01T00:00:00"),
    ]
    stepped_range = ScheduleSpec(cron="0 8-18/5 * * *")
    assert runs(stepped_range, at("2026-12-02T00:00:00"), 4) == [
        at("2026-12-02T08:00:00"),
        at("2026-12-02T13:00:00"),
        at("2026-12-02T18:00:00"),
        at("2026-12-03T08:00:00"),
    ]


@pytest.mark.parametrize(
    ("macro", "expected"),
    [
        ("@hourly", "2026-12-02T09:00:00"),
        ("@daily", "2026-12-03T00:00:00"),
        ("@midnight", "2026-12-03T00:00:00"),
        ("@weekly", "2026-12-06T00:00:00"),  # a Sunday
        ("@monthly", "2027-01-01T00:00:00"),
        ("@yearly", "2027-01-01T00:00:00"),
        ("@annually", "2027-01-01T00:00:00"),
    ],
)
def test_kubernetes_macros(macro: str, expected: str) -> None:
    assert ScheduleSpec(cron=macro).next_run(at("2026-12-02T08:10:00")) == at(expected)


def test_times_are_in_the_time_zone_and_returned_in_utc() -> None:
    schedule = ScheduleSpec(cron="0 9 * * *", time_zone="Europe/Berlin")
    found = schedule.next_run(at("2026-12-02T07:00:00"))
    assert found == at("2026-12-02T08:00:00")  # 09:00 in Berlin, winter time (UTC+1)
    assert found.tzinfo is UTC
    # the same instant given in another zone gives the same answer
    assert schedule.next_run(at("2026-12-02T02:00:00", NEW_YORK)) == found


def test_a_time_skipped_by_spring_forward_runs_when_the_clock_resumes() -> None:
    # Berlin, 2026-03-29: clocks jump from 02:00 to 03:00 (UTC+1 to UTC+2). Debian's cron
    # runs a 02:30 job at 03:00 local that night, once.
    schedule = ScheduleSpec(cron="30 2 * * *", time_zone="Europe/Berlin")
    night = runs(schedule, at("2026-03-28T12:00:00", BERLIN), 3)
    assert [moment.astimezone(BERLIN).isoformat() for moment in night] == [
        "2026-03-29T03:00:00+02:00",
        "2026-03-30T02:30:00+02:00",
        "2026-03-31T02:30:00+02:00",
    ]


def test_a_time_repeated_by_fall_back_runs_once() -> None:
    # New York, 2026-11-01: 01:00-02:00 happens twice. A 01:30 job runs once.
    schedule = ScheduleSpec(cron="30 1 * * *", time_zone="America/New_York")
    found = runs(schedule, at("2026-10-31T12:00:00", NEW_YORK), 2)
    assert found[1] - found[0] == timedelta(hours=25)  # the day is 25 hours long
    assert [moment.astimezone(NEW_YORK).strftime("%d %H:%M") for moment in found] == [
        "01 01:30",
        "02 01:30",
    ]


def test_an_hourly_schedule_keeps_every_real_hour_across_a_change() -> None:
    schedule = ScheduleSpec(cron="0 * * * *", time_zone="Europe/Berlin")
    found = runs(schedule, at("2026-03-29T00:30:00+01:00"), 3)
    assert [moment - found[0] for moment in found] == [timedelta(hours=h) for h in (0, 1, 2)]


def test_next_run_needs_an_aware_time() -> None:
    with pytest.raises(ValueError, match="aware"):
        ScheduleSpec(cron="@daily").next_run(datetime(2026, 12, 2))


def test_defaults() -> None:
    spec = CrawlJobSpec.from_mapping({"seeds": [SEED], "schedule": {"cron": "*/5 * * * *"}})
    assert spec.schedule == ScheduleSpec(
        cron="*/5 * * * *", time_zone="UTC", concurrency_policy="Forbid", history_limit=10
    )
    assert spec.to_mapping()["schedule"] == {
        "cron": "*/5 * * * *",
        "timeZone": "UTC",
        "concurrencyPolicy": "Forbid",
        "historyLimit": 10,
    }


@pytest.mark.parametrize(
    ("schedule", "where", "says"),
    [
        ({"cron": "61 * * * *"}, "cron", "is not a valid cron schedule: bad minute field"),
        ({"cron": "* 24 * * *"}, "cron", "is not a valid cron schedule: bad hour field"),
        ({"cron": "0 0 30 2 *"}, "cron", "is not a valid cron schedule: bad day-of-month field"),
        ({"cron": "0 0 * * FUNDAY"}, "cron", "bad day-of-week field"),
        ({"cron": "*/0 * * * *"}, "cron", "bad minute field"),
        ({"cron": "0 0 * *"}, "cron", "must be a cron schedule of five fields"),
        ({"cron": "0 0 0 * * *"}, "cron", "must be a cron schedule of five fields"),
        ({"cron": "@reboot"}, "cron", "must be a known macro"),
        ({"cron": ""}, "cron", "must be a cron schedule of five fields"),
        ({"cron": "@daily", "timeZone": "Mars/Olympus_Mons"}, "timeZone", "no zone is called"),
        ({"cron": "@daily", "timeZone": "../../etc/passwd"}, "timeZone", "must be an IANA"),
        (
            {"cron": "@daily", "concurrencyPolicy": "Allow"},
            "concurrencyPolicy",
            "share its frontier",
        ),
        ({"cron": "@daily", "concurrencyPolicy": "Sometimes"}, "concurrencyPolicy", "one of"),
        ({"cron": "@daily", "historyLimit": 101}, "historyLimit", "must be between 1 and 100"),
        ({}, "cron", "is required"),
    ],
)
def test_bad_schedules_are_refused_with_their_field(
    schedule: dict[str, object], where: str, says: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        CrawlJobSpec.from_mapping({"seeds": [SEED], "schedule": schedule})
    assert f"spec.schedule.{where}: " in str(caught.value)
    assert says in str(caught.value)
