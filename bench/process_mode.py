"""Process mode's costs (issue 37), on any CPU: `headwise serve` in process mode with its real
front-ends and transport, the engine process replaced by bench/standin_engine.py:

    python -m bench.process_mode --models DIR --hold instant   # front-end CPU per request and per input (no hold)
    python -m bench.process_mode --models DIR --hold standin   # device busy (H100 stand-in), engine CPU per input
    python -m bench.process_mode --models DIR --real --clients 1,16   # onnxruntime on this CPU: inproc vs process

Per cell (length × inputs per request × clients × layout), repetitions alternating over the
cells: requests/s, inputs/s, p50/p99 (wrk), the front-ends' CPU (user + system of every
front-end process, from /proc) per request and per input, the engine's own CPU per input, the
device-busy share (the stand-in's held time / wall time), the mean time the device sat idle
between two runs, the mean device batch, and the busiest front-end's share of the front-ends'
CPU (1/F when the connections are spread evenly). `--real` serves the package with onnxruntime
(`headwise serve`, `HEADWISE_ENGINE=inproc` against `process`) and reports throughput, latency
and the server's CPU per request. Linux only; needs wrk. Results: bench/results/process-mode-*.md.
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

import zmq

from bench.alternate import turns
from bench.args import ints, strs
from bench.facts import load_average, machine_facts
from bench.http import load, sample_from
from bench.noise import TICK, ForeignLoad, proc_ticks
from bench.report import facts_table
from bench.server import HOST, Server, clean_env, free_port, http
from bench.standin import COUNTERS_PATH, H100
from bench.standin_engine import COUNTERS
from bench.stats import median
from bench.workload import ROUTES, Workload

RESULTS = Path(__file__).resolve().parent / "results"
COLUMNS = [("requests_per_s", "requests/s", 0), ("inputs_per_s", "inputs/s", 0), ("p50_ms", "p50 ms", 2),
           ("p99_ms", "p99 ms", 2), ("fe_us_per_request", "front-end CPU µs/request", 0),
           ("fe_us_per_input", "front-end CPU µs/input", 0), ("engine_us_per_input", "engine CPU µs/input", 1),
           ("device_busy", "device busy", "%"), ("gap_ms", "idle between runs ms", 3),
           ("device_batch", "device batch", 1), ("fe_top_share", "busiest front-end's share", "%"),
           ("others_cores", "others' cores", 2)]
REAL_COLUMNS = [("requests_per_s", "requests/s", 0), ("p50_ms", "p50 ms", 2), ("p99_ms", "p99 ms", 2),
                ("server_us_per_request", "server CPU µs/request", 0), ("others_cores", "others' cores", 2)]


@dataclass(frozen=True)
class Cell:
    tokens: int
    inputs: int
    clients: int
    layout: str  # "process:F" (F front-ends) or "inproc"


def family(pid: int) -> dict[int, tuple[str, int]]:
    """pid and every descendant → (its `python -m` module or command, CPU ticks)."""
    out, todo = {}, [pid]
    while todo:
        p = todo.pop()
        try:
            cmd = Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
        words = [w.decode() for w in cmd if w]
        role = words[words.index("-m") + 1] if "-m" in words else (words[0] if words else "?")
        out[p] = (role, proc_ticks(p))
    return out


def role_seconds(before: dict, after: dict, role: str) -> float:
    """CPU seconds of the processes whose module names `role`, between two `family` snapshots
    (a process that started in between counts from 0)."""
    return sum(t - before.get(p, (r, 0))[1] for p, (r, t) in after.items() if role in r) / TICK


def top_share(before: dict, after: dict, role: str) -> float:
    """The busiest of `role`'s processes' share of their CPU seconds between two `family`
    snapshots: 1/F when F front-ends share the work evenly, 1.0 when one did it all."""
    each = [t - before.get(p, (r, 0))[1] for p, (r, t) in after.items() if role in r]
    return max(each) / sum(each) if len(each) > 1 and sum(each) else math.nan


def counters(address: str) -> dict:
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.REQ)
    sock.connect(address + COUNTERS)
    try:
        sock.send(b"?")
        if not sock.poll(5000):
            raise RuntimeError("the stand-in engine did not answer its counters")
        return json.loads(sock.recv())
    finally:
        sock.close(linger=0)


class Layout:
    """A server in one layout: `headwise serve` in process mode over the stand-in engine, or
    the stand-in served in process (bench.standin); `real`: onnxruntime, `headwise serve`."""

    def __init__(self, layout: str, models: Path, hold: str, real: bool, log_dir: Path, settle_s: float = 0.5,
                 ready_streak: int | None = None):
        self.layout, self.real, self.hold = layout, real, hold
        port = free_port()
        env = clean_env(dict(HEADWISE_MODELS_DIR=str(models), HEADWISE_HOST=HOST, HEADWISE_PORT=str(port),
                             HEADWISE_PROVIDER="cpu", HEADWISE_PRECISION="fp32"))
        self.address = None
        if real:
            engine = "process" if layout.startswith("process") else "inproc"
            env.update(HEADWISE_ENGINE=engine, HEADWISE_WORKERS="1" if engine == "inproc" else "auto")
            if engine == "process":
                env["HEADWISE_FRONTENDS"] = layout.split(":")[1]
            argv = [sys.executable, "-m", "headwise.cli", "serve", "--log-level", "warning"]
        elif layout == "inproc":  # the same stand-in in the one process
            argv = [sys.executable, "-m", "bench.standin", "--serve", str(port), "--models", str(models),
                    "--table", _table(hold, log_dir)]
        else:
            argv = [sys.executable, "-m", "bench.process_mode", "--serve", layout.split(":")[1], "--hold", hold,
                    "--table", _table(hold, log_dir)]
        name = f"{layout.replace(':', '-')}-{port}"
        self.server = Server(name, argv, env, port, "/health/ready", log_dir, ready_streak=ready_streak)
        self.server.wait_ready(180)
        time.sleep(settle_s)  # a moment to settle before the load
        self.pid = self.server.proc.pid
        if layout.startswith("process") and not real:
            self.address = _engine_address(self.pid)

    def snapshot(self) -> dict:
        snap = {"family": family(self.pid)}
        if self.address:
            snap["engine"] = counters(self.address)
        elif not self.real:  # bench.standin's counters, over HTTP
            status, body = http("GET", self.server.url + COUNTERS_PATH, timeout=10)
            if status == 200:
                snap["standin"] = json.loads(body)
        return snap

    def stop(self) -> None:
        self.server.stop()


def _table(hold: str, folder: Path) -> str:
    """The stand-in's times: the H100's, or (instant) none at all, every batch answered at once,
    so that what is measured is the front-ends and the transport, batching as on a GPU."""
    if hold == "standin":
        return str(H100)
    zero = folder / "instant.json"
    zero.write_text(json.dumps({"device": "instant (no hold)", "roles": {
        role: {"points": [{"tokens": 8, "batch": 1, "p50_ms": 0.0}]} for role in ("embed", "attention")}}))
    return str(zero)


def _engine_address(pid: int) -> str:
    for p, (role, _) in family(pid).items():
        if role == "bench.standin_engine":
            env = Path(f"/proc/{p}/environ").read_bytes().split(b"\0")
            for kv in env:
                if kv.startswith(b"HEADWISE_ENGINE_ADDRESS="):
                    return kv.split(b"=", 1)[1].decode()
    raise RuntimeError("no stand-in engine process found")


def figures(cell: Cell, res: dict, before: dict, after: dict, real: bool) -> dict:
    wall = res["duration_us"] / 1e6
    answered = res["requests"] - res.get("status", 0)
    done = answered * cell.inputs
    s = sample_from(res)
    out = {"requests_per_s": answered / wall, "inputs_per_s": done / wall, "p50_ms": s.p50, "p99_ms": s.p99,
           "errors": s.errors}
    every = role_seconds(before["family"], after["family"], "")
    if real:
        out["server_us_per_request"] = every / answered * 1e6 if answered else math.nan
        return out
    fe = every if cell.layout == "inproc" else role_seconds(before["family"], after["family"], "server.frontend")
    out["fe_us_per_request"] = fe / answered * 1e6 if answered else math.nan
    out["fe_us_per_input"] = fe / done * 1e6 if done else math.nan
    out["fe_top_share"] = top_share(before["family"], after["family"], "server.frontend")
    if "engine" in after:
        e0, e1 = before["engine"], after["engine"]
        runs = e1["runs"] - e0["runs"]
        out["engine_us_per_input"] = (e1["cpu_s"] - e0["cpu_s"]) / done * 1e6 if done else math.nan
        out["device_busy"] = (e1["hold_s"] - e0["hold_s"]) / wall
        out["gap_ms"] = (e1["gap_s"] - e0["gap_s"]) / runs * 1000 if runs else math.nan
        out["device_batch"] = (e1["inputs"] - e0["inputs"]) / runs if runs else math.nan
    elif "standin" in after:  # in process: the device's time, its batches; its CPU is the server's
        s0, s1 = before["standin"], after["standin"]
        calls = s1["calls"] - s0["calls"]
        out["device_busy"] = (s1["hold_s"] - s0["hold_s"]) / wall
        out["device_batch"] = (s1["inputs"] - s0["inputs"]) / calls if calls else math.nan
    return out


def measure(server: Layout, route: str, body: bytes, cell: Cell, seconds: float, warm: float) -> dict:
    url = server.server.url + route
    if warm > 0:
        load(url, body, cell.clients, warm)
    before = server.snapshot()
    with ForeignLoad(list(before["family"])) as others:  # process mode's children have sessions of their own
        res = load(url, body, cell.clients, seconds)
    after = server.snapshot()
    return {**figures(cell, res, before, after, server.real), "others_cores": others.cores}


def _fmt(x, digits) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{100 * x:.0f}%" if digits == "%" else f"{x:,.{digits}f}"


def table(results: dict[Cell, dict], columns) -> str:
    head = "| layout | tokens | inputs/request | clients | " + " | ".join(h for _, h, _ in columns) + " | errors | reps |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for c, m in results.items():
        cols = " | ".join(_fmt(m.get(k), d) for k, _, d in columns)
        lines.append(f"| {c.layout} | {c.tokens} | {c.inputs} | {c.clients} | {cols} | {m['errors']} | {m['reps']} |")
    return "\n".join(lines)


def serve_child(frontends: int, table: str) -> None:
    """The server child: the real supervisor and front-ends, the stand-in engine."""
    from headwise.service.server import supervisor
    from headwise.service.settings import load_settings

    settings = load_settings(engine="process", frontends=frontends)
    sys.exit(supervisor.run(settings, "warning", False,
                            engine_module=["bench.standin_engine", "--hold", "standin", "--table", table]))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.process_mode", description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="models", help="a folder holding one model package")
    ap.add_argument("--hold", choices=["instant", "standin"], default="instant")
    ap.add_argument("--real", action="store_true", help="onnxruntime on this CPU, inproc against process")
    ap.add_argument("--layouts", default=None, help="inproc and/or process:F (default: inproc,process:1,process:2)")
    ap.add_argument("--lengths", default="20,128")
    ap.add_argument("--inputs", default="1,32", help="inputs per request")
    ap.add_argument("--clients", default="64")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--warm", type=float, default=1)
    ap.add_argument("--route", choices=sorted(ROUTES), default="native",
                    help="native /v1/embed (vectors, tokens and offsets) or OpenAI /v1/embeddings (vectors)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--table", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.serve:
        serve_child(a.serve, a.table)
        return
    layouts = strs(a.layouts or ("inproc,process:2" if a.real else "inproc,process:1,process:2"))
    w = Workload(a.models)
    models = w.dir.parent
    cells = [Cell(t, n, c, lay) for t in ints(a.lengths) for n in ints(a.inputs) for c in ints(a.clients)
             for lay in layouts]
    bodies = {(c.tokens, c.inputs): w.body(c.tokens, inputs=c.inputs, shape=a.route) for c in cells}
    facts = machine_facts("cpu" if a.real else f"engine stand-in: {a.hold}")
    facts["model package"] = f"{w.name} ({w.dir})"
    facts["route"] = ROUTES[a.route]
    facts["load average at start (1/5/15 min)"] = load_average()
    log_dir = Path(tempfile.mkdtemp(prefix="process-mode-"))
    runs: dict[Cell, list[dict]] = {c: [] for c in cells}
    t0 = time.monotonic()
    for rep, now in turns(layouts, a.reps):  # servers alternate, one at a time
        for lay in now:
            server = Layout(lay, models, a.hold, a.real, log_dir)
            try:
                for c in [c for c in cells if c.layout == lay]:
                    r = measure(server, ROUTES[a.route], bodies[(c.tokens, c.inputs)], c, a.seconds, a.warm)
                    runs[c].append(r)
                    print(f"rep {rep + 1} {lay} {c.tokens} tok {c.inputs} in/req {c.clients} clients: "
                          + ", ".join(f"{h} {_fmt(r.get(k), d)}" for k, h, d in (REAL_COLUMNS if a.real else COLUMNS)),
                          flush=True)
            finally:
                server.stop()
    results = {c: {**{k: median(r[k] for r in rs if k in r) if any(k in r for r in rs) else math.nan
                      for k, _, _ in (REAL_COLUMNS if a.real else COLUMNS)},
                   "errors": sum(r["errors"] for r in rs), "reps": len(rs)} for c, rs in runs.items()}
    facts["load average at end (1/5/15 min)"] = load_average()
    facts["run time"] = f"{(time.monotonic() - t0) / 60:.1f} min"
    facts["date (UTC)"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    command = "python -m bench.process_mode " + shlex.join(argv if argv is not None else sys.argv[1:])
    text = "\n".join(["# Process mode: " + ("onnxruntime on this CPU" if a.real else f"engine stand-in ({a.hold})"),
                      "", f"Command: `{command}`", "", facts_table(facts), "",
                      f"Medians of {a.reps} repetitions of {a.seconds:g} s per cell (after {a.warm:g} s unmeasured); "
                      "each repetition starts each layout's server in turn, the order alternating.", "",
                      table(results, REAL_COLUMNS if a.real else COLUMNS), ""])
    out = Path(a.out or RESULTS / f"process-mode-{'real' if a.real else a.hold}.md")
    out.write_text(text)
    print("\n" + table(results, REAL_COLUMNS if a.real else COLUMNS) + f"\n\nwritten: {out}")


if __name__ == "__main__":
    main()
