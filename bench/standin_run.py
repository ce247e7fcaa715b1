"""`python -m bench.standin`: headwise serving the device stand-in (bench/standin.py) in a child
process, loaded with wrk cell by cell (length × inputs per request × clients), repetitions
alternating over the cells; medians per cell, printed and written as a markdown report.

Per cell: requests/s, inputs/s (answered 200), p50/p99 (wrk), the mean server batch, the
device-busy share (the stand-in's held time / wrk's wall time; `in run()`: the time its calls
took, late wake-ups and waits for the GIL included, as the server's inference histogram sees
it), and the server's CPU per input (user + system ticks of its process group, from /proc).
Linux only; needs wrk (else bench/loadgen.py).
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench import standin
from bench.alternate import turns
from bench.args import ints, key_values
from bench.facts import load_average, machine_facts
from bench.http import cpu_us_per_input, load, probe, sample_from, tree_ticks
from bench.noise import ForeignLoad
from bench.report import facts_table
from bench.server import Server, clean_env, free_port, http
from bench.stats import median
from bench.workload import Workload

OUT = standin.HERE / "results" / "standin-h100.md"
ROUTE = "/v1/embed"
TARGET = (20, 64, 32, 0.60)  # issue 27: tokens, clients, inputs per request, device busy at least
COLUMNS = [("requests_per_s", "requests/s", 0), ("inputs_per_s", "inputs/s", 0), ("p50_ms", "p50 ms", 2),
           ("p99_ms", "p99 ms", 2), ("mean_batch", "server batch", 1), ("device_busy", "device busy", "%"),
           ("run_busy", "in run()", "%"), ("cpu_us_per_input", "server CPU µs/input", 0),
           ("others_cores", "others' cores", 2)]


@dataclass(frozen=True)
class Cell:
    tokens: int
    clients: int
    inputs: int  # per request


def plan(lengths: list[int], clients: list[int], inputs: list[int]) -> list[Cell]:
    return [Cell(t, c, n) for t in lengths for n in inputs for c in clients]


def start(models: Path, table: str, log_dir: Path, server_env: dict | None = None) -> Server:
    """The stand-in server (`python -m bench.standin --serve PORT`), ready; `server_env`: its
    HEADWISE_* settings (the defaults otherwise)."""
    port = free_port()
    argv = [sys.executable, "-m", "bench.standin", "--serve", str(port), "--models", str(models), "--table", table]
    server = Server("standin", argv, clean_env(server_env), port, "/health/ready", log_dir)
    server.wait_ready(180)
    return server


def snapshot(server: Server) -> dict:
    """The stand-in's counters and the CPU ticks of the server's process group (`ticks`), now."""
    status, body = http("GET", server.url + standin.COUNTERS_PATH, timeout=10)
    if status != 200:
        raise RuntimeError(f"{standin.COUNTERS_PATH} answered {status}")
    return {**json.loads(body), "ticks": tree_ticks(server)}


def figures(res: dict, before: dict, after: dict, inputs: int) -> dict:
    """One repetition of a cell from wrk's result and the server's snapshots around it."""
    wall = res["duration_us"] / 1e6
    d = {k: after[k] - before[k] for k in ("calls", "inputs", "hold_s", "run_s")}
    answered = res["requests"] - res.get("status", 0)
    s = sample_from(res)
    done = answered * inputs
    return {"requests_per_s": answered / wall, "inputs_per_s": done / wall, "p50_ms": s.p50, "p99_ms": s.p99,
            "mean_batch": d["inputs"] / d["calls"] if d["calls"] else math.nan,
            "device_busy": d["hold_s"] / wall, "run_busy": d["run_s"] / wall,
            "cpu_us_per_input": cpu_us_per_input(before["ticks"], after["ticks"], done), "errors": s.errors}


def measure(server: Server, body: bytes, cell: Cell, seconds: float, warm: float) -> dict:
    url = server.url + ROUTE
    if warm > 0:
        load(url, body, cell.clients, warm)
    before = snapshot(server)
    with ForeignLoad([server.proc.pid]) as others:
        res = load(url, body, cell.clients, seconds)
    return {**figures(res, before, snapshot(server), cell.inputs), "others_cores": others.cores}


def medians(runs: list[dict]) -> dict:
    out = {k: median(r[k] for r in runs) for k, _, _ in COLUMNS}
    out["errors"] = sum(r["errors"] for r in runs)
    out["reps"] = len(runs)
    return out


def _fmt(x: float, digits) -> str:
    if x is None or math.isnan(x):
        return "–"
    return f"{100 * x:.0f}%" if digits == "%" else f"{x:,.{digits}f}"


def table(results: dict[Cell, dict]) -> str:
    head = "| tokens | inputs/request | clients | " + " | ".join(h for _, h, _ in COLUMNS) + " | errors | reps |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for c, m in results.items():
        cols = " | ".join(_fmt(m[k], d) for k, _, d in COLUMNS)
        lines.append(f"| {c.tokens} | {c.inputs} | {c.clients} | {cols} | {m['errors']} | {m['reps']} |")
    return "\n".join(lines)


def verdict(results: dict[Cell, dict]) -> str:
    tokens, clients, inputs, bar = TARGET
    m = results.get(Cell(tokens, clients, inputs))
    what = f"device busy at {tokens} tokens, {clients} clients, {inputs} inputs per request"
    if m is None:
        return f"Target (issue 27): {what} ≥ {bar:.0%}: not measured in this run."
    met = "met" if m["device_busy"] >= bar else "missed"
    return f"Target (issue 27): {what} ≥ {bar:.0%}: **{_fmt(m['device_busy'], '%')}**, {met}."


def report(command: str, facts: dict, hold: standin.HoldTable, results: dict[Cell, dict], args) -> str:
    return "\n".join([
        "# headwise on the device stand-in", "", f"Command: `{command}`", "", facts_table(facts), "",
        verdict(results), "", f"Medians of {args.reps} repetitions of {args.seconds:g} s per cell (after "
        f"{args.warm:g} s of the same load unmeasured), the cells in turn, forwards then backwards.", "",
        table(results), "", "## Notes", "",
        f"- Stand-in: each batch held for the table's time ({hold.about}); interpolated as "
        "bench/standin.py's HoldTable says. The service pads to its length buckets, so 20-token inputs "
        "are held as 24-token batches.",
        "- `device busy` = the stand-in's held time / wrk's wall time; `in run()` = the time its calls "
        "took (the hold, plus the sleeping thread's late wake-up and its wait for the GIL) / the same "
        "wall time; the server's own `headwise_inference_duration_seconds` measures this one.",
        "- `requests/s` and `inputs/s` count answers with status 200; `errors` = others (e.g. 429 past "
        "HEADWISE_MAX_QUEUE) and socket errors, summed over repetitions.",
        "- `server CPU µs/input`: user + system time of the server's process group / inputs answered; "
        "`others' cores`: CPU used by processes outside the benchmark while the cell ran (bench/noise.py).", ""])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.standin", description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="models", help="a model package, or a folder holding one")
    ap.add_argument("--table", default=str(standin.H100), help="the device's times (bench/data/*.json)")
    ap.add_argument("--lengths", default="20,128")
    ap.add_argument("--clients", default="1,16,64,256")
    ap.add_argument("--inputs", default="1,32", help="inputs per request")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--warm", type=float, default=1, help="seconds of unmeasured load before each cell (0: none)")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--server-env", action="append", default=[], metavar="KEY=VALUE",
                    help="a HEADWISE_* setting for the server (repeatable)")
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.serve:
        standin.serve(a.models, a.serve, a.table)
        return
    cells = plan(ints(a.lengths), ints(a.clients), ints(a.inputs))
    w = Workload(a.models)
    bodies = {c: w.body(c.tokens, inputs=c.inputs) for c in cells}
    facts = machine_facts("cuda stand-in (bench/standin.py)")
    facts["model package"] = f"{w.name} ({w.dir})"
    facts["load average at start (1/5/15 min)"] = load_average()
    runs: dict[Cell, list[dict]] = {c: [] for c in cells}
    t0 = time.monotonic()
    server_env = key_values(a.server_env)
    facts["server settings"] = ", ".join(a.server_env) or "defaults"
    server = start(w.dir, a.table, Path(tempfile.mkdtemp(prefix="standin-")), server_env)
    try:
        probe(server.url + ROUTE, bodies[cells[0]], False)
        for rep, now in turns(cells, a.reps):  # forwards, then backwards: drift hits every cell alike
            for c in now:
                r = measure(server, bodies[c], c, a.seconds, a.warm)
                runs[c].append(r)
                print(f"rep {rep + 1} {c.tokens} tok {c.inputs} inputs/req {c.clients} clients: "
                      + ", ".join(f"{h} {_fmt(r[k], d)}" for k, h, d in COLUMNS), flush=True)
    finally:
        server.stop()
    facts["load average at end (1/5/15 min)"] = load_average()
    facts["run time"] = f"{(time.monotonic() - t0) / 60:.1f} min"
    facts["date (UTC)"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    results = {c: medians(rs) for c, rs in runs.items()}
    command = "python -m bench.standin " + shlex.join(argv if argv is not None else sys.argv[1:])
    text = report(command, facts, standin.HoldTable.load(a.table), results, a)
    Path(a.out).write_text(text)
    print("\n" + table(results) + "\n\n" + verdict(results) + f"\n\nwritten: {a.out}")
