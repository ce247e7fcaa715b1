"""A device stand-in for benchmarks (issue 27), never served to users: a backend that holds each
batch for the time the H100 took for it, so that any CPU machine can measure how busy headwise
keeps a GPU.

    python -m bench.standin --models /tmp/models/all-minilm-l6-v2            # every cell, 3 reps
    python -m bench.standin --models DIR --lengths 20 --clients 64 --inputs 32 --reps 1 --seconds 2

`StandIn` has the surface the service expects of a backend (headwise/service/backends/onnxruntime.py:
`Backend`): provider "cuda" and precision "fp16", so the service batches as on a GPU (pads to
length buckets, warms up at its largest batches). Its `run` builds outputs of the right shapes
(random sentence embeddings, zero hidden states, uniform attention), then sleeps (which releases the GIL) until the batch's time in the table has
passed since it was called, and counts that time: device-busy share = held time / wall time.

The harness (bench/standin_run.py) serves it in the real app under uvicorn, as `headwise serve`
does, loads it with wrk and reports, per cell, the share of the time the device would have been
busy, with the server's throughput, latency, mean batch and CPU per input.
"""

from __future__ import annotations

import bisect
import itertools
import json
import os
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
H100 = HERE / "data" / "h100-ceiling.json"
HOST = "127.0.0.1"
COUNTERS_PATH = "/bench/standin"  # the stand-in's counters, in the bench child's app only


def _line(xs: list[float], ys: list[float], x: float) -> float:
    """Piecewise linear through (xs, ys), xs ascending: flat below xs[0]; beyond xs[-1] the
    last segment's slope where it rises, else flat."""
    if x <= xs[0] or len(xs) == 1:
        return ys[0] if x <= xs[0] else ys[-1]
    i = min(bisect.bisect_left(xs, x), len(xs) - 1)
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    slope = (y1 - y0) / (x1 - x0)
    return y1 + max(slope, 0.0) * (x - x1) if x > x1 else y0 + slope * (x - x0)


class HoldTable:
    """Milliseconds one call of `batch` inputs padded to `tokens` takes on the device, per role
    ("embed", "attention"; any other role reads "embed"), from measured (tokens, batch) points.

    Per measured length, the times are made non-decreasing in batch (a larger batch never
    takes less time, so never less than batch 1) and joined linearly; between two measured
    lengths the result is linear in tokens. Below the smallest measured batch or length the time
    is that point's; beyond the largest, the last segment's slope goes on where it rises, else
    the time stays flat: a batch or length past the measurements is held no longer than a
    straight line says, so busy shares there lean low rather than high."""

    def __init__(self, roles: dict[str, dict[int, dict[int, float]]], about: str = ""):
        self.roles = roles  # role → tokens → batch → p50 ms
        self.about = about

    @classmethod
    def load(cls, path: str | Path = H100) -> HoldTable:
        """A table file (bench/data/h100-ceiling.json's layout)."""
        data = json.loads(Path(path).read_text())
        roles: dict[str, dict[int, dict[int, float]]] = {}
        for role, spec in data["roles"].items():
            for p in spec["points"]:
                roles.setdefault(role, {}).setdefault(int(p["tokens"]), {})[int(p["batch"])] = float(p["p50_ms"])
        sources = "; ".join(data.get("sources", {}).values())
        return cls(roles, f"{data.get('device', '?')}, from {Path(path).name}: {sources}")

    def ms(self, role: str, batch: int, tokens: int) -> float:
        by_length = self.roles.get(role) or self.roles["embed"]
        lengths = sorted(by_length)
        at_each = []
        for n in lengths:
            batches = sorted(by_length[n])
            rising = list(itertools.accumulate((by_length[n][b] for b in batches), max))
            at_each.append(_line(batches, rising, batch))
        return _line(lengths, at_each, tokens)


