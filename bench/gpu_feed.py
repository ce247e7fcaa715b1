"""How well `headwise serve` feeds a device: server configurations side by side in one sitting,
alternating per repetition, each loaded by wrk with 1 or more inputs per request at several
client counts, against the in-process ceiling measured in the same repetition.

    python -m bench.gpu_feed PACKAGE --provider cuda --precision fp16 \\
        before=HEADWISE_PIPELINE=off,HEADWISE_SWITCH_INTERVAL_MS=5  after=  workers4=HEADWISE_WORKERS=4 \\
        [--tokens 20,128] [--inputs 1,32] [--clients 1,64,256] [--seconds 3] [--reps 3] [--out DIR]
    python -m bench.gpu_feed PACKAGE --layouts inproc:8,process:8,process:12 \\
        --cells 20x1x256,20x32x64,128x1x256,128x32x64,128x1x1 --reps 3 --max-minutes 6   # issue 37
        [--route native|openai]   # /v1/embed (vectors, tokens and offsets; the default) or /v1/embeddings

A configuration is NAME=KEY=VALUE,... (HEADWISE_* settings; empty: the defaults); a layout
(`--layouts`) is `inproc:W` (HEADWISE_ENGINE=inproc, W whole-server workers) or `process:F`
(HEADWISE_ENGINE=process, F front-ends), named inprocW / processF. `--cells TxIxC,...` lists the
cells (tokens × inputs per request × clients) instead of every combination of --tokens, --inputs
and --clients. Per cell: inputs/s, p50 and p99 per request, the device's mean batch and busy
share (the server's /metrics: in process mode the engine's own series), the server's CPU per
input (the server and every process under it, /proc), and the share of the ceiling at the batch
nearest the device's and at its best batch (`bench.ceiling`, IOBinding on CUDA). Per
configuration and repetition, the GPU memory its processes hold (nvidia-smi) and the device's
memory in use (NVML, `headwise_gpu_memory_used_bytes`). Medians over repetitions; writes
<out>/<prefix>-<name>.md after every repetition; `--max-minutes` starts no repetition that would
end past it (judged by the repetitions so far).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.alternate import turns
from bench.args import ints, key_values, strs
from bench.ceiling import Ceiling
from bench.facts import machine_facts
from bench.http import load, sample_from, server_stats
from bench.noise import TICK, proc_ticks
from bench.server import start_headwise
from bench.stats import median
from bench.workload import ROUTES, Workload

CEILING_BATCHES = (1, 8, 32, 64)
TREE = "@tree"  # in a configuration's settings: the checkout its server runs from (not a setting)
MIB = 2**20


def parse_config(spec: str) -> tuple[str, dict]:
    name, _, rest = spec.partition("=")
    return name, key_values(rest.split(","))


def layout_config(spec: str) -> tuple[str, dict]:
    """`inproc:8` → ("inproc8", 8 whole-server workers); `process:12` → ("process12", 12 front-ends).
    `process:12@TREE`: the same from another checkout (`tree_of`), named "process12@" and the
    tree's COMMIT file's first word, else its folder's name."""
    spec, at, tree = spec.partition("@")
    if at:
        name, env = layout_config(spec)
        if not tree:
            raise ValueError(f"a layout's tree is a folder: {spec}@TREE")
        commit = Path(tree) / "COMMIT"
        words = commit.read_text().split() if commit.is_file() else []
        label = words[0] if words else Path(tree).name
        return f"{name}@{label}", {**env, TREE: str(Path(tree).resolve())}
    mode, _, n = spec.partition(":")
    if mode not in ("inproc", "process") or not n.isdigit() or int(n) < 1:
        raise ValueError(f"a layout is inproc:WORKERS or process:FRONTENDS, not {spec!r}")
    key = "HEADWISE_WORKERS" if mode == "inproc" else "HEADWISE_FRONTENDS"
    return f"{mode}{n}", {"HEADWISE_ENGINE": mode, key: n}


def parse_cells(spec: str) -> list[tuple[int, int, int]]:
    """"20x1x256,128x1x1" → [(tokens, inputs per request, clients), ...]."""
    cells = []
    for item in strs(spec):
        parts = item.lower().split("x")
        if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise ValueError(f"a cell is TOKENSxINPUTSxCLIENTS (20x32x64), not {item!r}")
        cells.append(tuple(int(p) for p in parts))
    return cells


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


def server_gpu_mib(mem: dict[int, float], own: int) -> tuple[float, int]:
    """(MiB, processes) the server holds: every process on the GPU but this one (whose ceiling
    session stays loaded); one server runs at a time. (nan, 0) without nvidia-smi."""
    theirs = [m for p, m in mem.items() if p != own]
    return (sum(theirs), len(theirs)) if theirs else (math.nan, 0)


