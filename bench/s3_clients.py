"""S3 client benchmark: which async library the worker's S3 sink uploads with.

    python -m bench.s3_clients [--quick] [--json] [--rounds R] [--objects N]

Starts the tests' real S3-compatible server (versitygw, tests/s3server/build.sh) on loopback
and uploads the same workload through each candidate from one asyncio process:

- ``obstore``: Rust's object_store crate (reqwest, tokio) behind a Python API; the event
  loop only awaits futures that Rust completes on its own threads;
- ``aiobotocore``: botocore (request models, SigV4, checksums) over aiohttp, pure Python;
  installed for the benchmark only (``pip install aiobotocore``).

The workload is what the sink will write: N JSONL files of ~256 KiB (rotated page files; 16
uploads in flight), then one 64 MiB object as a multipart upload in 8 MiB parts, 8 in flight
(a WARC file). Both clients run with their defaults otherwise: over plain HTTP both sign the
payload (SHA-256 of every byte); botocore also sends a CRC32 checksum, as it does by default.

Each candidate runs in a fresh child process per round (rounds alternate the order), so its
import time and memory are its own: the child builds its payloads and loads the worker's own
HTTP stack (httpx over aiohttp) first, so import time and memory are what the sink would add
to a worker; then it measures the import, the client and the uploads. Reported per candidate
(best round for rates, lowest for costs): objects/s and MB/s of the small files, MB/s of the
multipart object, CPU ms per small object (user + system of the whole process, the client's
threads included), import ms, and RSS growth from before the import to after the uploads. The
server's own CPU per round is reported beside them: on 2 shared cores the server and the
client compete, so wall rates say more about the machine than the client, and client CPU per
object is the figure to compare.

After every round the parent checks the server's own data folder -- every object there with its
exact size, the multipart object's SHA-256 -- so no candidate can win by skipping work.
``--quick``: 200 objects, 3 rounds each, well under a minute.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import importlib.util
import json
import os
import platform
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.support.s3 import REGION, S3Server

if TYPE_CHECKING:
    from types_aiobotocore_s3.type_defs import CompletedPartTypeDef

CANDIDATES = ("obstore", "aiobotocore")
CONCURRENCY = 16
OBJECT_BYTES = 256 * 1024
MULTIPART_BYTES = 64 * 1024 * 1024
PART_BYTES = 8 * 1024 * 1024
PART_CONCURRENCY = 8
MULTIPART_KEY = "warc/big.warc"
# What a worker process has imported before any sink exists (its fetch layer: httpx over
# aiohttp); loaded before the baseline, so import time and RSS are what the sink would add.
WORKER_PRELOADED = "httpx_aiohttp"

# --------------------------------------------------------------------------------------------
# the workload (built in each child before anything is measured)


def jsonl_object(index: int, size: int) -> bytes:
    """A page file of about ``size`` bytes: JSON lines shaped like the worker's page records."""
    rng = random.Random(index)
    words = [f"w{rng.randrange(50_000)}" for _ in range(400)]
    lines: list[bytes] = []
    total = 0
    record = 0
    while total < size:
        text = " ".join(rng.choices(words, k=200))
        line = json.dumps(
            {
                "url": f"http://site-{index % 4}.test/page/{index}/{record}",
                "status": 200,
                "fetch_id": f"{index:08x}{record:08x}",
                "fetched_at": 1_790_000_000 + record,
                "depth": record % 4,
                "title": text[:60],
                "links": [f"http://site-{index % 4}.test/page/{n}" for n in range(20)],
                "text": text,
            },
            separators=(",", ":"),
        ).encode()
        lines.append(line + b"\n")
        total += len(line) + 1
        record += 1
    return b"".join(lines)


def multipart_object(size: int) -> bytes:
    return random.Random(7).randbytes(size)


def part_slices(size: int) -> list[tuple[int, int]]:
    return [(start, min(start + PART_BYTES, size)) for start in range(0, size, PART_BYTES)]


# --------------------------------------------------------------------------------------------
# the candidates: each returns (put small object, put multipart object, close)

PutOne = Callable[[str, bytes], Awaitable[None]]
PutBig = Callable[[str, bytes], Awaitable[None]]
Close = Callable[[], Awaitable[None]]


