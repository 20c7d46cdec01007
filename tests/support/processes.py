"""Finding a worker process the way an operator's kill would: by its command line."""

from __future__ import annotations

import os
from pathlib import Path


def worker_pid(job_file: Path, worker_id: str) -> int | None:
    """PID of the ``crawlfleet worker`` running ``job_file`` as ``worker_id``, if any."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            # NUL-separated arguments, or one title with spaces (a worker the zygote forked)
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").split()
        except OSError:
            continue
        if str(job_file).encode() in cmdline and worker_id.encode() in cmdline:
            return int(proc.name)
    return None


def worker_processes(job_file: Path) -> dict[str, int]:
    """``{worker id: pid}`` of the live ``crawlfleet worker`` processes running ``job_file``
    (zombies left out: a killed worker its runner has not reaped yet is gone)."""
    found: dict[str, int] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            args = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode().split()
            state = (proc / "stat").read_text().split(")")[-1].split()[0]
        except (OSError, UnicodeDecodeError):
            continue
        if state == "Z" or str(job_file) not in args or "--worker-id" not in args:
            continue
        found[args[args.index("--worker-id") + 1]] = int(proc.name)
    return found


def redis_server_pid(data_dir: Path) -> int | None:
    """PID of the redis-server keeping its data in ``data_dir`` (a run's private one).

    Found by its working directory: redis-server changes into its ``--dir`` and rewrites its
    command line into a title (``redis-server 127.0.0.1:PORT``).
    """
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if (proc / "comm").read_text().strip() != "redis-server":
                continue
            if Path(os.readlink(proc / "cwd")) == data_dir:
                return int(proc.name)
        except OSError:
            continue
    return None