def metric_total(text: str, name: str) -> float:
    """A counter's or gauge's value summed over its label sets; nan when it is not there."""
    found = re.findall(rf"^{re.escape(name)}(?:\{{[^}}]*\}})?\s+([0-9.eE+-]+)$", text, re.M)
    return sum(float(v) for v in found) if found else math.nan


def device_stats(before: str, after: str, wall_s: float) -> dict:
    """The device's view of a cell: in process mode the engine's runs (its stacked front-end
    batches) and busy seconds, else the server's batches and onnxruntime time."""
    out = server_stats(before, after, wall_s)
    out["batch"], out["busy"] = out.get("mean_batch", math.nan), out.get("ort_busy", math.nan)
    out["stacked"] = math.nan
    runs0, runs1 = (metric_total(x, "headwise_engine_stacked_runs_count") for x in (before, after))
    if not math.isnan(runs1) and runs1 > (0 if math.isnan(runs0) else runs0):
        runs = runs1 - (0 if math.isnan(runs0) else runs0)
        inputs = out.get("mean_batch", math.nan) * out.get("calls", math.nan)  # front-end batches' inputs
        out["batch"] = inputs / runs
        s0, s1 = (metric_total(x, "headwise_engine_stacked_runs_sum") for x in (before, after))
        out["stacked"] = (s1 - (0 if math.isnan(s0) else s0)) / runs  # front-end batches in a device run
        busy0, busy1 = (metric_total(x, "headwise_engine_busy_seconds_total") for x in (before, after))
        out["busy"] = (busy1 - (0 if math.isnan(busy0) else busy0)) / wall_s if wall_s > 0 else math.nan
    return out


def family_ticks(pid: int) -> dict[int, int]:
    """CPU ticks of a process and every process under it (process mode's children run in
    sessions of their own, outside its process group), by pid."""
    out, todo = {}, [pid]
    while todo:
        p = todo.pop()
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
        out[p] = proc_ticks(p)
    return out


def ceilings(w: Workload, provider: str, variant: str, tokens: list[int], seconds: float) -> dict:
    """(tokens, batch) → the in-process ceiling's inputs/s for this repetition."""
    c = Ceiling(w, provider)
    return {(t, b): c.measure(variant, t, b, seconds).throughput for t in tokens for b in CEILING_BATCHES}


def nearest_ceiling(ceiling: dict, tokens: int, batch: float) -> tuple[int, float]:
    """The ceiling at the largest measured batch ≤ the device's mean batch (at least 1)."""
    batch = 1.0 if math.isnan(batch) else batch
    b = max([x for x in CEILING_BATCHES if x <= max(1.0, batch)] or [1])
    return b, ceiling[(tokens, b)]


def cell(server, w: Workload, tokens: int, n: int, clients: int, seconds: float, warm: float = 0,
         settle: float = 0, route: str = "native") -> dict:
    """One repetition of one cell, its requests in `route`'s shape (ROUTES); `settle` seconds
    first, so that requests a previous load left in flight do not count in this one's batches
    and CPU."""
    url, body = server.url + ROUTES[route], w.body(tokens, inputs=n, shape=route)
    if warm > 0:
        load(url, body, clients, warm)
    time.sleep(settle)
    before, t0 = server.metrics_text(), family_ticks(server.proc.pid)
    res = load(url, body, clients, seconds)
    t1, after = family_ticks(server.proc.pid), server.metrics_text()
    s = sample_from(res, n)
    done = s.requests * n
    cpu = sum(t - t0.get(p, 0) for p, t in t1.items()) / TICK / done * 1e6 if done else math.nan
    return {"rate": s.throughput, "p50": s.p50, "p99": s.p99, "errors": s.errors, "cpu_us": cpu,
            **device_stats(before, after, res.get("duration_us", 0) / 1e6)}


def gpu_name() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20).stdout.strip() or "-"
    except (OSError, subprocess.SubprocessError):
        return "-"


def should_stop(elapsed_s: float, reps_done: int, max_minutes: float | None) -> bool:
    """Whether one more repetition, as long as the mean one so far, would end past max_minutes."""
    if max_minutes is None or reps_done == 0:
        return False
    return elapsed_s + elapsed_s / reps_done > max_minutes * 60


