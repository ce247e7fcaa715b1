"""The server's own cost per request, without the model: the real app under uvicorn (the
options `headwise serve` uses), its backend replaced by one that answers at once, loaded with
wrk; reports requests/s and the server's CPU per request (user + system, from /proc).

    python -m bench.overhead --models models                 # /v1/embed, 16 clients, 5 s
    python -m bench.overhead --models models --route /embed  # TEI's embed route (or /v1/embeddings)
    python -m bench.overhead --models models --floor         # a bare ASGI app: uvicorn's floor

What is left is HTTP, routing, parsing, tokenising, batching and the JSON answer: the part of a
request that the CPU spends outside onnxruntime (bench/results/experiments-cpu.md, session 3).
Linux only (/proc); needs wrk.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from bench.http import cpu_us_per_input, load, tree_ticks
from bench.server import Server, free_port

TEXT = "The quick brown fox jumps over the lazy dog near the river bank today."
BODIES = {"/v1/embed": {"inputs": TEXT}, "/embed": {"inputs": TEXT}, "/v1/embeddings": {"input": TEXT}}


def _serve(models: str, port: int, floor: bool) -> None:  # the child process
    from bench.standin import Instant, headwise_app, run_uvicorn, send_json

    if floor:
        async def app(scope, receive, send):
            if scope["type"] != "http":
                return
            more = True
            while more:
                more = (await receive()).get("more_body", False)
            await send_json(send, b'{"ok": true}')
    else:
        app = headwise_app(models, Instant)  # as `headwise serve` runs it, the backend answering at once
    run_uvicorn(app, port, lifespan="off" if floor else "on")


def measure(models: str, clients: int, seconds: float, floor: bool, route: str = "/v1/embed") -> dict:
    port = free_port()
    argv = [sys.executable, "-m", "bench.overhead", "--serve", str(port), "--models", models]
    server = Server("overhead", argv + (["--floor"] if floor else []), dict(os.environ), port,
                    "/" if floor else "/health/ready", Path(tempfile.gettempdir()))
    try:
        server.wait_ready(120)
        body = json.dumps(BODIES[route]).encode()
        load(server.url + route, body, clients, 1)  # warm
        t0 = tree_ticks(server)
        res = load(server.url + route, body, clients, seconds)
        t1 = tree_ticks(server)
    finally:
        server.stop()
    n = res["requests"]
    return {"requests_per_s": round(n / (res["duration_us"] / 1e6)),
            "server_cpu_us_per_request": round(cpu_us_per_input(t0, t1, n), 1),
            "p50_ms": res["p50"] / 1000, "errors": res["status"], "clients": clients,
            "app": "bare ASGI" if floor else "headwise, instant backend", "route": route}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="models", help="a folder with one package (its tokenizer is used)")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--floor", action="store_true", help="a bare ASGI app instead of headwise")
    ap.add_argument("--route", default="/v1/embed", choices=sorted(BODIES), help="the route loaded")
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        _serve(a.models, a.serve, a.floor)
        return
    from headwise.export import cpu as cpu_info

    print(f"bench.overhead on {cpu_info.label()}")
    runs = [measure(a.models, a.clients, a.seconds, a.floor, a.route) for _ in range(a.reps)]
    for r in runs:
        print(json.dumps(r))
    cpu = sorted(r["server_cpu_us_per_request"] for r in runs)[len(runs) // 2]
    rps = sorted(r["requests_per_s"] for r in runs)[len(runs) // 2]
    print(f"median of {len(runs)}: {rps} requests/s, {cpu} µs of server CPU per request ({runs[0]['app']}, "
          f"POST {a.route})")


if __name__ == "__main__":
    main()
