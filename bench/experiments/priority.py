"""Does analytics work slow plain traffic? (issue 31). Through real `headwise serve` processes
over HTTP, on one machine in one sitting:

- plain: one client sending `/v1/embed` of a short sentence, one request after another: its
  latencies alone, while the largest allowed occlusion runs, and while 16 of them are sent at
  once (the excess is refused with 429; each admitted one must equal the answer it gets alone);
- health: `/health/live` every 20 ms while `/v1/similarity` with explain at its size cap runs
  (1 source and 120 targets of 256 tokens).

    python -m bench.experiments.priority PACKAGE                           # the default lane
    python -m bench.experiments.priority PACKAGE --mode lane=.,HEADWISE_ANALYTICS_THREADS=1 \\
        --mode shared=.,HEADWISE_ANALYTICS_THREADS=0 --mode before=/tmp/headwise-29dc194
    python -m bench.experiments.priority PACKAGE --phases alone,one       # fewer phases

A mode is NAME=TREE[,VAR=VALUE...]: the server runs from that source tree (a clone of another
commit, for an A/B) with those settings. Modes alternate phase by phase. Prints a markdown
report with the machine's facts (bench/facts.py); medians and p99 in ms.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench.experiments.analytics_cost import WORDS, free_port
from bench.facts import load_average, machine_facts

SHORT = "A man is playing a guitar on the stage tonight."
PHASES = ("idle", "alone", "one", "sixteen", "explain")


@dataclass
class Mode:
    name: str
    tree: Path
    env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> Mode:
        name, _, rest = text.partition("=")
        tree, *pairs = rest.split(",")
        return cls(name, Path(tree or ".").resolve(), dict(p.split("=", 1) for p in pairs))


class Server:
    def __init__(self, mode: Mode, package: str):
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("HEADWISE_")}
        env.update(HEADWISE_PROVIDER="cpu", HEADWISE_PRECISION="fp32", PYTHONPATH=str(mode.tree), **mode.env)
        self.log = Path(tempfile.mkstemp(prefix="priority-", suffix=".log")[1])
        with open(self.log, "wb") as fh:
            self.proc = subprocess.Popen([sys.executable, "-m", "headwise.cli", "serve", "--models", package,
                                          "--port", str(self.port)], env=env, cwd=mode.tree,
                                         stdout=fh, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"headwise serve exited: {self.log.read_text()[-2000:]}")
            try:
                if httpx.get(self.url + "/health/ready", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        self.stop()
        raise SystemExit("server not ready in 180 s")

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        self.log.unlink(missing_ok=True)


def text_of(client: httpx.Client, tokens: int) -> str:
    """A text of exactly `tokens` tokens, special tokens included."""
    text = " ".join(WORDS[i % len(WORDS)] for i in range(tokens - 2))
    n = len(client.post("/v1/tokenize", json={"inputs": text}).json()["data"][0]["ids"])
    assert n == tokens, (n, tokens)
    return text


def plain_loop(url: str, stop: threading.Event, seconds: float | None = None) -> list[tuple[float, float]]:
    """One client, /v1/embed of SHORT one after another until `stop` (or `seconds`): (when it
    was sent, seconds from the loop's start; latency) per request."""
    times = []
    start = time.perf_counter()
    end = time.monotonic() + seconds if seconds else float("inf")
    with httpx.Client(base_url=url, timeout=300) as c:
        while not stop.is_set() and time.monotonic() < end:
            t0 = time.perf_counter()
            r = c.post("/v1/embed", json={"inputs": SHORT})
            times.append((t0 - start, time.perf_counter() - t0))
            r.raise_for_status()
    return times


def summary(sent: list[tuple[float, float]]) -> dict:
    s = sorted(lat for _, lat in sent)
    worst = sorted(sent, key=lambda x: -x[1])[:3]
    return {"n": len(s), "p50": 1000 * statistics.median(s), "p99": 1000 * s[max(0, int(0.99 * len(s)) - 1)],
            "p99.9": 1000 * s[max(0, int(0.999 * len(s)) - 1)], "max": 1000 * s[-1], "slowest": [(round(at, 2), round(1000 * lat, 1)) for at, lat in worst]}


def occlusions(url: str, text: str, n: int):
    """A function that sends n occlusions of `text` at once → (status, effects, seconds) each.
    Its clients are made now: making one takes milliseconds of this process's GIL, which
    the plain client running beside would count as the server's latency."""
    clients = [httpx.Client(base_url=url, timeout=900) for _ in range(n)]

    def one(c):
        with c:
            t0 = time.perf_counter()
            r = c.post("/v1/occlusion", json={"input": text})
            return r.status_code, r.json().get("effects") if r.status_code == 200 else None, time.perf_counter() - t0

    def send():
        with cf.ThreadPoolExecutor(n) as pool:
            return list(pool.map(one, clients))
    return send


def with_plain(url: str, work) -> tuple[dict, object]:
    """Run `work()` while one plain client loops; the plain latencies while it ran."""
    stop = threading.Event()
    with cf.ThreadPoolExecutor(1) as pool:
        plain = pool.submit(plain_loop, url, stop)
        time.sleep(0.5)  # the client is in its stride (the slowest requests' times count from here - 0.5 s)
        try:
            out = work()
        finally:
            stop.set()
        return summary(plain.result()), out


def health_during(url: str, body: dict) -> tuple[dict, float, int]:
    """/health/live every 20 ms while `body` goes to /v1/similarity: its latencies, the request's
    seconds and status."""
    done = threading.Event()
    lat = []

    def probe():
        start = time.perf_counter()
        with httpx.Client(base_url=url, timeout=60) as c:
            while not done.is_set():
                t0 = time.perf_counter()
                c.get("/health/live")
                lat.append((t0 - start, time.perf_counter() - t0))
                time.sleep(0.02)

    th = threading.Thread(target=probe)
    th.start()
    try:
        with httpx.Client(base_url=url, timeout=900) as c:
            t0 = time.perf_counter()
            r = c.post("/v1/similarity", json=body)
            took = time.perf_counter() - t0
    finally:
        done.set()
        th.join()
    return summary(lat), took, r.status_code


def close(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.experiments.priority")
    p.add_argument("package")
    p.add_argument("--mode", action="append", help="NAME=TREE[,HEADWISE_X=V...]; default: this tree as it is")
    p.add_argument("--phases", default=",".join(PHASES))
    p.add_argument("--seconds", type=float, default=15, help="of plain traffic alone")
    p.add_argument("--tokens", type=int, default=255, help="of the occluded input (255: the largest allowed)")
    args = p.parse_args(argv)
    modes = [Mode.parse(m) for m in args.mode or ["this=."]]
    phases = args.phases.split(",")
    results: dict[str, dict[str, object]] = {m.name: {} for m in modes}
    load_before = load_average()
    for phase in phases:
        for mode in modes:  # alternating: drift hits every mode alike
            srv = Server(mode, args.package)
            try:
                results[mode.name][phase] = run_phase(phase, srv.url, args)
                results[mode.name][phase]["rss_mib"] = round(srv.rss_mib())
            finally:
                srv.stop()
            print(f"{mode.name} {phase}: {results[mode.name][phase]}", file=sys.stderr, flush=True)
    report(modes, phases, results, args, load_before)


def run_phase(phase: str, url: str, args) -> object:
    with httpx.Client(base_url=url, timeout=300) as c:
        text = text_of(c, args.tokens)
        if phase in ("one", "sixteen"):
            t0 = time.perf_counter()
            r = c.post("/v1/occlusion", json={"input": text})  # the answer alone, for the check
            occlusion_alone_s = time.perf_counter() - t0
            r.raise_for_status()
            alone = r.json()["effects"]
        if phase == "explain":
            long = text_of(c, 256)
            body = {"source": long, "targets": [long] * 120, "explain": True, "top_k": 10}
    if phase == "alone":
        return summary(plain_loop(url, threading.Event(), args.seconds))
    if phase == "idle":  # the server's memory after warm-up and a few requests
        return {}
    if phase in ("one", "sixteen"):
        n = 1 if phase == "one" else 16
        plain, got = with_plain(url, occlusions(url, text, n))
        codes = [s for s, _, _ in got]
        admitted = [(e, t) for s, e, t in got if s == 200]
        return {"plain": plain, "codes": {c: codes.count(c) for c in sorted(set(codes))},
                "occlusion_alone_s": round(occlusion_alone_s, 1),
                "analytics_s": [round(t, 1) for _, t in admitted],
                "max_diff_from_alone": max((close(e, alone) for e, _ in admitted), default=None)}
    if phase == "explain":
        health, took, status = health_during(url, body)
        return {"health": health, "explain_s": round(took, 1), "status": status}
    raise SystemExit(f"unknown phase {phase!r}")


def report(modes, phases, results, args, load_before) -> None:
    print(f"# plain traffic beside analytics: {Path(args.package).name}, fp32, CPU\n")
    for k, v in machine_facts("cpu").items():
        print(f"- {k}: {v}")
    print(f"- load average before: {load_before}; after: {load_average()}")
    print(f"- command: python -m bench.experiments.priority {' '.join(sys.argv[1:])}")
    for m in modes:
        print(f"- mode {m.name}: tree {m.tree}, {m.env or 'defaults'}")
    print(f"\nPlain: one client, /v1/embed of one short sentence, requests one after another. Occlusion: "
          f"an input of {args.tokens} tokens ({args.tokens + 1} rows).\n")
    print("| mode | phase | plain p50 ms | p99 | p99.9 | max | requests | p50 × alone | p99 × alone | max × p50 alone "
          "| analytics |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for m in modes:
        res = results[m.name]
        base = res.get("alone")
        for phase in phases:
            r = res.get(phase)
            if r is None:
                continue
            if phase == "idle":
                print(f"| {m.name} | idle: server RSS {r['rss_mib']} MiB | | | | | | | | | |")
                continue
            if phase == "explain":
                h = r["health"]
                print(f"| {m.name} | explain at cap: /health/live | {h['p50']:.1f} | {h['p99']:.1f} | {h['p99.9']:.1f} | "
                      f"{h['max']:.1f} | {h['n']} | | | | explain {r['explain_s']} s, status {r['status']}; slowest "
                      f"(s after start, ms): {h['slowest']} |")
                continue
            s = r if phase == "alone" else r["plain"]
            ratio = (f"{s['p50'] / base['p50']:.2f} | {s['p99'] / base['p99']:.2f}" if base and phase != "alone"
                     else " | ") + (f" | {s['max'] / base['p50']:.1f}" if base else " | ")
            extra = f"slowest (s after start, ms): {s['slowest']}; RSS after {r['rss_mib']} MiB"
            if phase != "alone":
                extra = (f"statuses {r['codes']}, admitted took {r['analytics_s']} s (one alone "
                         f"{r['occlusion_alone_s']} s), max |effect − alone| "
                         f"{r['max_diff_from_alone']}; {extra}")
            print(f"| {m.name} | {phase} | {s['p50']:.1f} | {s['p99']:.1f} | {s['p99.9']:.1f} | {s['max']:.1f} | "
                  f"{s['n']} | {ratio} | {extra} |")


if __name__ == "__main__":
    main()
