"""The suite's two images, built from their Dockerfiles once per test session.

``scripts/build-images`` does the work (podman, the Debian stand-in base, layer caching: a
few seconds when nothing changed); this runs it at most once per pytest session, however many
pytest-xdist processes ask: the first takes a file lock and builds, the others wait on the lock
and read its answer, which is kept under the session's id. ``./scripts/test`` builds before
pytest starts and passes the names on (``CRAWLFLEET_BUILT_IMAGES``, "worker operator"), so
inside the suite nothing runs again. A failed build fails the test that asked, with the
script's output: images are part of what the suite proves, never a skip.
"""

from __future__ import annotations

import fcntl
import functools
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["BUILD_SCRIPT", "BuiltImages", "ImageBuildError", "built_images", "podman_env"]

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "scripts" / "build-images"
BUILD_TIMEOUT_SECONDS = 1200.0  # a cold machine: packages, the stand-in base, both images
#: Set by scripts/test, which has just built them: "<worker> <operator>".
BUILT_ENV = "CRAWLFLEET_BUILT_IMAGES"


class ImageBuildError(RuntimeError):
    """scripts/build-images failed; the message carries its output."""


@dataclass(frozen=True)
class BuiltImages:
    """The names the images were built under (as podman lists them without ``localhost/``)."""

    worker: str
    operator: str


def cache_dir() -> Path:
    """Where scripts/build-images keeps its podman configuration: the same rule as the script."""
    override = os.environ.get("CRAWLFLEET_IMAGES_CACHE")
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "crawlfleet" / "images"


def podman_env() -> dict[str, str]:
    """The environment podman needs here: the configuration the images were built under
    (runc, cgroupfs, the machine's open-file limit; see scripts/build-images)."""
    return {**os.environ, "CONTAINERS_CONF": str(cache_dir() / "containers.conf")}


def _session_id() -> str:
    """One id for every process of this pytest session (pytest-xdist shares it), else ours."""
    return os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid-{os.getpid()}"


@functools.cache
def built_images() -> BuiltImages:
    """Both images, built (or found current) by scripts/build-images once this session."""
    built = os.environ.get(BUILT_ENV, "").split()
    if len(built) == 2:
        return BuiltImages(worker=built[0], operator=built[1])
    directory = cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    answer = directory / "last-session"
    with open(directory / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        lines = answer.read_text().splitlines() if answer.exists() else []
        if lines[:1] == [_session_id()] and len(lines) == 3:
            return BuiltImages(worker=lines[1], operator=lines[2])
        try:
            done = subprocess.run(
                ["bash", str(BUILD_SCRIPT)],
                capture_output=True,
                text=True,
                timeout=BUILD_TIMEOUT_SECONDS,
                check=False,
            )
        except subprocess.TimeoutExpired as error:
            raise ImageBuildError(f"{BUILD_SCRIPT} ran over {error.timeout:.0f} s") from None
        if done.returncode != 0:
            raise ImageBuildError(
                f"{BUILD_SCRIPT} failed ({done.returncode}):\n{done.stderr[-4000:]}"
            )
        worker, operator = done.stdout.splitlines()[-2:]
        answer.write_text(f"{_session_id()}\n{worker}\n{operator}\n")
        return BuiltImages(worker=worker, operator=operator)
