"""A real S3-compatible server for the tests: versitygw's posix backend on 127.0.0.1.

Output sinks are tested against a server that signs, authorises and stores as object stores
do, not against a mock (a mock agrees with whatever the sink assumes). versitygw keeps each
bucket as a folder under the data directory, starts in well under a second and speaks the S3
API with SigV4, ACLs, bucket policies and multipart uploads; why it and not SeaweedFS is in
docs/development.md. The binary comes from ``tests/s3server/build.sh`` (built from source at a
pinned version, cached outside the repository); a missing binary is a failure naming that
command, never a skip.

Users, buckets and grants are made through versitygw's own admin API (its ``admin``
subcommand), so the test bed needs no S3 client of its own and the client under test never
sets up the conditions it is tested against. Secrets travel in the environment, never in argv.

A server can be stopped and started again on the same port and data (``stop()``/``start()``),
which is how a test makes the destination unavailable mid-crawl. It runs as the control plane's
processes do (tests/e2e/cluster/processes.py): its own session, killed with the harness.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Literal

from tests.e2e.cluster.controlplane import free_port, tail
from tests.e2e.cluster.processes import kill_group, spawn, terminate

__all__ = [
    "BUILD_SCRIPT",
    "REGION",
    "S3Credentials",
    "S3Server",
    "S3ServerError",
    "aws_env",
    "versitygw_binary",
]

BUILD_SCRIPT = Path(__file__).resolve().parents[1] / "s3server" / "build.sh"
REGION = "us-east-1"
START_TIMEOUT_SECONDS = 15.0
STOP_GRACE_SECONDS = 5.0
HEALTH_PATH = "/health"
_TEMP_DIR = ".sgwtmp"  # the posix backend's in-progress uploads and metadata, inside a bucket

# versitygw's roles: "user" reaches only buckets it owns or is granted, "userplus" may also
# create buckets, "admin" reaches everything (as the root account does).
Role = Literal["user", "userplus", "admin"]


class S3ServerError(RuntimeError):
    """The test S3 server could not be found, started or administered."""


@dataclass(frozen=True)
class S3Credentials:
    """An access key pair; the secret stays out of ``repr`` (and so out of test reports)."""

    access_key_id: str
    secret_access_key: str = field(repr=False)


def versitygw_binary() -> Path:
    """The built versitygw, or a failure that names the command that builds it."""
    out = subprocess.run(
        ["bash", str(BUILD_SCRIPT), "--bin-dir"], check=True, capture_output=True, text=True
    )
    binary = Path(out.stdout.strip()) / "versitygw"
    if not os.access(binary, os.X_OK):
        raise S3ServerError(
            f"the test S3 server is not built ({binary} is missing): run {BUILD_SCRIPT} "
            "(a few minutes the first time; ./scripts/test runs it)"
        )
    return binary


class S3Server:
    """One versitygw process: S3 API and admin API on two loopback ports, data under ``root``."""

    def __init__(self, root: Path, *, binary: Path | None = None, host: str = "127.0.0.1") -> None:
        self.root = Path(root).resolve()
        self.data_dir = self.root / "data"
        self.iam_dir = self.root / "iam"
        self.log_path = self.root / "versitygw.log"
        self.binary = binary or versitygw_binary()
        #: The S3 API's address (the e2e real node's pods need one that is not loopback).
        self.host = host
        self.port = free_port(host)
        self.admin_port = free_port()
        self.root_credentials = S3Credentials("crawlfleet-root", secrets.token_hex(20))
        self.process: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        return f"S3Server(endpoint_url={self.endpoint_url!r}, root={str(self.root)!r})"

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, timeout_seconds: float = START_TIMEOUT_SECONDS) -> S3Server:
        """Start (or start again, on the same ports and data) and wait until it is healthy."""
        if self.running:
            return self
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.iam_dir.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "ROOT_ACCESS_KEY_ID": self.root_credentials.access_key_id,
            "ROOT_SECRET_ACCESS_KEY": self.root_credentials.secret_access_key,
        }
        argv = [
            str(self.binary),
            "--port", f"{self.host}:{self.port}",
            "--admin-port", f"127.0.0.1:{self.admin_port}",
            "--region", REGION,
            "--iam-dir", str(self.iam_dir),
            "--health", HEALTH_PATH,
            # Object stores keep connections alive; versitygw only does so when asked.
            "--keep-alive",
            "--quiet",  # no line per request: a bench's uploads would fill the log
            "posix", str(self.data_dir),
        ]  # fmt: skip
        self.process = spawn(argv, log=self.log_path, env=env)
        deadline = time.monotonic() + timeout_seconds
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise S3ServerError(
                    f"versitygw exited with {self.process.returncode}:\n{tail(self.log_path)}"
                )
            if self._healthy():
                return self
            time.sleep(0.02)
        self.stop()
        raise S3ServerError(
            f"versitygw on {self.endpoint_url} was not healthy within {timeout_seconds} s:\n"
            f"{tail(self.log_path)}"
        )

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.endpoint_url + HEALTH_PATH, timeout=0.5) as reply:
                return int(reply.status) == 200
        except (OSError, urllib.error.URLError):
            return False

    def stop(self, *, kill: bool = False) -> None:
        """SIGTERM and wait (versitygw finishes the requests it has); ``kill``: SIGKILL at once."""
        if self.process is None:
            return
        if kill:
            kill_group(self.process)
        terminate(self.process, grace_seconds=STOP_GRACE_SECONDS)
        self.process = None

    def create_user(self, access_key_id: str, *, role: Role = "user") -> S3Credentials:
        """A new account with a fresh secret."""
        credentials = S3Credentials(access_key_id, secrets.token_hex(20))
        self._admin(
            "create-user", "--access", access_key_id, "--role", role,
            secret=credentials.secret_access_key,
        )  # fmt: skip
        return credentials

    def create_bucket(
        self,
        name: str,
        *,
        owner: str | None = None,
        grant_read: tuple[str, ...] = (),
        grant_write: tuple[str, ...] = (),
    ) -> str:
        """A bucket owned by ``owner`` (an access key id; the root account by default).

        ``grant_read``/``grant_write`` give other accounts those ACL permissions: a bucket
        whose readers may not write is what a sink must refuse at start.
        """
        args = ["create-bucket", "--bucket", name]
        args += ["--owner", owner or self.root_credentials.access_key_id]
        if grant_read or grant_write:
            # New buckets default to BucketOwnerEnforced, which refuses ACLs (as AWS does).
            args += ["--object-ownership", "BucketOwnerPreferred"]
        if grant_read:
            args += ["--grant-read", ",".join(grant_read)]
        if grant_write:
            args += ["--grant-write", ",".join(grant_write)]
        self._admin(*args)
        return name

    def stored_objects(self, bucket: str) -> dict[str, Path]:
        """Every object of ``bucket`` as the server keeps it on disk, by key.

        Read from the posix backend's folder, not through an S3 client, so a test can check
        what a sink wrote without trusting the client the sink uses. Incomplete multipart
        uploads (under ``.sgwtmp``) are not objects and are left out.
        """
        bucket_dir = self.data_dir / bucket
        return {
            path.relative_to(bucket_dir).as_posix(): path
            for path in sorted(bucket_dir.rglob("*"))
            if path.is_file() and _TEMP_DIR not in path.relative_to(bucket_dir).parts
        }

    def _admin(self, *args: str, secret: str | None = None) -> None:
        """One ``versitygw admin`` call as the root account; a refusal raises with its output."""
        env = {
            **os.environ,
            "ADMIN_ACCESS_KEY_ID": self.root_credentials.access_key_id,
            "ADMIN_SECRET_ACCESS_KEY": self.root_credentials.secret_access_key,
            "ADMIN_ENDPOINT_URL": self.admin_url,
        }
        argv = [str(self.binary), "admin", *args]
        if secret is not None:
            # A new user's secret: the admin CLI takes it only as a flag, so it is in this
            # short-lived process's argv (visible in /proc for a moment). Test accounts only.
            argv += ["--secret", secret]
        result = subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=30, check=False
        )
        if result.returncode != 0:
            raise S3ServerError(
                f"versitygw admin {args[0]} failed ({result.returncode}): "
                f"{(result.stderr or result.stdout).strip()}"
            )

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def aws_env(server: S3Server, credentials: S3Credentials | None = None) -> dict[str, str]:
    """The environment of a ``crawlfleet`` command writing to ``server``: the standard AWS
    variables a user sets for a bucket, nothing of it in argv or spec."""
    credentials = credentials or server.root_credentials
    return {
        **os.environ,
        "AWS_ACCESS_KEY_ID": credentials.access_key_id,
        "AWS_SECRET_ACCESS_KEY": credentials.secret_access_key,
        "AWS_ENDPOINT_URL": server.endpoint_url,
        "AWS_REGION": REGION,
    }
