"""A/B two (or more) servers side by side in one sitting: for each repetition and each server,
the in-process ceiling at batch 16, then `headwise serve` from that tree with that
environment, loaded by wrk. Servers alternate, so the machine's drift hits all alike.

    python -m bench.ab --models /tmp/bench-models --precision int8 \\
        before=/path/to/worktree  after=.  spin=.:HEADWISE_THREADS=2,OTHER=1

A server is NAME=TREE[:KEY=VALUE,...]: TREE is a checkout whose `headwise.cli` is run (its own
.venv when it has one); the environment is added to a clean HEADWISE_* one. Prints every
repetition and the medians: inputs/s, ratio to the ceiling next to it, p50.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.ceiling import Ceiling
from bench.http import free_port, http, load
from bench.workload import Workload, find_package


def parse_server(spec: str) -> tuple[str, Path, dict]:
    name, _, rest = spec.partition("=")
    tree, _, env = rest.partition(":")
    return name, Path(tree).resolve(), dict(kv.split("=", 1) for kv in env.split(",") if kv)


def serve(tree: Path, package: Path, precision: str, env: dict, log: Path) -> tuple[subprocess.Popen, str]:
    python = tree / ".venv" / "bin" / "python"
    full = {k: v for k, v in os.environ.items() if not k.startswith("HEADWISE_")}
    full.update(HEADWISE_PRECISION=precision, HEADWISE_PROVIDER="cpu", **env)
    port = free_port()
    proc = subprocess.Popen([str(python if python.exists() else sys.executable), "-m", "headwise.cli", "serve",
                             "--models", str(package), "--host", "127.0.0.1", "--port", str(port),
                             "--log-level", "warning"], cwd=tree, env=full, stdout=log.open("wb"),
                            stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while http("GET", url + "/health/ready", timeout=2)[0] != 200:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"{tree}: the server did not get ready; see {log}")
        time.sleep(0.1)
    return proc, url


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("servers", nargs="+", help="NAME=TREE[:KEY=VALUE,...]")
    ap.add_argument("--models", default="models")
    ap.add_argument("--precision", default="int8", choices=["fp32", "int8"])
    ap.add_argument("--tokens", type=int, default=20)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3)
    a = ap.parse_args()
    servers = [parse_server(s) for s in a.servers]
    w = Workload(find_package(a.models))
    ceiling = Ceiling(w)
    body = w.body(a.tokens)
    got: dict[str, list] = {name: [] for name, _, _ in servers}
    for rep in range(a.reps):
        for name, tree, env in servers:
            ceil = ceiling.measure(a.precision, a.tokens, 16, seconds=1.5).throughput
            proc, url = serve(tree, w.dir, a.precision, env, Path(f"/tmp/headwise-ab-{name}.log"))
            try:
                load(url + "/v1/embed", body, a.clients, 1)
                res = load(url + "/v1/embed", body, a.clients, a.seconds)
            finally:
                proc.terminate()
                proc.wait(30)
            rate = res["requests"] / (res["duration_us"] / 1e6)
            got[name].append((rate / ceil, rate, res["p50"] / 1000))
            print(f"rep {rep} {name:12s} ceiling b16 {ceil:7.0f}/s  headwise {rate:6.0f}/s  "
                  f"{100 * rate / ceil:5.1f}%  p50 {res['p50'] / 1000:.2f} ms", flush=True)
    print(f"medians: {a.precision}, {a.tokens} tokens, {a.clients} clients, {a.reps} repetitions")
    for name, rows in got.items():
        ratio, rate, p50 = (statistics.median(r[i] for r in rows) for i in range(3))
        print(f"  {name:12s} {100 * ratio:5.1f}% of the ceiling  {rate:6.0f} inputs/s  p50 {p50:.2f} ms")


if __name__ == "__main__":
    main()
