"""``crawlfleet`` commands a test starts as a user would, and the cleanup that stops them.

A failed test must not leave a run (and its workers) behind: ``no_stray_runs`` (use it with
``pytest.mark.usefixtures``) SIGTERMs what is still running, which drains the workers as
Ctrl-C would, and kills what outlives the drain.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from crawlfleet.testsite import TestSite

__all__ = ["crawlfleet", "crawlfleet_done", "job_for_site", "no_stray_runs"]

_started: list[subprocess.Popen[str]] = []
#: Longer than a worker's drain (crawlfleet/config.py, DrainConfig.budget_seconds).
_STOP_SECONDS = 90


def crawlfleet(
    *args: str, cwd: Path, env: Mapping[str, str] | None = None, own_group: bool = False
) -> subprocess.Popen[str]:
    """``python -m crawlfleet ARGS`` with its output captured (text), remembered for cleanup.

    ``own_group`` starts it in a process group (and session) of its own, as a shell starts a
    command on a terminal: ``os.killpg(proc.pid, SIGINT)`` is then the terminal's Ctrl-C,
    reaching it and every child that stayed in its group.
    """
    proc = subprocess.Popen(
        [sys.executable, "-m", "crawlfleet", *args],
        cwd=cwd,
        env=None if env is None else dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=own_group,
    )
    _started.append(proc)
    return proc


def crawlfleet_done(
    *args: str, cwd: Path, stdin: str = "", env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m crawlfleet ARGS`` run to its end (a minute at most), ``stdin`` fed to it."""
    return subprocess.run(
        [sys.executable, "-m", "crawlfleet", *args],
        cwd=cwd,
        input=stdin,
        env=None if env is None else dict(env),
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def no_stray_runs() -> Iterator[None]:
    yield
    while _started:
        proc = _started.pop()
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(_STOP_SECONDS)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def job_for_site(site: TestSite, name: str, **spec: object) -> dict[str, object]:
    """A CrawlJob document that crawls the whole test site, quick to notice dead workers;
    ``spec`` sections replace the defaults'."""
    base: dict[str, object] = {
        "seeds": site.seeds,
        "scope": {"allowedDomains": site.hosts, "maxDepth": 10, "allowPrivateNetworks": True},
        "concurrency": {"perWorker": 4, "perHost": 2, "hostDelaySeconds": 0},
        "lease": {"ttlSeconds": 60, "heartbeatSeconds": 0.5, "deadAfterSeconds": 3},
    }
    base.update(spec)
    return {
        "apiVersion": "crawlfleet.io/v1alpha1",
        "kind": "CrawlJob",
        "metadata": {"name": name},
        "spec": base,
    }
