"""How well `headwise serve` feeds a device: server configurations side by side in one sitting,
alternating per repetition, each loaded by wrk with 1 or more inputs per request at several
client counts, against the in-process ceiling measured in the same repetition.

    python -m bench.gpu_feed PACKAGE --provider cuda --precision fp16 \\
        before=HEADWISE_PIPELINE=off,HEADWISE_SWITCH_INTERVAL_MS=5  after=  workers4=HEADWISE_WORKERS=4 \\
        [--tokens 20,128] [--inputs 1,32] [--clients 1,64,256] [--seconds 3] [--reps 3] [--out DIR]

A configuration is NAME=KEY=VALUE,... (HEADWISE_* settings; empty: the defaults). Per cell:
inputs/s, p50 and p99 per request, the server's mean batch and onnxruntime's busy share (its
/metrics), the server's CPU per input (its processes, /proc), and the share of the ceiling at
the batch nearest the server's (`bench.ceiling`, IOBinding on CUDA). With nvidia-smi, the GPU
memory each server process holds. Medians over repetitions; writes <out>/gpu-feed-<name>.md.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from bench.args import ints, key_values
from bench.ceiling import Ceiling
from bench.facts import machine_facts
from bench.http import measure, start_headwise
from bench.workload import Workload

CEILING_BATCHES = (1, 8, 32, 64)


def parse_config(spec: str) -> tuple[str, dict]:
    name, _, rest = spec.partition("=")
    return name, key_values(rest.split(","))


def gpu_memory_mib() -> dict[int, float]:
    """GPU memory used per process (pid → MiB), from nvidia-smi; empty without one."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    mem = {}
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit():
            mem[int(parts[0])] = float(parts[1]) if parts[1].replace(".", "").isdigit() else float("nan")
    return mem


def ceilings(w: Workload, provider: str, variant: str, tokens: list[int], seconds: float) -> dict:
    """(tokens, batch) → the in-process ceiling's inputs/s for this repetition."""
    c = Ceiling(w, provider)
    return {(t, b): c.measure(variant, t, b, seconds).throughput for t in tokens for b in CEILING_BATCHES}


def nearest_ceiling(ceiling: dict, tokens: int, batch: float) -> tuple[int, float]:
    """The ceiling at the largest measured batch ≤ the server's mean batch (at least 1)."""
    b = max([x for x in CEILING_BATCHES if x <= max(1.0, batch)] or [1])
    return b, ceiling[(tokens, b)]


def cell(server, w: Workload, tokens: int, n: int, clients: int, seconds: float) -> dict:
    s = measure(server, "/v1/embed", w.body(tokens, inputs=n), clients, seconds, inputs_per_request=n)
    return {"rate": s.throughput, "p50": s.p50, "p99": s.p99, "errors": s.errors,
            "cpu_us": s.extra.get("server_cpu_us_per_input", float("nan")), **s.extra}


def gpu_name() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20).stdout.strip() or "-"
    except (OSError, subprocess.SubprocessError):
        return "-"


def run(args) -> tuple[list[dict], dict]:
    w = Workload(args.package)
    configs = [parse_config(c) for c in args.configs]
    rows, memory = [], {}
    for rep in range(args.reps):
        ceiling = ceilings(w, args.provider, args.precision, args.tokens, args.ceiling_seconds)
        order = configs if rep % 2 == 0 else configs[::-1]  # alternate who goes first
        for name, env in order:
            server = start_headwise(w, args.precision, args.provider, Path(tempfile.mkdtemp()), env, name=name)
            try:
                server.wait_ready()
                for tokens in args.tokens:
                    for n in args.inputs:
                        for clients in args.clients:
                            r = cell(server, w, tokens, n, clients, args.seconds)
                            b, ref = nearest_ceiling(ceiling, tokens, r.get("mean_batch", 1))
                            r.update(config=name, rep=rep, tokens=tokens, inputs=n, clients=clients,
                                     ceiling_batch=b, vs_ceiling=r["rate"] / ref if ref else float("nan"))
                            rows.append(r)
                            print(f"rep {rep + 1} {name:10} {tokens:4} tok {n:3} in/req {clients:4} cl: "
                                  f"{r['rate']:9.1f} inputs/s p50 {r['p50']:7.2f} ms batch "
                                  f"{r.get('mean_batch', 0):5.1f} ORT busy {r.get('ort_busy', 0):4.0%} "
                                  f"cpu {r['cpu_us']:6.1f} µs/input  {r['vs_ceiling']:5.1%} of b{b}", flush=True)
                if rep == 0:
                    mem = gpu_memory_mib()
                    memory[name] = [mem[p] for p in sorted(mem)]
            finally:
                server.stop()
    return rows, memory


