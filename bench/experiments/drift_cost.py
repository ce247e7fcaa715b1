"""What head-drift sampling (HEADWISE_ATTENTION_SAMPLE) costs plain /v1/embed traffic on a CPU:
`headwise serve` with sampling off and with each rate asked, side by side, loaded in turn by
wrk (closed loop, one request shape), the order of the servers turned round every repetition
so that the machine's drift hits all alike.

    python -m bench.experiments.drift_cost --models /tmp/models-hs            # 0 vs 0.01 (and 0.1), ≈ 3 min
    python -m bench.experiments.drift_cost --models /tmp/models-hs --rates 0.01 --reps 7 --out bench/results/drift-cost.md

Per server and repetition: requests/s, the server's CPU per request (user + system, /proc),
p50/p99, and for a sampling server the samples measured and dropped in that cell
(headwise_head_samples_total). The cost of a rate is 1 − the median over repetitions of
(its requests/s ÷ the unsampled server's in the same repetition); a larger rate measures the
cost per sample with less noise ("cost per 1% of requests measured"). First, in process, what
a sampled input's attention run costs next to a plain input's embed run (the service's own
sessions), which that cost follows from.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

from bench.facts import load_average, machine_facts
from bench.http import measure
from bench.server import start_headwise
from bench.workload import Workload, find_package

SAMPLES = re.compile(r'^headwise_head_samples_total\{[^}]*outcome="(\w+)"[^}]*\} (\S+)$', re.M)


def sample_counts(metrics: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for outcome, value in SAMPLES.findall(metrics):
        out[outcome] = out.get(outcome, 0.0) + float(value)
    return out


def cell(server, body: bytes, clients: int, seconds: float) -> dict:
    before = sample_counts(server.metrics_text())
    s = measure(server, "/v1/embed", body, clients, seconds)
    after = sample_counts(server.metrics_text())
    if s.errors or not s.requests:
        raise RuntimeError(f"{server.name}: {s.errors} errors, {s.requests} requests\n{server.tail()}")
    return {"rps": s.throughput, "cpu_us": s.extra["server_cpu_us_per_input"], "p50": s.p50, "p99": s.p99,
            "requests": s.requests,
            **{k: after.get(k, 0.0) - before.get(k, 0.0) for k in ("measured", "dropped", "failed")}}


def graph_costs(models: str, precision: str, tokens: int, reps: int = 40) -> dict[str, float]:
    """In process, with the service's own sessions (OrtBackend): ms per input of the embed
    graph at batch 16 (what a plain input costs a saturated server) and of the attention graph
    at batch 1 and at DriftSampler's batch (what a sampled input costs), the cells interleaved,
    medians."""
    import numpy as np

    from headwise.service.backends.onnxruntime import OrtBackend
    from headwise.service.engine.analytics.drift import BATCH
    from headwise.service.package import load_package
    from headwise.service.settings import Settings

    w = Workload(find_package(models))
    backend = OrtBackend(load_package(w.dir), Settings(provider="cpu", precision=precision))
    ids, types = w.ids(tokens)

    def feeds(n: int) -> dict:
        return {"input_ids": np.tile(ids, (n, 1)), "attention_mask": np.ones((n, len(ids)), np.int64),
                "token_type_ids": np.tile(types, (n, 1))}

    cells = {"embed, batch 16": ("embed", 16, ["sentence_embedding"]), "attention, batch 1": ("attention", 1, ["attentions"]),
             f"attention, batch {BATCH}": ("attention", BATCH, ["attentions"])}
    times: dict[str, list[float]] = {k: [] for k in cells}
    for _ in range(3):
        for role, n, outputs in cells.values():
            backend.run(role, feeds(n), outputs)
    for _ in range(reps):
        for k, (role, n, outputs) in cells.items():
            f = feeds(n)
            t0 = time.perf_counter()
            backend.run(role, f, outputs)
            times[k].append((time.perf_counter() - t0) * 1000 / n)
    return {k: statistics.median(v) for k, v in times.items()}


def run(models: str, rates: list[float], precision: str, tokens: int, clients: int, reps: int,
        seconds: float) -> tuple[dict[float, list[dict]], str]:
    w = Workload(find_package(models))
    text = w.text(tokens)
    body = json.dumps({"inputs": text}).encode()
    arms = [0.0, *rates]
    servers = {r: start_headwise(w.dir, precision, "cpu", Path("/tmp"), {"HEADWISE_ATTENTION_SAMPLE": str(r)},
                                 name=f"headwise-drift-{r}") for r in arms}
    got: dict[float, list[dict]] = {r: [] for r in arms}
    try:
        for s in servers.values():
            s.wait_ready()
            measure(s, "/v1/embed", body, clients, 2)  # warm: connections, arenas, caches
        for rep in range(reps):
            order = arms if rep % 2 == 0 else arms[::-1]
            for r in order:
                got[r].append(cell(servers[r], body, clients, seconds))
                print(f"rep {rep + 1} rate {r:g}: {got[r][-1]}", flush=True)
    finally:
        for s in servers.values():
            s.stop()
    return got, text


def report(got: dict[float, list[dict]], args, text: str, load_before: str, took: float,
           graphs: dict[str, float]) -> str:
    facts = machine_facts("cpu")
    base = got[0.0]
    lines = [f"# head-drift sampling cost: `{Path(args.models).name}`, {args.precision}, CPU, HTTP", ""]
    lines += [f"- {k}: {v}" for k, v in facts.items()]
    lines += [f"- load average before: {load_before}; after: {load_average()}",
              f"- workload: POST /v1/embed, one text of {args.tokens} tokens ({text[:40]!r}...), {args.clients} "
              f"wrk connections, closed loop, {args.seconds:g} s per cell, {args.reps} repetitions, servers "
              f"alternating (order reversed every repetition); {took / 60:.1f} min in all",
              "- command: `PYTHONPATH=. python -m bench.experiments.drift_cost " + " ".join(args.argv) + "`", "",
              "| HEADWISE_ATTENTION_SAMPLE | requests/s (median) | ÷ unsampled, same rep (median, IQR) | cost | "
              "CPU µs/request (median) | p50 ms | p99 ms | samples measured/s | dropped/s | requests measured | "
              "cost per 1% of requests measured |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for rate, cells in got.items():
        ratios = [c["rps"] / b["rps"] for c, b in zip(cells, base, strict=True)]
        ratio = statistics.median(ratios)
        wall = args.seconds * len(cells)
        share = sum(c["measured"] for c in cells) / sum(c["requests"] for c in cells)
        per_percent = "—" if rate == 0 or not share else f"{(1 - ratio) / (share * 100) * 100:+.2f}%"
        q1, _, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else (ratio, ratio, ratio)
        lines.append(
            f"| {rate:g} | {statistics.median(c['rps'] for c in cells):.0f} | {ratio:.3f} ({q1:.3f}–{q3:.3f}) | "
            f"{'—' if rate == 0 else f'{(1 - ratio) * 100:+.1f}%'} | "
            f"{statistics.median(c['cpu_us'] for c in cells):.0f} | {statistics.median(c['p50'] for c in cells):.2f} | "
            f"{statistics.median(c['p99'] for c in cells):.2f} | {sum(c['measured'] for c in cells) / wall:.1f} | "
            f"{sum(c['dropped'] for c in cells) / wall:.1f} | {share * 100:.2f}% | {per_percent} |")
    plain = graphs["embed, batch 16"]
    lines += ["", f"In process, the service's sessions ({args.precision} embed variant; the attention graph is fp32), "
              f"{args.tokens} tokens, cells interleaved, medians:", "",
              "| graph run | ms per input | × a plain input at batch 16 |", "|---|---|---|"]
    lines += [f"| {k} | {v:.3f} | {v / plain:.2f} |" for k, v in graphs.items()]
    lines += ["", "Every repetition (requests/s; CPU µs/request):", ""]
    lines += ["| rep | " + " | ".join(f"{r:g}" for r in got) + " |", "|---|" + "---|" * len(got)]
    for i in range(args.reps):
        lines.append(f"| {i + 1} | " + " | ".join(f"{got[r][i]['rps']:.0f}; {got[r][i]['cpu_us']:.0f}" for r in got)
                     + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.experiments.drift_cost", description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="models")
    ap.add_argument("--rates", type=float, nargs="+", default=[0.01, 0.1])
    ap.add_argument("--precision", default="fp32", choices=["fp32", "int8"])
    ap.add_argument("--tokens", type=int, default=20)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--out", help="also write the markdown report here")
    args = ap.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else argv
    load_before, t0 = load_average(), time.monotonic()
    graphs = graph_costs(args.models, args.precision, args.tokens)
    got, text = run(args.models, args.rates, args.precision, args.tokens, args.clients, args.reps, args.seconds)
    md = report(got, args, text, load_before, time.monotonic() - t0, graphs)
    print(md)
    if args.out:
        Path(args.out).write_text(md)


if __name__ == "__main__":
    main()
