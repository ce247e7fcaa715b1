"""The engine process alone, fed by synthetic front-ends (issue 37): how much of the device's
time its own threads waste. The real `EngineCore` (headwise/service/backends/core.py) serves a
device that holds each run for a set time with the GIL released (`time.sleep`, as onnxruntime
releases it while a graph runs on CUDA); F feeder processes, each keeping K runs of R rows in
flight over the real transport, stand in for the front-ends.

    python -m bench.engine_feed                                  # 8 feeders x 4 runs of 8 rows, 0.7 ms a run
    python -m bench.engine_feed --feeders 4 --inflight 16 --rows 1 --configs "base=;s02=PROBE_SWITCH_MS=0.2"

For an A/B against another commit, run it from each tree's clone in turn (it serves the
`EngineCore` of the tree it runs in). PROBE_SWITCH_MS in a configuration's environment sets the
engine process's switch interval (sys.setswitchinterval).

Per configuration (NAME=VAR=VALUE,...: the engine process's environment), repetitions
alternating: rows/s, device runs/s, rows per run, the device-busy share (held time / wall),
the mean time a run's `backend.run` took beyond its hold (the wait to take the GIL back when
the hold ended: on the H200 a 0.7 ms run took ~10 ms beside a thread reading small messages,
bench/results/engine-runs-h200.md), the idle time between runs, and the engine's CPU per row.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import zmq

from bench.alternate import turns
from bench.args import key_values
from bench.facts import machine_facts
from bench.process_mode import counters
from bench.standin_engine import COUNTERS
from headwise.service.backends import wire

MODEL, ROLE, OUTPUT = "m", "embed", "sentence_embedding"


class HeldDevice:
    """A backend whose every run holds `hold_ms` (+ `per_row_us` a row) with the GIL released
    and answers zeros; it counts its runs, rows, held time and the time `run` took."""

    provider, precision, variants = "cuda", "fp16", {ROLE: "fast.fp16"}

    def __init__(self, hold_ms: float, per_row_us: float, d_model: int = 384):
        self.hold_ms, self.per_row_us, self.d_model = hold_ms, per_row_us, d_model
        self.lock = threading.Lock()
        self.runs = self.rows = 0
        self.hold_s = self.run_s = self.gap_s = 0.0
        self._last: float | None = None

    def run(self, role: str, feeds: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        t0 = time.perf_counter()
        b = feeds["input_ids"].shape[0]
        hold = (self.hold_ms + self.per_row_us * b / 1000) / 1000
        end = t0 + hold
        while (left := end - time.perf_counter()) > 0:
            time.sleep(left)
        out = {OUTPUT: np.zeros((b, self.d_model), np.float32)}
        t1 = time.perf_counter()
        with self.lock:
            if self._last is not None:
                self.gap_s += t0 - self._last
            self._last = t1
            self.runs, self.rows = self.runs + 1, self.rows + b
            self.hold_s, self.run_s = self.hold_s + hold, self.run_s + (t1 - t0)
        return out

    def snapshot(self) -> dict:
        t = os.times()
        with self.lock:
            return {"runs": self.runs, "rows": self.rows, "hold_s": self.hold_s, "run_s": self.run_s,
                    "gap_s": self.gap_s, "cpu_s": t.user + t.system}


def engine_child(address: str, hold_ms: float, per_row_us: float, ready, stop) -> None:
    """The engine process: the real EngineCore over a HeldDevice, as engine_process starts it."""
    from headwise.service.backends.core import EngineCore

    if os.environ.get("PROBE_SWITCH_MS"):
        sys.setswitchinterval(float(os.environ["PROBE_SWITCH_MS"]) / 1000)
    dev = HeldDevice(hold_ms, per_row_us)
    core = EngineCore({MODEL: dev}, address, max_batch_size=64, max_batch_tokens=64 * 512)
    core.start(os.getpid())
    ctx = zmq.Context()
    rep = ctx.socket(zmq.REP)
    rep.bind(address + COUNTERS)
    ready.set()
    while not stop.is_set():
        if rep.poll(100):
            rep.recv()
            rep.send(json.dumps(dev.snapshot()).encode())
    rep.close(linger=0)
    core.stop(5)


def run_feeds(rows: int, length: int) -> dict[str, np.ndarray]:
    """A run's feeds, as a front-end sends them: `rows` rows of `length` token ids."""
    ids = np.full((rows, length), 1000, np.int64)
    return {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}


def feeder(address: str, inflight: int, rows: int, length: int, seconds: float, start, out) -> None:
    """One front-end's traffic: `inflight` runs of `rows` rows always in flight until `seconds`
    after `start` is set; puts (rows answered, runs answered) on `out`."""
    ctx = zmq.Context()
    send = ctx.socket(zmq.DEALER)
    send.connect(address)
    recv = ctx.socket(zmq.PULL)
    reply_to = f"ipc://{tempfile.mkdtemp()}/r.sock"
    recv.bind(reply_to)
    feeds = run_feeds(rows, length)
    seq = 0

    def one() -> None:
        nonlocal seq
        seq += 1
        run = wire.Run(seq, reply_to, MODEL, ROLE, [OUTPUT], wire.specs(feeds), [])
        send.send_multipart(wire.encode(run, feeds), copy=False)

    start.wait()
    deadline = time.perf_counter() + seconds
    for _ in range(inflight):
        one()
    done_rows = done_runs = 0
    while time.perf_counter() < deadline:
        if not recv.poll(50):
            continue
        msg, _ = wire.decode(recv.recv_multipart(copy=False))
        if isinstance(msg, wire.Result):
            done_rows, done_runs = done_rows + rows, done_runs + 1
        one()
    out.put((done_rows, done_runs))
    ctx.destroy(linger=0)


