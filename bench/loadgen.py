"""A closed-loop HTTP/1.1 load generator for machines without `wrk` (the GPU machine has no
network to install it). Same contract as bench/wrk/embed.lua: N keep-alive connections each
POST one body back to back for a fixed time; latency percentiles of completed requests.

It is slower than wrk per request, so it splits the connections over a few processes.
Results made with it are labelled as such in the report.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import time
from urllib.parse import urlsplit

from bench.stats import percentile

MAX_REQUESTS_PER_CONN = 1_000_000


async def _one_connection(host: str, port: int, request: bytes, deadline: float,
                          timeout: float, out: dict) -> None:
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except (OSError, asyncio.TimeoutError):
        out["connect"] += 1
        return
    try:
        for _ in range(MAX_REQUESTS_PER_CONN):
            if time.perf_counter() >= deadline:
                break
            t0 = time.perf_counter()
            writer.write(request)
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
            status = int(head.split(b" ", 2)[1])
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:].strip())
            await asyncio.wait_for(reader.readexactly(length), timeout)
            t1 = time.perf_counter()
            if t1 > deadline + timeout:
                break
            out["latencies"].append(t1 - t0)
            out["bytes"] += len(head) + length
            if not 200 <= status < 400:
                out["status"] += 1
    except asyncio.TimeoutError:
        out["timeout"] += 1
    except (OSError, asyncio.IncompleteReadError, ValueError, IndexError):
        out["read"] += 1
    finally:
        writer.close()


async def _run(url: str, body: bytes, connections: int, seconds: float, timeout: float) -> dict:
    u = urlsplit(url)
    host, port = u.hostname or "127.0.0.1", u.port or 80
    request = (f"POST {u.path or '/'} HTTP/1.1\r\nHost: {host}:{port}\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
    out = {"latencies": [], "bytes": 0, "connect": 0, "read": 0, "write": 0, "status": 0, "timeout": 0}
    start = time.perf_counter()
    await asyncio.gather(*(_one_connection(host, port, request, start + seconds, timeout, out)
                           for _ in range(connections)))
    out["duration"] = time.perf_counter() - start
    return out


def _worker(args) -> dict:
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    return asyncio.run(_run(*args))


def load(url: str, body: bytes, connections: int, seconds: float, timeout: float = 30.0,
         procs: int | None = None) -> dict:
    """→ the same keys as the wrk script's JSON (latencies in µs)."""
    procs = max(1, min(procs or 4, connections))
    split = [connections // procs + (1 if i < connections % procs else 0) for i in range(procs)]
    jobs = [(url, body, n, seconds, timeout) for n in split if n]
    if len(jobs) == 1:
        parts = [_worker(jobs[0])]
    else:
        with mp.get_context("spawn").Pool(len(jobs)) as pool:
            parts = pool.map(_worker, jobs)
    lat = [x for p in parts for x in p["latencies"]]
    duration = max(p["duration"] for p in parts)
    res = {k: sum(p[k] for p in parts) for k in ("bytes", "connect", "read", "write", "status", "timeout")}
    res.update(requests=len(lat), duration_us=int(duration * 1e6))
    if lat:
        us = [x * 1e6 for x in lat]
        res.update(p50=percentile(us, 50), p90=percentile(us, 90), p95=percentile(us, 95),
                   p99=percentile(us, 99), mean=sum(us) / len(us), max=max(us))
    return res
