"""Inputs per second when each request carries several inputs (what a GPU needs to be kept
busy from Python): one `headwise serve`, wrk or loadgen driving `/v1/embed` with bodies of
1, 8 and 32 inputs at several client counts. Medians of --reps repetitions.

    python -m bench.experiments.client_batch PACKAGE [--provider cuda] [--precision fp16] [--tokens 20,128]
        [--inputs 1,8,32] [--clients 16,64] [--workers 1] [--seconds 3] [--reps 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from bench.args import ints
from bench.http import load, sample_from
from bench.server import start_headwise
from bench.workload import Workload
from headwise.export import cpu as cpu_info


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.experiments.client_batch")
    p.add_argument("package")
    p.add_argument("--provider", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--precision", default="fp32")
    p.add_argument("--tokens", type=ints, default=[20, 128])
    p.add_argument("--inputs", type=ints, default=[1, 8, 32])
    p.add_argument("--clients", type=ints, default=[16, 64])
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--seconds", type=float, default=3)
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args(argv)
    w = Workload(args.package)
    server = start_headwise(w.dir, args.precision, args.provider, Path(tempfile.mkdtemp()),
                            {"HEADWISE_WORKERS": str(args.workers)})
    rows = []
    try:
        server.wait_ready()
        for tokens in args.tokens:
            for n in args.inputs:
                body = json.dumps({"inputs": [w.text(tokens)] * n}).encode()
                for clients in args.clients:
                    samples = [sample_from(load(server.url + "/v1/embed", body, clients, args.seconds), n)
                               for _ in range(args.reps)]
                    rate = statistics.median(s.throughput for s in samples)
                    p50 = statistics.median(s.p50 for s in samples)
                    errors = sum(s.errors for s in samples)
                    rows.append((tokens, n, clients, rate, p50, errors))
                    print(f"{tokens:4} tok  {n:3} inputs/request  {clients:3} clients: {rate:9.1f} inputs/s  "
                          f"p50 {p50:7.2f} ms  errors {errors}", flush=True)
    finally:
        server.stop()
    print(f"\n# client batching: {w.name}, {args.provider} {args.precision}, {args.workers} worker(s)\n")
    print(f"CPU: {cpu_info.label()}\n")
    print("| tokens | inputs per request | clients | inputs/s (median) | request p50 ms | errors |")
    print("|---|---|---|---|---|---|")
    for tokens, n, clients, rate, p50, errors in rows:
        print(f"| {tokens} | {n} | {clients} | {rate:,.0f} | {p50:.2f} | {errors} |")


if __name__ == "__main__":
    main()
