"""A worker process whose address guard asks a test double for DNS: ``ScriptedDNS``.

DNS rebinding needs a name whose answer the test decides lookup by lookup; no real resolver
on a shared machine can be steered so. This module is run as a program (``python -m
tests.support.scripted_dns JOB ANSWERS OUT WORKER_ID REDIS_URL``) and runs the job's kind of
worker -- crawlfleet's own or a Scrapy spider's, as ``crawlfleet worker`` would -- with
everything real except the guard's resolver: ``ANSWERS`` is a JSON file mapping a name to the
answers handed out in turn (the last one repeats), and each lookup is appended to
``ANSWERS.lookups`` (one ``name address,...`` line), so the test sees which lookup decided.

The guard caches nothing (``cache_ttl_seconds=0``): each lookup is the script's next answer, so
the test can tell the check before a request from the resolution at connect time.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket
import sys
from pathlib import Path
from typing import Final

from crawlfleet.config import Config
from crawlfleet.crawler import run_worker
from crawlfleet.crawler.fetching.safety import AddressGuard
from crawlfleet.crawljob import load_crawljob
from crawlfleet.startup import setup_logging

__all__ = ["PUBLIC", "ScriptedDNS", "lookups_of"]

#: An address the guard allows (public) for a test's script; no test connects to it.
PUBLIC: Final = "93.184.216.34"


class ScriptedDNS:
    """The guard's resolver, a test double: the scripted answers, every lookup logged."""

    def __init__(self, answers: dict[str, list[list[str]]], log: Path) -> None:
        self.answers = answers
        self.log = log

    async def __call__(self, host: str, port: int) -> list[str]:
        script = self.answers.get(host)
        if not script:
            raise socket.gaierror(socket.EAI_NONAME, f"{host} is unknown to the scripted DNS")
        answer = script.pop(0) if len(script) > 1 else script[0]
        with self.log.open("a") as log:
            log.write(f"{host} {','.join(answer)}\n")
        return answer


def lookups_of(answers: Path) -> list[tuple[str, str]]:
    """The lookups the worker made, in order: (name, the addresses answered)."""
    log = answers.with_name(answers.name + ".lookups")
    if not log.exists():
        return []
    return [
        (name, addresses)
        for name, addresses in (line.split(" ", 1) for line in log.read_text().splitlines())
    ]


def main(job_file: str, answers_file: str, out: str, worker_id: str, redis_url: str) -> int:
    setup_logging("info")
    job = load_crawljob(job_file)
    answers = Path(answers_file)
    dns = ScriptedDNS(json.loads(answers.read_text()), answers.with_name(answers.name + ".lookups"))
    guard = AddressGuard(
        allow_private=job.spec.scope.allow_private_networks, resolver=dns, cache_ttl_seconds=0
    )
    config = dataclasses.replace(Config.from_env().worker, job_file=job_file, output_dir=Path(out))
    if job.spec.scrapy is None:
        return asyncio.run(
            run_worker(job, redis_url=redis_url, worker_id=worker_id, config=config, guard=guard)
        )
    from crawlfleet.scrapy.process import run_scrapy_worker

    return run_scrapy_worker(
        job, redis_url=redis_url, worker_id=worker_id, config=config, guard=guard
    )


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
