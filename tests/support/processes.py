"""Finding a worker process the way an operator's kill would: by its command line."""

from __future__ import annotations

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
