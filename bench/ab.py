"""A/B two (or more) servers side by side in one sitting: for each repetition and each server,
the in-process ceiling at batch 16, then `headwise serve` from that tree with that
environment, loaded by wrk. Servers alternate, so the machine's drift hits all alike.

    python -m bench.ab --models /tmp/bench-models --precision int8 \\
        before=/path/to/worktree  after=.  spin=.:HEADWISE_THREADS=2,OTHER=1

A server is NAME=TREE[:KEY=VALUE,...]: TREE is a checkout whose `headwise.cli` is run (its own
.venv when it has one); the environment is added to a clean HEADWISE_* one. Prints every
repetition and the medians: inputs/s, ratio to the ceiling next to it, p50, and the wall
time per batch outside onnxruntime (the server's own metrics).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from bench.alternate import alternate
from bench.ceiling import Ceiling
from bench.http import load, server_stats
from bench.server import start_headwise
from bench.workload import Workload, find_package


def parse_server(spec: str) -> tuple[str, Path, dict]:
    name, _, rest = spec.partition("=")
    tree, _, env = rest.partition(":")
    return name, Path(tree).resolve(), dict(kv.split("=", 1) for kv in env.split(",") if kv)


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
    servers = {name: (tree, env) for name, tree, env in (parse_server(s) for s in a.servers)}
    w = Workload(find_package(a.models))
    ceiling = Ceiling(w)
    body = w.body(a.tokens)

    def one(name: str, rep: int) -> tuple[float, float, float, float]:
        """The ceiling, then this server: (share of the ceiling, inputs/s, p50 ms, gap ms)."""
        tree, env = servers[name]
        ceil = ceiling.measure(a.precision, a.tokens, 16, seconds=1.5).throughput
        server = start_headwise(w.dir, a.precision, "cpu", Path("/tmp"), env, tree=tree, name=f"headwise-ab-{name}")
        try:
            server.wait_ready()
            load(server.url + "/v1/embed", body, a.clients, 1)
            before = server.metrics_text()
            res = load(server.url + "/v1/embed", body, a.clients, a.seconds)
            stats = server_stats(before, server.metrics_text(), res["duration_us"] / 1e6)
        finally:
            server.stop()
        rate = res["requests"] / (res["duration_us"] / 1e6)
        gap = stats["infer_ms"] * (1 / stats["ort_busy"] - 1)  # wall time per batch outside onnxruntime
        print(f"rep {rep} {name:12s} ceiling b16 {ceil:7.0f}/s  headwise {rate:6.0f}/s  "
              f"{100 * rate / ceil:5.1f}%  p50 {res['p50'] / 1000:.2f} ms  batch {stats['mean_batch']:.1f}  "
              f"run {stats['infer_ms']:.2f} ms + gap {gap:.2f} ms", flush=True)
        return rate / ceil, rate, res["p50"] / 1000, gap

    got = alternate(list(servers), a.reps, one, order="same")
    from headwise.export import cpu as cpu_info

    print(f"medians: {a.precision}, {a.tokens} tokens, {a.clients} clients, {a.reps} repetitions, "
          f"on {cpu_info.label()}")
    for name, rows in got.items():
        ratio, rate, p50, gap = (statistics.median(r[i] for r in rows) for i in range(4))
        print(f"  {name:12s} {100 * ratio:5.1f}% of the ceiling  {rate:6.0f} inputs/s  p50 {p50:.2f} ms  "
              f"gap {gap:.2f} ms per batch")


if __name__ == "__main__":
    main()