def measure(env: dict, a) -> dict:
    """One repetition of one configuration: a fresh engine process (its environment `env`),
    `a.feeders` feeders for a.warm + a.seconds; figures over the measured seconds."""
    mpc = mp.get_context("spawn")
    address = f"ipc://{tempfile.mkdtemp()}/engine.sock"
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the spawned engine inherits it
    try:
        ready, stop = mpc.Event(), mpc.Event()
        eng = mpc.Process(target=engine_child, args=(address, a.hold_ms, a.per_row_us, ready, stop))
        eng.start()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    if not ready.wait(60):
        eng.kill()
        raise RuntimeError("the engine process did not start")
    start, out = mpc.Event(), mpc.Queue()
    feeders = [mpc.Process(target=feeder, args=(address, a.inflight, a.rows, a.length, a.warm + a.seconds, start, out))
               for _ in range(a.feeders)]
    for f in feeders:
        f.start()
    time.sleep(0.5)
    start.set()
    time.sleep(a.warm)
    c0, t0 = counters(address), time.perf_counter()
    time.sleep(a.seconds)
    c1, t1 = counters(address), time.perf_counter()
    for f in feeders:
        f.join(a.seconds + 30)
    stop.set()
    eng.join(30)
    wall = t1 - t0
    d = {k: c1[k] - c0[k] for k in c0}
    runs = d["runs"] or 1
    return {"rows_per_s": d["rows"] / wall, "runs_per_s": d["runs"] / wall, "rows_per_run": d["rows"] / runs,
            "busy": d["hold_s"] / wall, "late_ms": (d["run_s"] - d["hold_s"]) / runs * 1000,
            "gap_ms": d["gap_s"] / runs * 1000, "cpu_us_per_row": d["cpu_s"] / max(d["rows"], 1) * 1e6}


COLUMNS = [("rows_per_s", "rows/s", ",.0f"), ("runs_per_s", "runs/s", ",.0f"), ("rows_per_run", "rows a run", ".1f"),
           ("busy", "device busy", ".0%"), ("late_ms", "run beyond its hold ms", ".3f"),
           ("gap_ms", "idle between runs ms", ".3f"), ("cpu_us_per_row", "engine CPU µs/row", ".1f")]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.engine_feed", description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", default="base=", help="NAME=VAR=VALUE,...;NAME=... the engine's environment")
    ap.add_argument("--feeders", type=int, default=8)
    ap.add_argument("--inflight", type=int, default=4, help="runs each feeder keeps in flight")
    ap.add_argument("--rows", type=int, default=8, help="rows a run")
    ap.add_argument("--length", type=int, default=22)
    ap.add_argument("--hold-ms", type=float, default=0.7, help="the device's time a run")
    ap.add_argument("--per-row-us", type=float, default=0.0, help="and a row")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--warm", type=float, default=1)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    configs = []
    for spec in a.configs.split(";"):
        name, _, rest = spec.partition("=")
        configs.append((name, key_values([x for x in rest.split(",") if x])))
    results: dict[str, list[dict]] = {name: [] for name, _ in configs}
    for rep, order in turns(configs, a.reps):
        for name, env in order:
            r = measure(env, a)
            results[name].append(r)
            print(f"rep {rep + 1} {name:10} " + "  ".join(f"{h} {format(r[k], f)}" for k, h, f in COLUMNS), flush=True)
    facts = machine_facts("cpu")
    lines = ["# The engine process alone, fed by synthetic front-ends", "",
             f"Command: `python -m bench.engine_feed {' '.join(sys.argv[1:] if argv is None else argv)}`", "",
             *(f"- {k}: {v}" for k, v in facts.items() if k in ("cpu", "cores usable (affinity, cgroup)", "python",
                                                                "git commit")),
             f"- {a.feeders} feeders x {a.inflight} runs in flight x {a.rows} rows of {a.length} tokens; the device "
             f"holds a run {a.hold_ms} ms + {a.per_row_us} µs a row; medians of {a.reps} repetitions of {a.seconds} s, "
             "configurations alternating", "",
             "| config | " + " | ".join(h for _, h, _ in COLUMNS) + " |", "|---|" + "---|" * len(COLUMNS)]
    for name, rs in results.items():
        med = {k: statistics.median(r[k] for r in rs) for k, _, _ in COLUMNS}
        lines.append(f"| {name} | " + " | ".join(format(med[k], f) for k, _, f in COLUMNS) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        Path(a.out).write_text(text)


if __name__ == "__main__":
    main()
