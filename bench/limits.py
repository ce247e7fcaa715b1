"""How fast headwise says no (issue 8): 413 for an oversized body, 429 when the queue is full.

The targets: a body 1 byte over HEADWISE_MAX_BODY_BYTES (and a 10 MB one) gets its 413 within
100 ms; under overload, the excess gets 429 within 50 ms. They are timings, so they are measured
here, on a machine as calm as you can give it, and not asserted in tests (tests/e2e check the
statuses, headers, counters and that nothing is lost, with loose timing bounds only).

    python -m bench.limits [--models models] [--rounds 50] [--seconds 10] [--out limits.json]

It starts its own server (fp32, HEADWISE_MAX_QUEUE=16). The overload: `--clients` asyncio
clients in this process, each posting one input and backing off 250 ms after a 429. The clock:
one probe in a process of its own on one keep-alive connection, sending MAX_QUEUE inputs a
request (so it is turned away whenever anything at all is queued), about 50 times a second.
Stdlib only, like bench/soak.py.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench.common import percentile
from bench.soak import start_server

MAX_QUEUE = 16
TEXT = "overload check " + "word " * 60


def http_post(path: str, data: bytes, length: int | None = None) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: limits\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data) if length is None else length}\r\n\r\n").encode()


def read_response(f) -> tuple[int, bytes]:
    """(status, body) of one HTTP/1.1 response from a socket's binary file."""
    status = int(f.readline().split()[1])
    length = 0
    while (line := f.readline()) not in (b"\r\n", b""):
        if line.lower().startswith(b"content-length"):
            length = int(line.split(b":")[1])
    return status, f.read(length)


# -- 429 ---------------------------------------------------------------------------------
def probe(port: int, seconds: float, text: str, n: int) -> list[float]:
    """Seconds from sending to each 429, on one keep-alive connection, ~50 requests a second."""
    data = json.dumps({"inputs": [text] * n}).encode()
    req = http_post("/v1/embed", data) + data
    out = []
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.settimeout(60)
        f = s.makefile("rb")
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            s.sendall(req)
            status, _ = read_response(f)
            if status == 429:
                out.append(time.perf_counter() - t0)
            time.sleep(0.02)  # a probe, not more load
    return out


def start_probe(port: int, seconds: float, text: str = TEXT, n: int = MAX_QUEUE) -> subprocess.Popen:
    """`probe` in a process of its own, so the load's clients and their GIL add nothing to its
    clock; its stdout is the JSON list of latencies."""
    return subprocess.Popen([sys.executable, "-m", "bench.limits", "probe", str(port), str(seconds), text, str(n)],
                            cwd=Path(__file__).resolve().parent.parent, stdout=subprocess.PIPE, text=True)


async def _hammer(host: str, port: int, clients: int, seconds: float, text: str) -> dict:
    data = json.dumps({"inputs": text}).encode()
    req = http_post("/v1/embed", data) + data
    codes: dict[int, int] = {}
    errors: list[str] = []

    async def one(end: float):
        reader, writer = await asyncio.open_connection(host, port)
        try:
            while time.perf_counter() < end:
                writer.write(req)
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 60)
                status = int(head.split(b" ", 2)[1])
                length = next(int(ln.split(b":")[1]) for ln in head.split(b"\r\n")
                              if ln.lower().startswith(b"content-length"))
                await reader.readexactly(length)
                codes[status] = codes.get(status, 0) + 1
                if status == 429:
                    await asyncio.sleep(0.25)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as e:
            errors.append(repr(e))
        finally:
            writer.close()

    end = time.perf_counter() + seconds
    await asyncio.gather(*(one(end) for _ in range(clients)))
    return {"codes": codes, "errors": errors}


def overload(port: int, clients: int, seconds: float) -> dict:
    p = start_probe(port, seconds)
    try:
        load = asyncio.run(_hammer("127.0.0.1", port, clients, seconds, TEXT))
    finally:
        out, _ = p.communicate(timeout=seconds + 60)
    lat = sorted(json.loads(out))
    return {"clients": clients, "seconds": seconds, "load_codes": load["codes"], "load_errors": len(load["errors"]),
            "probe_429s": len(lat), **_ms(lat)}


# -- 413 ---------------------------------------------------------------------------------
def too_large(port: int, size: int, declared: int) -> float:
    """Seconds from the end of the head (Content-Length: declared) to a 413; the body is poured
    from another thread meanwhile, as a client would."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.settimeout(30)
        s.sendall(http_post("/v1/embed", b"", declared))
        t0 = time.perf_counter()

        def pour():
            with contextlib.suppress(OSError):
                s.sendall(b"x" * size)

        threading.Thread(target=pour, daemon=True).start()
        status, body = read_response(s.makefile("rb"))
        dt = time.perf_counter() - t0
    if status != 413 or b'"too_large"' not in body:
        raise RuntimeError(f"expected 413 too_large, got {status}: {body[:200]!r}")
    return dt


def payloads(port: int, limit: int, rounds: int) -> dict:
    one_over = sorted(too_large(port, limit + 1, limit + 1) for _ in range(rounds))
    ten_mb = sorted(too_large(port, 10_000_000, 10_000_000) for _ in range(rounds))
    return {"rounds": rounds, "limit_plus_1": _ms(one_over), "ten_mb": _ms(ten_mb)}


def _ms(lat: list[float]) -> dict:
    if not lat:
        return {"p50_ms": None, "p99_ms": None, "max_ms": None}
    return {"p50_ms": round(percentile(lat, 50) * 1000, 2), "p99_ms": round(percentile(lat, 99) * 1000, 2),
            "max_ms": round(lat[-1] * 1000, 2)}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["probe"]:
        port, seconds, text, n = argv[1:5]
        print(json.dumps(probe(int(port), float(seconds), text, int(n))))
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", type=Path, default=Path("models"))
    p.add_argument("--rounds", type=int, default=50, help="413s of each size")
    p.add_argument("--seconds", type=float, default=10.0, help="of overload")
    p.add_argument("--clients", type=int, default=64, help="overload clients (4x MAX_QUEUE by default)")
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    limit = 4 * 1024 * 1024
    proc, url = start_server(a.models, {"HEADWISE_PRECISION": "fp32", "HEADWISE_MAX_QUEUE": str(MAX_QUEUE),
                                        "HEADWISE_MAX_BODY_BYTES": str(limit)})
    port = int(url.rsplit(":", 1)[1])
    try:
        result = {"machine": {"cores": os.cpu_count(), "loadavg_before": os.getloadavg()[0]},
                  "payload_413": payloads(port, limit, a.rounds),
                  "overload_429": overload(port, a.clients, a.seconds)}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    o, pl = result["overload_429"], result["payload_413"]
    result["targets"] = {
        "413 p99 < 100 ms (1 byte over)": pl["limit_plus_1"]["p99_ms"] < 100,
        "413 p99 < 100 ms (10 MB)": pl["ten_mb"]["p99_ms"] < 100,
        "429 p99 < 50 ms under overload": o["p99_ms"] is not None and o["p99_ms"] < 50,
        "no errors under overload": o["load_errors"] == 0 and set(o["load_codes"]) <= {200, 429},
    }
    text = json.dumps(result, indent=2)
    print(text)
    if a.out:
        a.out.write_text(text + "\n")
    return 0 if all(result["targets"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
