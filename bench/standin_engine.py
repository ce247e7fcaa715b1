"""An engine process for benchmarks (bench/process_mode.py), never served to users: the real
`EngineCore` (headwise/service/backends/core.py) over the device stand-in (bench/standin.py)
instead of onnxruntime, so that process mode's front-ends and transport can be measured on any
CPU. `headwise serve`'s supervisor starts it in the engine's place:

    python -m bench.standin_engine --hold standin|instant [--table TIMES.json]

`instant` answers at once (a stub engine: what is measured is the front-ends and the
transport); `standin` holds each batch for the H100's time. Its counters (calls, inputs, held
time, time between runs, and the engine's own CPU) answer on a REP socket beside the engine's
address (`COUNTERS`), as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
import time

import zmq

from bench.standin import Counters, HoldTable, Instant, StandIn
from headwise.service.backends.core import EngineCore
from headwise.service.package import find_packages
from headwise.service.settings import load_settings

COUNTERS = ".counters"  # suffix of the counters socket's address


class Timed:
    """A backend wrapper that adds each run's inputs and wall time, and the gaps between runs,
    to the counters."""

    def __init__(self, backend, counters: Counters):
        self.backend, self.counters = backend, counters
        self.provider, self.precision, self.variants = backend.provider, backend.precision, backend.variants
        self.gap_s, self.runs, self._last = 0.0, 0, None
        self._lock = threading.Lock()

    def run(self, role, feeds, outputs):
        t0 = time.perf_counter()
        out = self.backend.run(role, feeds, outputs)
        t1 = time.perf_counter()
        with self._lock:
            if self._last is not None:
                self.gap_s += t0 - self._last
            self._last, self.runs = t1, self.runs + 1
        if isinstance(self.backend, StandIn):
            return out  # it counted itself, its hold included
        self.counters.add(feeds["input_ids"].shape[0], 0.0, t1 - t0)
        return out


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.standin_engine")
    ap.add_argument("--hold", choices=["standin", "instant"], default="standin")
    ap.add_argument("--table", default=None)
    a = ap.parse_args()
    settings = load_settings()
    counters = Counters()
    table = HoldTable.load(a.table) if a.table else HoldTable.load()
    backends = {}
    for pkg in find_packages(settings.models_dir):
        b = StandIn(pkg, settings, table, counters) if a.hold == "standin" else Instant(pkg, settings)
        if a.hold == "instant" and "attention" in pkg.variants:
            b.variants["attention"] = "attention"
        backends[pkg.name] = Timed(b, counters)
    core = EngineCore(backends, settings.engine_address, max_batch_size=settings.max_batch_size,
                      max_batch_tokens=settings.max_batch_tokens)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    core.start(os.getpid())
    ctx = zmq.Context()
    rep = ctx.socket(zmq.REP)
    rep.bind(settings.engine_address + COUNTERS)
    while not stop.is_set():
        if rep.poll(100):
            rep.recv()
            ticks = os.times()
            snap = {**counters.snapshot(), "gap_s": sum(b.gap_s for b in backends.values()),
                    "runs": sum(b.runs for b in backends.values()), "cpu_s": ticks.user + ticks.system}
            rep.send(json.dumps(snap).encode())
    rep.close(linger=0)
    core.stop(5)


if __name__ == "__main__":
    main()