def run(args, on_rep=None) -> tuple[list[dict], dict]:
    w = Workload(args.package)
    configs = args.config_list
    tokens = sorted({c[0] for c in args.cell_list})
    rows, memory, start = [], {name: [] for name, _ in configs}, time.monotonic()
    for rep, order in turns(configs, args.reps):  # who goes first alternates
        if should_stop(time.monotonic() - start, rep, args.max_minutes):
            print(f"stopping after {rep} repetitions: another would end past --max-minutes {args.max_minutes}")
            break
        ceiling = ceilings(w, args.provider, args.precision, tokens, args.ceiling_seconds)
        for name, env in order:
            tree = env.get(TREE)
            settings = {k: v for k, v in env.items() if k != TREE}
            server = start_headwise(w.dir, args.precision, args.provider, Path(tempfile.mkdtemp()), settings,
                                    tree=Path(tree) if tree else None, name=name)
            try:
                server.wait_ready()
                for t, n, clients in args.cell_list:
                    r = cell(server, w, t, n, clients, args.seconds, args.warm, args.settle, args.route)
                    b, ref = nearest_ceiling(ceiling, t, r["batch"])
                    best = max(ceiling[(t, x)] for x in CEILING_BATCHES)
                    r.update(config=name, rep=rep, tokens=t, inputs=n, clients=clients, ceiling_batch=b,
                             vs_ceiling=r["rate"] / ref if ref else math.nan,
                             vs_best=r["rate"] / best if best else math.nan)
                    rows.append(r)
                    print(f"rep {rep + 1} {name:10} {t:4} tok {n:3} in/req {clients:4} cl: "
                          f"{r['rate']:9.1f} inputs/s p50 {r['p50']:7.2f} ms p99 {r['p99']:7.2f} ms device batch "
                          f"{r['batch']:5.1f} busy {r['busy']:4.0%} cpu {r['cpu_us']:6.1f} µs/input  "
                          f"{r['vs_ceiling']:5.1%} of b{b}, {r['vs_best']:5.1%} of best", flush=True)
                mib, procs = server_gpu_mib(gpu_memory_mib(), os.getpid())
                device = metric_total(server.metrics_text(), "headwise_gpu_memory_used_bytes") / MIB
                memory[name].append({"server_mib": mib, "processes": procs, "device_mib": device})
            finally:
                server.stop()
        if on_rep:
            on_rep(rows, memory)
    return rows, memory