async def obstore_client(
    endpoint: str, bucket: str, access: str, secret: str
) -> tuple[PutOne, PutBig, Close]:
    import obstore
    from obstore.store import S3Store

    store = S3Store(
        bucket,
        endpoint=endpoint,
        region=REGION,
        access_key_id=access,
        secret_access_key=secret,
        virtual_hosted_style_request=False,
        client_options={"allow_http": True, "timeout": "60s"},
        retry_config={"max_retries": 3, "retry_timeout": timedelta(seconds=60)},
    )

    async def put_one(key: str, body: bytes) -> None:
        result = await obstore.put_async(store, key, body, use_multipart=False)
        if not result["e_tag"]:
            raise RuntimeError(f"obstore: no ETag for {key}")

    async def put_big(key: str, body: bytes) -> None:
        result = await obstore.put_async(
            store,
            key,
            body,
            use_multipart=True,
            chunk_size=PART_BYTES,
            max_concurrency=PART_CONCURRENCY,
        )
        if not result["e_tag"]:
            raise RuntimeError(f"obstore: no ETag for {key}")

    async def close() -> None:
        return None

    return put_one, put_big, close


async def aiobotocore_client(
    endpoint: str, bucket: str, access: str, secret: str
) -> tuple[PutOne, PutBig, Close]:
    from aiobotocore.config import AioConfig
    from aiobotocore.session import get_session

    config = AioConfig(
        max_pool_connections=CONCURRENCY,
        s3={"addressing_style": "path"},
        retries={"max_attempts": 3, "mode": "standard"},
    )
    context = get_session().create_client(
        "s3",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=access,
        aws_secret_access_key=secret,
        config=config,
    )
    client = await context.__aenter__()

    async def put_one(key: str, body: bytes) -> None:
        reply = await client.put_object(Bucket=bucket, Key=key, Body=body)
        if not reply.get("ETag"):
            raise RuntimeError(f"aiobotocore: no ETag for {key}")

    async def put_big(key: str, body: bytes) -> None:
        # botocore has no async transfer manager: a multipart upload is three calls, parts
        # in parallel, aborted on failure (as the sink would do it).
        upload = await client.create_multipart_upload(Bucket=bucket, Key=key)
        upload_id = upload["UploadId"]
        gate = asyncio.Semaphore(PART_CONCURRENCY)

        async def part(number: int, start: int, end: int) -> CompletedPartTypeDef:
            async with gate:
                reply = await client.upload_part(
                    Bucket=bucket,
                    Key=key,
                    UploadId=upload_id,
                    PartNumber=number,
                    Body=body[start:end],
                )
                return {"PartNumber": number, "ETag": reply["ETag"]}

        try:
            parts = await asyncio.gather(
                *(part(n, s, e) for n, (s, e) in enumerate(part_slices(len(body)), start=1))
            )
            await client.complete_multipart_upload(
                Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts}
            )
        except BaseException:
            await client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
            raise

    async def close() -> None:
        await context.__aexit__(None, None, None)

    return put_one, put_big, close


CLIENTS = {"obstore": obstore_client, "aiobotocore": aiobotocore_client}

