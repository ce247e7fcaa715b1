"""Soak (issue 8): mixed traffic against one `headwise serve` for a fixed time, watching memory and
latency. Random input lengths 1..max_len tokens, attention on 10% of requests.

After a warm-up (--warmup, 10 s, not measured). Pass criteria: no request fails; RSS grows < 5% over the second half; the p99 latency of the
last window is at most 2x the first window's (windows: a minute, or a quarter of shorter runs).

    python -m bench.soak --minutes 10 [--models models] [--clients 8] [--out soak.json]
    python -m bench.soak --seconds 60          # the form `make test` runs

Stdlib only (asyncio streams), like bench/loadgen.py. Loopback only; it starts and stops its
own server unless --url and --pid name one already running.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
import urllib.request
from pathlib import Path

from bench.server import Server, start_headwise
from bench.stats import percentile

WORDS = ["the", "cat", "sat", "on", "a", "mat", "while", "quick", "brown", "foxes", "jump", "over", "lazy", "dogs", "and", "heads", "attend", "to", "tokens", "in", "every", "layer", "of", "the", "model"]


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def body(rnd: random.Random, max_len: int, n_layers: int, attention_share: float) -> bytes:
    words = rnd.randint(1, max_len - 2)  # one word is one token here: [CLS] + words + [SEP] <= max_len
    req: dict = {"inputs": f"{rnd.randrange(10**9)} " + " ".join(rnd.choice(WORDS) for _ in range(words - 1))}
    if rnd.random() < attention_share:
        req["attention"] = {"layers": [0, n_layers - 1], "heads": [0, 1, 2, 3], "encoding": "base64"}
    return json.dumps(req).encode()


async def client(host: str, port: int, deadline: float, rnd: random.Random, info: dict, out: list,
                 errors: list, attention_share: float) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        while time.monotonic() < deadline:
            data = body(rnd, info["max_len"], info["n_layers"], attention_share)
            t0 = time.monotonic()
            writer.write(b"POST /v1/embed HTTP/1.1\r\nHost: soak\r\nContent-Type: application/json\r\n"
                         b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 120)
            status = int(head.split(b" ", 2)[1])
            length = next(int(ln.split(b":")[1]) for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length"))
            await asyncio.wait_for(reader.readexactly(length), 120)
            out.append((t0, time.monotonic() - t0))
            if status != 200:
                errors.append(status)
    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as e:
        errors.append(repr(e))
    finally:
        writer.close()


async def sample_rss(pid: int, deadline: float, every: float, out: list) -> None:
    while time.monotonic() < deadline:
        out.append((time.monotonic(), rss_kb(pid)))
        await asyncio.sleep(every)
    out.append((time.monotonic(), rss_kb(pid)))


async def drive(url: str, pid: int, seconds: float, clients: int, attention_share: float, seed: int,
                warmup: float = 10.0) -> dict:
    host, port = url.split("//")[1].split(":")
    with urllib.request.urlopen(url + "/v1/models", timeout=30) as r:
        card = json.loads(r.read())["data"][0]
    info = {"max_len": card["max_len"], "n_layers": card["n_layers"]}
    if warmup > 0:  # the allocator settles on every length and batch shape first; not measured
        await asyncio.gather(*(client(host, int(port), time.monotonic() + warmup, random.Random(-seed - i), info,
                                      [], [], attention_share) for i in range(clients)))
    lat: list = []
    errors: list = []
    rss: list = []
    start = time.monotonic()
    deadline = start + seconds
    await asyncio.gather(sample_rss(pid, deadline, max(1.0, seconds / 120), rss),
                         *(client(host, int(port), deadline, random.Random(seed + i), info, lat, errors, attention_share)
                           for i in range(clients)))
    return summarise(start, seconds, lat, errors, rss)


def summarise(start: float, seconds: float, lat: list, errors: list, rss: list) -> dict:
    window = 60.0 if seconds >= 240 else seconds / 4
    first = [d for t, d in lat if t - start < window]
    last = [d for t, d in lat if t - start >= seconds - window]
    half = start + seconds / 2
    rss_half = min(rss, key=lambda s: abs(s[0] - half))[1]
    rss_end = rss[-1][1]
    growth = (rss_end - rss_half) / rss_half
    p99_first, p99_last = percentile(sorted(first), 99), percentile(sorted(last), 99)
    result = {
        "seconds": seconds, "requests": len(lat), "errors": len(errors), "error_examples": [str(e) for e in errors[:5]],
        "req_per_s": len(lat) / seconds, "window_s": window,
        "p50_ms": percentile(sorted(d for _, d in lat), 50) * 1000,
        "p99_first_ms": p99_first * 1000, "p99_last_ms": p99_last * 1000, "p99_ratio": p99_last / p99_first,
        "rss_start_mb": rss[0][1] / 1024, "rss_half_mb": rss_half / 1024, "rss_end_mb": rss_end / 1024,
        "rss_growth_second_half": growth,
    }
    result["pass"] = result["errors"] == 0 and growth < 0.05 and result["p99_ratio"] <= 2.0 and len(lat) > 0
    return result


def start_server(models: Path, precision: str, env_extra: dict | None = None) -> Server:
    """`headwise serve` on CPU, ready (one answer from /health/ready), its output dropped; for
    bench.limits too."""
    server = start_headwise(models, precision, "cpu", None, env_extra, name="headwise serve", ready_streak=1)
    server.wait_ready(180)
    return server


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--seconds", type=float, help="overrides --minutes")
    p.add_argument("--models", type=Path, default=Path("models"))
    p.add_argument("--precision", default="fp32")
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--attention", type=float, default=0.10, help="share of requests asking for attention")
    p.add_argument("--seed", type=int, default=8)
    p.add_argument("--warmup", type=float, default=10.0, help="seconds of the same traffic before measuring")
    p.add_argument("--url", help="a server already running (with --pid)")
    p.add_argument("--pid", type=int)
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    seconds = a.seconds if a.seconds is not None else a.minutes * 60
    server = None
    if a.url:
        url, pid = a.url.rstrip("/"), a.pid
    else:
        server = start_server(a.models, a.precision)
        url, pid = server.url, server.proc.pid
    try:
        result = asyncio.run(drive(url, pid, seconds, a.clients, a.attention, a.seed, a.warmup))
    finally:
        if server is not None:
            server.stop(60)
    from headwise.export import cpu as cpu_info

    result["cpu"] = cpu_info.label()  # a figure holds only for the CPU that measured it
    text = json.dumps(result, indent=2)
    print(text)
    if a.out:
        a.out.write_text(text + "\n")
    return 0 if result["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