def report(args, rows: list[dict], memory: dict) -> str:
    facts = machine_facts(args.provider)
    lines = [f"# How well headwise feeds the device: {args.name}", "",
             f"Command: `python -m bench.gpu_feed {' '.join(args.argv)}`", "",
             f"- CPU: {facts.get('cpu', '?')}; cores usable: {facts.get('cores usable (affinity, cgroup)', '?')}",
             f"- GPU: {gpu_name()}; provider {args.provider}, {args.precision}",
             f"- git commit: {facts.get('git commit', '?')}; date (UTC): {time.strftime('%Y-%m-%d %H:%M', time.gmtime())}",
             f"- {args.reps} repetitions, configurations alternating; medians. Configurations: "
             + "; ".join(f"`{c}`" for c in args.configs), "",
             "| config | tokens | inputs/request | clients | inputs/s | p50 ms | p99 ms | server batch | ORT busy "
             "| server CPU µs/input | vs ceiling (batch) | errors |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    keys = sorted({(r["config"], r["tokens"], r["inputs"], r["clients"]) for r in rows},
                  key=lambda k: ([c.split("=")[0] for c in args.configs].index(k[0]), k[1], k[2], k[3]))
    for key in keys:
        rs = [r for r in rows if (r["config"], r["tokens"], r["inputs"], r["clients"]) == key]

        def med(k, rs=rs):
            vals = [r[k] for r in rs if k in r]
            return statistics.median(vals) if vals else float("nan")
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {med('rate'):,.0f} | {med('p50'):.2f} | "
                     f"{med('p99'):.2f} | {med('mean_batch'):.1f} | {med('ort_busy'):.0%} | {med('cpu_us'):.0f} | "
                     f"{med('vs_ceiling'):.1%} (b{rs[0]['ceiling_batch']}) | {sum(r['errors'] for r in rs)} |")
    if any(memory.values()):
        lines += ["", "GPU memory per server process (nvidia-smi, MiB, first repetition): "
                  + "; ".join(f"{name}: {', '.join(f'{m:.0f}' for m in ms)}" for name, ms in memory.items())]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.gpu_feed", description=__doc__.split("\n\n")[0])
    p.add_argument("package")
    p.add_argument("configs", nargs="+", help="NAME=KEY=VALUE,... (HEADWISE_* settings)")
    p.add_argument("--provider", default="cuda", choices=["cpu", "cuda"])
    p.add_argument("--precision", default="fp16", choices=["fp16", "fp32", "int8"])
    p.add_argument("--tokens", type=ints, default=[20, 128])
    p.add_argument("--inputs", type=ints, default=[1, 32])
    p.add_argument("--clients", type=ints, default=[1, 64, 256])
    p.add_argument("--seconds", type=float, default=3)
    p.add_argument("--ceiling-seconds", type=float, default=1)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--name", default="gpu")
    p.add_argument("--out", default="bench/results")
    args = p.parse_args(argv)
    args.argv = argv if argv is not None else __import__("sys").argv[1:]
    rows, memory = run(args)
    text = report(args, rows, memory)
    out = Path(args.out) / f"gpu-feed-{args.name}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print("\n" + text + f"\nwrote {out}")


if __name__ == "__main__":
    main()