# --------------------------------------------------------------------------------------------
# the child: one candidate, one round


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def child(candidate: str, objects: int, prefix: str) -> dict[str, Any]:
    endpoint = os.environ["BENCH_S3_ENDPOINT"]
    bucket = os.environ["BENCH_S3_BUCKET"]
    access = os.environ["BENCH_S3_ACCESS_KEY_ID"]
    secret = os.environ["BENCH_S3_SECRET_ACCESS_KEY"]
    bodies = [jsonl_object(i, OBJECT_BYTES) for i in range(objects)]
    big = multipart_object(MULTIPART_BYTES)
    importlib.import_module(WORKER_PRELOADED)  # the worker has it loaded anyway

    rss_before = rss_bytes()
    started = time.perf_counter()
    put_one, put_big, close = await CLIENTS[candidate](endpoint, bucket, access, secret)
    import_and_client_ms = (time.perf_counter() - started) * 1000

    gate = asyncio.Semaphore(CONCURRENCY)

    async def upload(index: int) -> None:
        async with gate:
            await put_one(f"{prefix}/pages/part-{index:05d}.jsonl", bodies[index])

    cpu_started, started = cpu_seconds(), time.perf_counter()
    await asyncio.gather(*(upload(i) for i in range(objects)))
    small_seconds = time.perf_counter() - started
    small_cpu = cpu_seconds() - cpu_started

    cpu_started, started = cpu_seconds(), time.perf_counter()
    await put_big(f"{prefix}/{MULTIPART_KEY}", big)
    big_seconds = time.perf_counter() - started
    big_cpu = cpu_seconds() - cpu_started
    await close()

    small_bytes = sum(len(b) for b in bodies)
    return {
        "candidate": candidate,
        "import_and_client_ms": round(import_and_client_ms, 1),
        "objects": objects,
        "objects_per_s": round(objects / small_seconds, 1),
        "small_mb_per_s": round(small_bytes / small_seconds / 1e6, 1),
        "cpu_ms_per_object": round(small_cpu * 1000 / objects, 3),
        "multipart_mb_per_s": round(MULTIPART_BYTES / big_seconds / 1e6, 1),
        "multipart_cpu_ms_per_mib": round(big_cpu * 1000 / (MULTIPART_BYTES / 2**20), 3),
        "rss_delta_mib": round((rss_bytes() - rss_before) / 2**20, 1),
        "small_bytes": small_bytes,
        "small_sizes": [len(b) for b in bodies],
        "multipart_sha256": hashlib.sha256(big).hexdigest(),
    }


# --------------------------------------------------------------------------------------------
# the parent: server, rounds, checks, report