class Counters:
    """What stand-ins have held, summed over threads and models: calls, inputs, the table's time
    (`hold_s`, the device's busy time) and the time inside `run` (`run_s`: the hold plus
    however late the sleeping thread woke)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._totals = {"calls": 0, "inputs": 0, "hold_s": 0.0, "run_s": 0.0}

    def add(self, inputs: int, hold_s: float, run_s: float) -> None:
        with self._lock:
            t = self._totals
            t["calls"] += 1
            t["inputs"] += inputs
            t["hold_s"] += hold_s
            t["run_s"] += run_s

    def snapshot(self) -> dict:
        with self._lock:
            return dict(self._totals)


class Instant:
    """The Backend surface (headwise/service/backends/onnxruntime.py), answering at once with outputs of
    the right shapes: random sentence embeddings, zero hidden states, uniform attention."""

    provider, precision = "cpu", "fp32"

    def __init__(self, package, settings):
        self.package = package
        self.settings = settings
        self.variants = {"embed": "fast"}
        self._pooled = np.empty((0, package.d_model), np.float32)

    def run(self, role: str, feeds: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        b, t = feeds["input_ids"].shape
        return self.answer(b, t, outputs)

    def answer(self, b: int, t: int, outputs: list[str]) -> dict[str, np.ndarray]:
        """The outputs asked for, for a batch of b inputs padded to t tokens."""
        pkg = self.package
        att = (b, pkg.n_layers, pkg.n_heads, t, t)
        made = {"sentence_embedding": lambda: self._rows(b),
                "last_hidden_state": lambda: np.zeros((b, t, pkg.d_model), np.float32),
                "attentions": lambda: np.full(att, 1 / t, np.float32),
                "attentions_f16": lambda: np.full(att, 1 / t, np.float16)}
        return {name: made[name]() for name in outputs}

    def _rows(self, b: int) -> np.ndarray:
        """b random rows, from one array made once (and again only when a batch outgrows it)."""
        if b > len(self._pooled):
            self._pooled = np.random.default_rng(0).random((max(b, 256), self.package.d_model), dtype=np.float32)
        return self._pooled[:b]


class StandIn(Instant):
    """A GPU stand-in: the package's fp16 (and attention) variants on "cuda", each batch held
    for its time in `table` (default: the H100's), counted in `counters`."""

    provider, precision = "cuda", "fp16"

    def __init__(self, package, settings, table: HoldTable | None = None, counters: Counters | None = None):
        super().__init__(package, settings)
        # the graph's name labels the server's metrics only: a package without fp16 still serves
        self.variants = {"embed": "fast.fp16" if "fast.fp16" in package.variants else "fast"}
        if "attention" in package.variants:
            self.variants["attention"] = "attention"
        self.table = table or HoldTable.load()
        self.counters = counters or Counters()

    def run(self, role: str, feeds: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        """The outputs, returned once the batch's time has passed since the call (building them
        counts towards it, as the device's copy back to the host does)."""
        t0 = time.perf_counter()
        b, t = feeds["input_ids"].shape
        hold = self.table.ms(role, b, t) / 1000
        out = self.answer(b, t, outputs)
        left = hold - (time.perf_counter() - t0)
        if left > 0:
            time.sleep(left)
        self.counters.add(b, hold, time.perf_counter() - t0)
        return out


# -- serving (the child process) ------------------------------------------------------------
def headwise_app(models: str, factory):
    """The real app with `factory`'s backend, as `headwise serve` builds it: with the fast path
    (HEADWISE_BENCH_PLAIN=1: the plain app)."""
    from headwise.service.api.app import create_app
    from headwise.service.server import fastpath
    from headwise.service.settings import Settings

    app = create_app(Settings(models_dir=models), backend_factory=factory, settle_heap=True)
    return app if os.environ.get("HEADWISE_BENCH_PLAIN") else fastpath.Entry(fastpath.install(app))


def run_uvicorn(app, port: int, lifespan: str = "on") -> None:
    """uvicorn with the options `headwise serve` uses (HEADWISE_BENCH_HTTP=httptools: uvicorn's
    own protocol instead of headwise's)."""
    import uvicorn

    from headwise.service.server.http_protocol import protocol
    from headwise.service.settings import load_settings

    http = os.environ.get("HEADWISE_BENCH_HTTP") or protocol(load_settings())
    uvicorn.run(app, host=HOST, port=port, loop="uvloop", http=http, access_log=False, proxy_headers=False,
                log_level="warning", lifespan=lifespan)


async def send_json(send, body: bytes, status: int = 200) -> None:
    """One complete JSON answer on an ASGI `send`."""
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]})
    await send({"type": "http.response.body", "body": body})


def with_counters(app, counters: Counters):
    """`app` with GET COUNTERS_PATH answering the counters, in front of everything else."""

    async def outer(scope, receive, send):
        if scope["type"] == "http" and scope["path"] == COUNTERS_PATH:
            await send_json(send, json.dumps(counters.snapshot()).encode())
            return
        await app(scope, receive, send)

    return outer


def serve(models: str, port: int, table_path: str | Path = H100) -> None:
    """The bench child: headwise with stand-ins of `table_path`, their counters at COUNTERS_PATH."""
    table, counters = HoldTable.load(table_path), Counters()

    def factory(package, settings):
        return StandIn(package, settings, table, counters)

    run_uvicorn(with_counters(headwise_app(models, factory), counters), port)


if __name__ == "__main__":
    from bench.standin_run import main

    main()
