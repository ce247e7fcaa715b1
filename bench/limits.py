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
import socket
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

from bench.soak import start_server
from bench.stats import percentile

MAX_QUEUE = 16
TEXT = "overload check " + "word " * 60


def http_post(path: str, data: bytes, length: int | None = None) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: limits\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data) if length is None else length}\r\n\r\n").encode()


def read_response(f) -> tuple[int, dict[str, str], bytes]:
    """(status, headers with lower-case names, body) of one HTTP/1.1 response from a socket's
    binary file."""
    status = int(f.readline().split()[1])
    headers = {}
    while (line := f.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, f.read(int(headers.get("content-length", 0)))


def send_raw(port: int, head: bytes, body: bytes = b"", timeout: float = 10) -> tuple[int, dict, bytes, float]:
    """Send a request head, then its body from another thread (as a client pouring a big body
    would), and read one response: (status, headers, body, seconds from the end of the head to
    the response)."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.settimeout(timeout)
        s.sendall(head)
        t0 = time.perf_counter()
        if body:
            def pour():
                with contextlib.suppress(OSError):
                    s.sendall(body)

            threading.Thread(target=pour, daemon=True).start()
        status, headers, data = read_response(s.makefile("rb"))
        return status, headers, data, time.perf_counter() - t0


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
            status, _, _ = read_response(f)
            if status == 429:
                out.append(time.perf_counter() - t0)
            time.sleep(0.02)  # a probe, not more load
    return out


def start_probe(port: int, seconds: float, text: str = TEXT, n: int = MAX_QUEUE) -> subprocess.Popen:
    """`probe` in a process of its own, so the load's clients and their GIL add nothing to its
    clock; its stdout is the JSON list of latencies."""
    return subprocess.Popen([sys.executable, "-m", "bench.limits", "probe", str(port), str(seconds), text, str(n)],
                            cwd=Path(__file__).resolve().parent.parent, stdout=subprocess.PIPE, text=True)


def hammer(port: int, clients: int, seconds: float, text: str = TEXT) -> dict:
    """`clients` keep-alive connections posting one input each for `seconds`; after a 429 a
    client waits 250 ms (in a hurry: Retry-After says 1 s; retrying every 50 ms made 64 Python
    clients on the server's own cores measure the load generator, not the server).
    → codes (status → count), errors (connection failures), t429 (seconds to each 429),
    retry_after and types_429 (the headers and error types the 429s carried), wall (seconds)."""
    data = json.dumps({"inputs": text}).encode()
    req = http_post("/v1/embed", data) + data
    stats: dict = {"codes": defaultdict(int), "errors": [], "t429": [], "retry_after": set(), "types_429": set()}

    async def one(end: float):
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError as e:
            stats["errors"].append(repr(e))
            return
        try:
            while time.perf_counter() < end:
                t0 = time.perf_counter()
                writer.write(req)
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 60)
                status = int(head.split(b" ", 2)[1])
                headers = dict(ln.split(b":", 1) for ln in head.split(b"\r\n")[1:] if b":" in ln)
                headers = {k.strip().lower(): v.strip() for k, v in headers.items()}
                body = await reader.readexactly(int(headers[b"content-length"]))
                stats["codes"][status] += 1
                if status == 429:
                    stats["t429"].append(time.perf_counter() - t0)
                    stats["retry_after"].add(headers.get(b"retry-after", b"").decode())
                    stats["types_429"].add(json.loads(body)["error"]["type"])
                    await asyncio.sleep(0.25)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as e:
            stats["errors"].append(repr(e))
        finally:
            writer.close()

    async def run():
        end = time.perf_counter() + seconds
        await asyncio.gather(*(one(end) for _ in range(clients)))

    t0 = time.perf_counter()
    asyncio.run(run())
    stats["wall"] = time.perf_counter() - t0
    return stats


def overload(port: int, clients: int, seconds: float) -> dict:
    p = start_probe(port, seconds)
    try:
        load = hammer(port, clients, seconds)
    finally:
        out, _ = p.communicate(timeout=seconds + 60)
    lat = sorted(json.loads(out))
    return {"clients": clients, "seconds": seconds, "load_codes": load["codes"], "load_errors": len(load["errors"]),
            "probe_429s": len(lat), **_ms(lat)}


# -- 413 ---------------------------------------------------------------------------------
def too_large(port: int, size: int, declared: int) -> float:
    """Seconds from the end of the head (Content-Length: declared) to a 413."""
    status, _, body, dt = send_raw(port, http_post("/v1/embed", b"", declared), b"x" * size, timeout=30)
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
    server = start_server(a.models, "fp32", {"HEADWISE_MAX_QUEUE": str(MAX_QUEUE),
                                             "HEADWISE_MAX_BODY_BYTES": str(limit)})
    port = server.port
    try:
        result = {"machine": {"cores": os.cpu_count(), "loadavg_before": os.getloadavg()[0]},
                  "payload_413": payloads(port, limit, a.rounds),
                  "overload_429": overload(port, a.clients, a.seconds)}
    finally:
        server.stop(60)
    o, pl = result["overload_429"], result["payload_413"]
    result["targets"] = {
        "413 p99 < 100 ms (1 byte over)": pl["limit_plus_1"]["p99_ms"] < 100,
        "413 p99 < 100 ms (10 MB)": pl["ten_mb"]["p99_ms"] < 100,
        "429 p99 < 50 ms under overload": o["p99_ms"] is not None and o["p99_ms"] < 50,
        "no errors under overload": o["load_errors"] == 0 and set(o["load_codes"]) <= {200, 429},
    }
    from headwise.export import cpu as cpu_info

    result["cpu"] = cpu_info.label()  # a figure holds only for the CPU that measured it
    text = json.dumps(result, indent=2)
    print(text)
    if a.out:
        a.out.write_text(text + "\n")
    return 0 if all(result["targets"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