def import_ms(candidate: str) -> float:
    """Import time of the candidate's modules, in a fresh interpreter that has the worker's
    HTTP stack loaded already."""
    module = {"obstore": "obstore, obstore.store", "aiobotocore": "aiobotocore.session"}
    code = (
        f"import {WORKER_PRELOADED}, time; t = time.perf_counter(); "
        f"import {module[candidate]}; print((time.perf_counter() - t) * 1000)"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return float(out.stdout)


def process_cpu_seconds(server: S3Server) -> float:
    """User + system time the server process has used so far."""
    assert server.process is not None
    fields = Path(f"/proc/{server.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def check_on_disk(server: S3Server, bucket: str, prefix: str, result: dict[str, Any]) -> None:
    """What the server stored, read from its own folder: every object, exact sizes, the hash."""
    root = server.data_dir / bucket / prefix
    pages = sorted((root / "pages").iterdir())
    sizes = [p.stat().st_size for p in pages]
    if sizes != result["small_sizes"]:
        raise SystemExit(f"{result['candidate']}: {len(pages)} objects stored, sizes differ")
    big = (root / MULTIPART_KEY).read_bytes()
    if hashlib.sha256(big).hexdigest() != result["multipart_sha256"]:
        raise SystemExit(f"{result['candidate']}: the multipart object differs from what was sent")


def run_child(
    server: S3Server, bucket: str, candidate: str, objects: int, prefix: str
) -> dict[str, Any]:
    env = {
        **os.environ,
        "BENCH_S3_ENDPOINT": server.endpoint_url,
        "BENCH_S3_BUCKET": bucket,
        "BENCH_S3_ACCESS_KEY_ID": server.root_credentials.access_key_id,
        "BENCH_S3_SECRET_ACCESS_KEY": server.root_credentials.secret_access_key,
    }
    argv = [sys.executable, "-m", "bench.s3_clients", "--child", candidate]
    argv += ["--objects", str(objects), "--prefix", prefix]
    out = subprocess.run(argv, env=env, check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def summarise(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    best = {
        key: max(r[key] for r in rounds)
        for key in ("objects_per_s", "small_mb_per_s", "multipart_mb_per_s")
    }
    low = {
        key: min(r[key] for r in rounds)
        for key in (
            "cpu_ms_per_object",
            "multipart_cpu_ms_per_mib",
            "rss_delta_mib",
            "import_and_client_ms",
            "server_cpu_ms_per_object",
        )
    }
    per_round = {
        key: [r[key] for r in rounds]
        for key in ("objects_per_s", "multipart_mb_per_s", "cpu_ms_per_object", "rss_delta_mib")
    }
    return {**best, **low, "rounds": per_round}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="200 objects, 3 rounds")
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--objects", type=int, default=None)
    parser.add_argument("--child", choices=CANDIDATES, help=argparse.SUPPRESS)
    parser.add_argument("--prefix", default="bench", help=argparse.SUPPRESS)
    args = parser.parse_args()
    objects = args.objects or (200 if args.quick else 1000)
    if args.child:
        print(json.dumps(asyncio.run(child(args.child, objects, args.prefix))))
        return
    rounds = args.rounds or 3
    missing = [c for c in CANDIDATES if importlib.util.find_spec(c) is None]
    if missing:
        raise SystemExit(
            f"bench.s3_clients compares {', '.join(CANDIDATES)}: pip install {' '.join(missing)}"
        )

    results: dict[str, Any] = {"objects": objects, "object_kib": OBJECT_BYTES // 1024}
    results["multipart_mib"] = MULTIPART_BYTES // 2**20
    results["part_mib"] = PART_BYTES // 2**20
    results["concurrency"] = CONCURRENCY
    by_candidate: dict[str, list[dict[str, Any]]] = {c: [] for c in CANDIDATES}
    results["load_average_before"] = [round(x, 2) for x in os.getloadavg()]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-s3-") as tmp, S3Server(Path(tmp)) as server:
        bucket = server.create_bucket("bench")
        results["s3_server"] = server_version(server)
        for number in range(rounds):
            order = CANDIDATES if number % 2 == 0 else CANDIDATES[::-1]
            for candidate in order:
                prefix = f"round-{number}/{candidate}"
                server_cpu = process_cpu_seconds(server)
                result = run_child(server, bucket, candidate, objects, prefix)
                server_cpu = process_cpu_seconds(server) - server_cpu
                # the whole round (small objects and multipart), per small object
                result["server_cpu_ms_per_object"] = round(server_cpu * 1000 / objects, 3)
                check_on_disk(server, bucket, prefix, result)
                by_candidate[candidate].append(result)
                print(
                    f"round {number + 1} {candidate:12s} {result['objects_per_s']:8.1f} obj/s "
                    f"{result['small_mb_per_s']:6.1f} MB/s  multipart "
                    f"{result['multipart_mb_per_s']:6.1f} MB/s  "
                    f"{result['cpu_ms_per_object']:.2f} CPU ms/obj  "
                    f"RSS +{result['rss_delta_mib']} MiB",
                    file=sys.stderr,
                )
    for candidate in CANDIDATES:
        summary = summarise(by_candidate[candidate])
        summary["import_ms"] = round(min(import_ms(candidate) for _ in range(3)), 1)
        results[candidate] = summary
    obs, boto = results["obstore"], results["aiobotocore"]
    results["ratios_obstore_vs_aiobotocore"] = {
        "objects_per_s": round(obs["objects_per_s"] / boto["objects_per_s"], 2),
        "small_mb_per_s": round(obs["small_mb_per_s"] / boto["small_mb_per_s"], 2),
        "multipart_mb_per_s": round(obs["multipart_mb_per_s"] / boto["multipart_mb_per_s"], 2),
        "cpu_ms_per_object": round(obs["cpu_ms_per_object"] / boto["cpu_ms_per_object"], 2),
        "import_ms": round(obs["import_ms"] / boto["import_ms"], 2),
        "rss_delta_mib": round(obs["rss_delta_mib"] / max(boto["rss_delta_mib"], 0.1), 2),
    }
    results["seconds"] = round(time.monotonic() - started, 1)
    results["python"] = platform.python_version()
    results["versions"] = {c: package_version(c) for c in (*CANDIDATES, "botocore", "aiohttp")}
    results["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    if args.json:
        print(json.dumps(results))
    else:
        print(json.dumps(results, indent=2))


def server_version(server: S3Server) -> str:
    out = subprocess.run(
        [str(server.binary), "--version"], capture_output=True, text=True, check=False
    )
    version = next(
        (line.split(":", 1)[1].strip() for line in out.stdout.splitlines() if "Version" in line),
        "unknown",
    )
    return f"versitygw {version}"


def package_version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


if __name__ == "__main__":
    main()