def _f(x: float, spec: str) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def report(args, rows: list[dict], memory: dict) -> str:
    facts = machine_facts(args.provider)
    names = [name for name, _ in args.config_list]
    reps = len({r["rep"] for r in rows})
    lines = [f"# How well headwise feeds the device: {args.name}", "",
             f"Command: `python -m bench.gpu_feed {' '.join(args.argv)}`", "",
             f"- CPU: {facts.get('cpu', '?')}; cores usable: {facts.get('cores usable (affinity, cgroup)', '?')}",
             f"- GPU: {gpu_name()}; provider {args.provider}, {args.precision}; requests to {ROUTES[args.route]}",
             f"- git commit: {facts.get('git commit', '?')}; date (UTC): {time.strftime('%Y-%m-%d %H:%M', time.gmtime())}",
             f"- {reps} of {args.reps} repetitions, configurations alternating; medians. Configurations: "
             + "; ".join(f"`{n}` ({','.join(f'{k}={v}' for k, v in env.items()) or 'defaults'})"
                         for n, env in args.config_list),
             "- device batch, front-end batches a run and busy: the engine's runs in process mode "
             "(`headwise_engine_stacked_runs`, "
             "`headwise_engine_busy_seconds_total`), else the server's batches and onnxruntime time "
             "(summed over workers: above 100% when they overlap); server CPU: every process of the server", "",
             "| config | tokens | inputs/request | clients | inputs/s | p50 ms | p99 ms | device batch "
             "| front-end batches a run | busy | server CPU µs/input | vs ceiling (batch) | vs best ceiling | errors |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    cells = list(dict.fromkeys((r["tokens"], r["inputs"], r["clients"]) for r in rows))
    med: dict = {}
    for name in names:
        for c in cells:
            rs = [r for r in rows if r["config"] == name and (r["tokens"], r["inputs"], r["clients"]) == c]
            if not rs:
                continue
            m = med[(name, c)] = {k: median(r.get(k, math.nan) for r in rs)
                                  for k in ("rate", "p50", "p99", "batch", "stacked", "busy", "cpu_us", "vs_ceiling",
                                            "vs_best")}
            lines.append(f"| {name} | {c[0]} | {c[1]} | {c[2]} | {_f(m['rate'], ',.0f')} | {_f(m['p50'], '.2f')} | "
                         f"{_f(m['p99'], '.2f')} | {_f(m['batch'], '.1f')} | {_f(m['stacked'], '.1f')} | "
                         f"{_f(m['busy'], '.0%')} | "
                         f"{_f(m['cpu_us'], '.0f')} | {_f(m['vs_ceiling'], '.1%')} (b{rs[0]['ceiling_batch']}) | "
                         f"{_f(m['vs_best'], '.1%')} | {sum(r['errors'] for r in rs)} |")
    if len(names) > 1 and med:
        lines += ["", f"Inputs/s side by side (× {names[0]}):", "",
                  "| tokens | inputs/request | clients | " + " | ".join(names) + " |",
                  "|---|---|---|" + "---|" * len(names)]
        for c in cells:
            base = med.get((names[0], c), {}).get("rate", math.nan)
            vals = [med.get((n, c), {}).get("rate", math.nan) for n in names]
            lines.append(f"| {c[0]} | {c[1]} | {c[2]} | " + " | ".join(
                f"{_f(v, ',.0f')}" + (f" ({v / base:.2f}×)" if i and base > 0 and v >= 0 else "")
                for i, v in enumerate(vals))
                + " |")
    if any(not math.isnan(m[k]) for ms in memory.values() for m in ms for k in ("server_mib", "device_mib")):
        lines += ["", "GPU memory (MiB, median over repetitions, measured after each configuration's cells): the "
                  "server's processes (nvidia-smi; the harness's ceiling session left out) and the device's in use "
                  "(NVML, `headwise_gpu_memory_used_bytes`, the ceiling session included).", "",
                  "| config | server processes on the GPU | their memory MiB | device in use MiB |", "|---|---|---|---|"]
        for name, ms in memory.items():
            if ms:
                lines.append(f"| {name} | {max(m['processes'] for m in ms)} | "
                             f"{_f(median(m['server_mib'] for m in ms), ',.0f')} | "
                             f"{_f(median(m['device_mib'] for m in ms), ',.0f')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.gpu_feed", description=__doc__.split("\n\n")[0])
    p.add_argument("package")
    p.add_argument("configs", nargs="*", help="NAME=KEY=VALUE,... (HEADWISE_* settings)")
    p.add_argument("--layouts", type=strs, default=[], help="inproc:W,process:F,... (after the configurations)")
    p.add_argument("--provider", default="cuda", choices=["cpu", "cuda"])
    p.add_argument("--precision", default="fp16", choices=["fp16", "fp32", "int8"])
    p.add_argument("--tokens", type=ints, default=[20, 128])
    p.add_argument("--inputs", type=ints, default=[1, 32])
    p.add_argument("--clients", type=ints, default=[1, 64, 256])
    p.add_argument("--cells", type=parse_cells, default=None, help="TxIxC,...: instead of tokens × inputs × clients")
    p.add_argument("--route", choices=sorted(ROUTES), default="native",
                   help="native /v1/embed (vectors, tokens and offsets) or OpenAI /v1/embeddings (vectors)")
    p.add_argument("--seconds", type=float, default=3)
    p.add_argument("--warm", type=float, default=0, help="seconds of load before each cell, not measured")
    p.add_argument("--settle", type=float, default=0.5, help="seconds idle before each cell's measurement")
    p.add_argument("--ceiling-seconds", type=float, default=1)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--max-minutes", type=float, default=None)
    p.add_argument("--name", default="gpu")
    p.add_argument("--prefix", default="gpu-feed", help="the file name's start: <prefix>-<name>.md")
    p.add_argument("--out", default="bench/results")
    args = p.parse_args(argv)
    args.argv = argv if argv is not None else sys.argv[1:]
    try:
        args.config_list = [parse_config(c) for c in args.configs] + [layout_config(x) for x in args.layouts]
    except ValueError as e:
        p.error(str(e))
    if not args.config_list:
        p.error("no configuration: name some (NAME=KEY=VALUE,...) or --layouts")
    if len({n for n, _ in args.config_list}) < len(args.config_list):
        p.error("two configurations have the same name")
    args.cell_list = args.cells or [(t, n, c) for t in args.tokens for n in args.inputs for c in args.clients]
    out = Path(args.out) / f"{args.prefix}-{args.name}.md"
    out.parent.mkdir(parents=True, exist_ok=True)

    def write(rows, memory):  # after every repetition: a run ended at its budget keeps what it measured
        out.write_text(report(args, rows, memory))
        print(f"wrote {out}", flush=True)

    print("configurations: " + "; ".join(f"{n} ({','.join(f'{k}={v}' for k, v in env.items()) or 'defaults'})"
                                         for n, env in args.config_list)
          + "; cells (tokens x inputs x clients): " + ", ".join("x".join(map(str, c)) for c in args.cell_list),
          flush=True)
    rows, memory = run(args, on_rep=write)
    if not rows:
        sys.exit("gpu_feed: no repetition ran")
    text = report(args, rows, memory)
    out.write_text(text)
    print("\n" + text + f"\nwrote {out}")


if __name__ == "__main__":
    main()
