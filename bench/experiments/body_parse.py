"""The CPU a request body costs the server, in process: FastAPI's own body parameter
(`body: EmbedRequest`, json.loads then validate the dict) against service.api.body.json_body
(pydantic-core's JSON parser, one pass), each on the plain app and through the fast path
(server.fastpath: a route with a body parameter is not a plain-dependency route, so it falls
back to FastAPI's routing there).

    python -m bench.experiments.body_parse                     # 20000 requests per variant, 5 reps
    python -m bench.experiments.body_parse --n 5000 --reps 3

The app is minimal (the route answers a fixed Response), so the differences are parsing,
dependency solving and routing; the ASGI messages are driven directly, no HTTP, no uvicorn.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from fastapi import Depends, FastAPI
from starlette.responses import Response

from headwise.service.api.body import json_body
from headwise.service.api.schemas import EmbedRequest
from headwise.service.server.fastpath import direct_routes

TEXT = "The quick brown fox jumps over the lazy dog near the river bank today."
BODIES = {"short": {"inputs": TEXT},
          "batch32": {"inputs": [TEXT] * 32, "normalize": True, "output": "sentence"}}
ANSWER = Response(b"{}", media_type="application/json")


def fastapi_body_app() -> FastAPI:
    app = FastAPI()

    @app.post("/v1/embed")
    async def embed(body: EmbedRequest):
        return ANSWER

    return app


def json_body_app() -> FastAPI:
    app = FastAPI()

    @app.post("/v1/embed")
    async def embed(body: EmbedRequest = Depends(json_body(EmbedRequest))):
        return ANSWER

    return app


def scope() -> dict:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
            "scheme": "http", "path": "/v1/embed", "raw_path": b"/v1/embed", "query_string": b"",
            "root_path": "", "headers": [(b"host", b"x"), (b"content-type", b"application/json")],
            "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}


async def drive(asgi, body: bytes, n: int) -> float:
    """CPU µs per request over n requests (process time: this thread's work, no waiting)."""
    status = []

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        if message["type"] == "http.response.start":
            status.append(message["status"])

    for _ in range(200):  # warm: middleware stack built, caches filled
        await asgi(scope(), receive, send)
    status.clear()
    t0 = time.process_time()
    for _ in range(n):
        await asgi(scope(), receive, send)
    t1 = time.process_time()
    assert set(status) == {200}, set(status)
    return (t1 - t0) / n * 1e6


def variants() -> dict:
    plain_fastapi, plain_json = fastapi_body_app(), json_body_app()
    fast = direct_routes(json_body_app())
    assert ("POST", "/v1/embed") in fast and not direct_routes(fastapi_body_app())  # body params fall back
    return {"FastAPI body param, plain app (= under the fast path: falls back)": plain_fastapi,
            "json_body, plain app": plain_json,
            "json_body, fast path": fast[("POST", "/v1/embed")]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20000, help="requests per measurement")
    ap.add_argument("--reps", type=int, default=5, help="measurements per variant (the best is kept)")
    a = ap.parse_args()
    out = {}
    for body_name, payload in BODIES.items():
        body = json.dumps(payload).encode()
        for name, asgi in variants().items():
            best = min(asyncio.run(drive(asgi, body, a.n)) for _ in range(a.reps))
            out.setdefault(body_name, {})[name] = round(best, 1)
    print(json.dumps({"cpu_us_per_request": out, "n": a.n, "reps": a.reps,
                      "bodies": {k: len(json.dumps(v)) for k, v in BODIES.items()}}, indent=1))


if __name__ == "__main__":
    main()
