"""API emulator benchmark: 10,000 objects, 200 open watches, on this machine.

Runs the emulator as its own process (as tests and the demo use it) and drives it with
aiohttp from this one. Reports write throughput, list latency, and the delay from a
write to its delivery on every watch. Numbers go to stdout as a table and into
tests/bench/RESULTS.md.

    python tests/bench/bench_apiserver.py [--objects N] [--watches N] [--updates N]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import orjson
from results import pct, write_section

BIN = Path(sys.executable).parent / "compute-domain-sim"
CM = "/api/v1/namespaces/default/configmaps"


async def create_objects(session: aiohttp.ClientSession, base: str, n: int, workers: int
                         ) -> float:
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(n):
        queue.put_nowait(i)

    async def worker() -> None:
        while not queue.empty():
            i = queue.get_nowait()
            body = {"metadata": {"name": f"obj-{i:05d}", "labels": {"shard": str(i % 10)}},
                    "data": {"i": str(i)}}
            async with session.post(base + CM, data=orjson.dumps(body),
                                    headers={"Content-Type": "application/json"}) as resp:
                assert resp.status == 201, await resp.text()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(workers)))
    return n / (time.perf_counter() - start)


async def timed_get(session: aiohttp.ClientSession, url: str, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        async with session.get(url) as resp:
            await resp.read()
            assert resp.status == 200
        out.append(time.perf_counter() - start)
    return out


async def watch_delays(session: aiohttp.ClientSession, base: str, watches: int, updates: int
                       ) -> tuple[list[float], int]:
    async with session.get(base + CM + "?limit=1") as resp:
        rv = (await resp.json())["metadata"]["resourceVersion"]
    sent: dict[str, float] = {}
    delays: list[float] = []
    ready = asyncio.Event()
    opened = 0

    async def watcher() -> None:
        nonlocal opened
        url = f"{base}{CM}?watch=true&resourceVersion={rv}&timeoutSeconds=600"
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=None)) as resp:
            opened += 1
            if opened == watches:
                ready.set()
            got = 0
            async for line in resp.content:
                now = time.perf_counter()
                event = orjson.loads(line)
                marker = (event["object"].get("data") or {}).get("marker")
                if marker in sent:
                    delays.append(now - sent[marker])
                    got += 1
                    if got == updates:
                        return

    tasks = [asyncio.create_task(watcher()) for _ in range(watches)]
    await asyncio.wait_for(ready.wait(), 60)
    await asyncio.sleep(0.5)
    for i in range(updates):
        marker = f"m{i}"
        body = {"data": {"marker": marker}}
        sent[marker] = time.perf_counter()
        async with session.patch(base + f"{CM}/obj-{i:05d}", data=orjson.dumps(body),
                                 headers={"Content-Type": "application/merge-patch+json"}) as r:
            assert r.status == 200, await r.text()
        await asyncio.sleep(0.01)
    await asyncio.wait_for(asyncio.gather(*tasks), 120)
    return delays, watches * updates


async def run(args: argparse.Namespace) -> list[tuple[str, str]]:
    proc = subprocess.Popen([BIN, "apiserver"], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        base = re.search(r"http://\S+", line).group(0)
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            throughput = await create_objects(session, base, args.objects, 16)
            full = await timed_get(session, base + CM, 5)
            page = await timed_get(session, base + CM + "?limit=500", 20)
            selected = await timed_get(session, base + CM + "?labelSelector=shard%3D3", 5)
            one = await timed_get(session, base + CM + "/obj-00042", 200)
            delays, expected = await watch_delays(session, base, args.watches, args.updates)
        rss = _rss_mib(proc.pid)
    finally:
        proc.terminate()
        proc.wait(10)
    ms = 1000.0
    return [
        ("objects stored", f"{args.objects:,}"),
        ("create throughput (16 concurrent clients)", f"{throughput:,.0f} objects/s"),
        ("GET one object, p50", f"{statistics.median(one) * ms:.2f} ms"),
        (f"LIST all {args.objects:,}, p50", f"{statistics.median(full) * ms:.0f} ms"),
        ("LIST limit=500 (first page), p50", f"{statistics.median(page) * ms:.1f} ms"),
        (f"LIST labelSelector (1/10 of {args.objects:,}), p50",
         f"{statistics.median(selected) * ms:.0f} ms"),
        ("open watches", f"{args.watches}"),
        ("watch deliveries received / expected", f"{len(delays):,} / {expected:,}"),
        ("write-to-delivery delay, p50", f"{pct(delays, 0.50) * ms:.1f} ms"),
        ("write-to-delivery delay, p99", f"{pct(delays, 0.99) * ms:.1f} ms"),
        ("server RSS after the run", f"{rss:.0f} MiB"),
    ]


def _rss_mib(pid: int) -> float:
    try:
        import psutil

        return psutil.Process(pid).memory_info().rss / 2**20
    except Exception:
        return float("nan")


def write_results(rows: list[tuple[str, str]]) -> str:
    return write_section("API emulator", rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--objects", type=int, default=10_000)
    parser.add_argument("--watches", type=int, default=200)
    parser.add_argument("--updates", type=int, default=200)
    args = parser.parse_args()
    rows = asyncio.run(run(args))
    print(write_results(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
