"""Where the engine process's device runs spend their time (issue 37). On the H200 (2026-11-29,
bench/results/gpu-process-mode-nvidia-h200.md) process mode served single-input requests at a
seventh of eight whole-server workers, its engine "busy" 92% of the time with ~38 rows a run: a
run of 38 rows took ~14 ms where one of 63 rows took ~1 ms in the 32-input cells. Two parts:

- `offline`: the package's embed session alone (OrtBackend, as the engine loads it), each run
  timed in its phases (inputs bound, the graph's run, outputs copied back), for a fixed batch,
  for random batches (a new shape nearly every run), and with a thread beside it that holds
  the GIL (pure Python, or one that lets it go often, as the engine's IO thread does), at the
  switch interval of 5 ms and 0.2 ms;
- `served`: `headwise serve` in process mode with its real front-ends, the engine process this
  module's `--engine-child` (the real engine with its runs timed the same way), loaded with wrk,
  one input per request; the engine writes what it saw when it stops.

    python -m bench.experiments.engine_runs PACKAGE --provider cuda --precision fp16
    python -m bench.experiments.engine_runs PACKAGE --parts served \
        --configs "base=;s02=PROBE_SWITCH_MS=0.2;nomp=PROBE_NO_MEM_PATTERN=1"

The engine child's settings beside HEADWISE_*: PROBE_SWITCH_MS (its switch interval),
PROBE_NO_MEM_PATTERN (onnxruntime's memory pattern off), PROBE_OUT (where it writes its runs).

Prints a markdown report (and writes it with --out).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from bench.args import ints, key_values, strs
from bench.facts import machine_facts
from bench.http import load, sample_from
from bench.server import HOST, Server, clean_env, free_port
from bench.workload import Workload

PRECISION = {"fp32": "fp32", "fp16": "fp16"}


# -- one run, timed in its phases (the engine's run_bound, with clocks) ---------------------------
def timed_run_bound(sess, feeds, outputs, device, device_id=0, record=None):
    t0 = time.perf_counter()
    binding = sess.io_binding()
    for name, arr in feeds.items():
        binding.bind_cpu_input(name, arr)
    for name in outputs:
        binding.bind_output(name, device, device_id if device == "cuda" else 0)
    t1, c1 = time.perf_counter(), time.thread_time()
    sess.run_with_iobinding(binding)
    t2, c2 = time.perf_counter(), time.thread_time()
    out = dict(zip(outputs, binding.copy_outputs_to_cpu(), strict=True))
    t3 = time.perf_counter()
    if record is not None:
        b, length = next(iter(feeds.values())).shape[:2]
        record.append((time.time(), int(b), int(length), t1 - t0, t2 - t1, t3 - t2, c2 - c1))
    return out


def summary(records: list[tuple]) -> dict:
    if not records:
        return {"runs": 0}
    col = list(zip(*records, strict=True))
    ms = lambda xs: 1000 * statistics.median(xs)  # noqa: E731
    total = [a + b + c for a, b, c in zip(col[3], col[4], col[5], strict=True)]
    return {"runs": len(records), "rows": statistics.mean(col[1]), "length": statistics.mean(col[2]),
            "bind_ms": ms(col[3]), "run_ms": ms(col[4]), "copy_ms": ms(col[5]), "total_ms": ms(total),
            "total_mean_ms": 1000 * statistics.mean(total), "run_mean_ms": 1000 * statistics.mean(col[4]),
            "total_p90_ms": 1000 * sorted(total)[int(0.9 * (len(total) - 1))],
            "run_cpu_ms": 1000 * statistics.median(col[6])}


# -- offline ------------------------------------------------------------------------------------
def _feeds(names: list[str], b: int, length: int, rng) -> dict[str, np.ndarray]:
    ids = rng.integers(1000, 20000, size=(b, length), dtype=np.int64)
    ids[:, 0], ids[:, -1] = 101, 102
    return {n: ids if n == "input_ids" else (np.ones_like(ids) if n == "attention_mask" else np.zeros_like(ids))
            for n in names}


def _holder(stop: threading.Event, kind: str) -> None:
    """A thread beside the runs: `python` holds the GIL until the interpreter takes it away;
    `io` does ~30 µs of Python between calls that let it go (a socket polled), as an IO thread
    reading a stream of small messages does."""
    import zmq

    sock = zmq.Context.instance().socket(zmq.PULL)
    sock.bind(f"ipc://{tempfile.mkdtemp()}/s")
    while not stop.is_set():
        x = 0
        for i in range(400 if kind == "io" else 40000):
            x += i
        if kind == "io":
            sock.poll(0)
    sock.close(0)


def offline_child(package: str, provider: str, precision: str, n: int, length: int) -> dict:
    from headwise.service.backends import onnxruntime as hw_ort
    from headwise.service.package import find_packages
    from headwise.service.settings import load_settings

    settings = load_settings(models_dir=package, provider=provider, precision=precision)
    pkg = find_packages(package)[0]
    backend = hw_ort.OrtBackend(pkg, settings)
    sess = backend.session("embed")
    names, outputs = backend.input_names("embed"), [o.name for o in sess.get_outputs()][:1]
    device = backend.binding or "cpu"
    rng = np.random.default_rng(0)
    out = {"provider": backend.provider, "variant": backend.variants["embed"], "outputs": outputs}

    def series(label: str, batches: list[int], holder: str | None = None, switch_ms: float = 5.0) -> None:
        sys.setswitchinterval(switch_ms / 1000)
        stop, t = threading.Event(), None
        if holder:
            t = threading.Thread(target=_holder, args=(stop, holder), daemon=True)
            t.start()
            time.sleep(0.05)
        rec: list[tuple] = []
        for b in batches:
            timed_run_bound(sess, _feeds(names, b, length, rng), outputs, device, settings.device_id, rec)
        stop.set()
        if t:
            t.join()
        sys.setswitchinterval(0.005)
        out[label] = summary(rec)
        print(f"offline {label:28} {json.dumps(out[label])}", flush=True)

    for b in range(1, 65):  # every shape once, as the server's warm-up and earlier load would
        timed_run_bound(sess, _feeds(names, b, length, rng), outputs, device, settings.device_id)
    randoms = [int(x) for x in rng.integers(1, 65, size=n)]
    series("fixed b38", [38] * n)
    series("fixed b64", [64] * n)
    series("random b1-64", randoms)
    series("fixed b38, python thread", [38] * n, "python")
    series("fixed b38, python thread, 0.2ms", [38] * n, "python", 0.2)
    series("fixed b38, io thread", [38] * n, "io")
    series("random b1-64, io thread", randoms, "io")
    return out


# -- the engine child: the real engine process with its runs timed --------------------------------
def engine_child() -> None:
    import atexit

    from headwise.service.backends import core
    from headwise.service.backends import onnxruntime as hw_ort
    from headwise.service.server import engine_process

    if os.environ.get("PROBE_SWITCH_MS"):
        sys.setswitchinterval(float(os.environ["PROBE_SWITCH_MS"]) / 1000)
    runs: list[tuple] = []
    groups: list[tuple] = []  # (time, front-end runs stacked, whole _run seconds, queued after take)
    cpu: dict[str, float] = {}  # each thread's CPU seconds, as it last read them

    def bound(sess, feeds, outputs, device, device_id=0):
        cpu["run"] = time.thread_time()
        return timed_run_bound(sess, feeds, outputs, device, device_id, runs)

    plain = hw_ort.OrtBackend.run

    def run(self, role, feeds, outputs):  # without IOBinding (CPU): the whole run as its "run" phase
        if self.binding is not None:
            return plain(self, role, feeds, outputs)
        cpu["run"] = time.thread_time()
        t0 = time.perf_counter()
        out = plain(self, role, feeds, outputs)
        b, length = feeds["input_ids"].shape[:2]
        runs.append((time.time(), int(b), int(length), 0.0, time.perf_counter() - t0, 0.0, math.nan))
        return out

    hw_ort.run_bound, hw_ort.OrtBackend.run = bound, run
    if os.environ.get("PROBE_NO_MEM_PATTERN"):  # onnxruntime's memory plan per input shape, off on CUDA too
        options = hw_ort.OrtBackend._options

        def _options(self, provider, threads=None):
            so = options(self, provider, threads)
            so.enable_mem_pattern = False
            return so

        hw_ort.OrtBackend._options = _options
    real_run, real_receive = core.EngineCore._run, core.EngineCore._receive

    def _run(self, group):
        t0 = time.perf_counter()
        answers = real_run(self, group)
        groups.append((time.time(), len(group), time.perf_counter() - t0))
        return answers

    def _receive(self, router, frames, *rest):
        cpu["io"] = time.thread_time()
        return real_receive(self, router, frames, *rest)

    core.EngineCore._run, core.EngineCore._receive = _run, _receive

    def dump() -> None:
        out = Path(os.environ["PROBE_OUT"])
        out.with_suffix(".tmp").write_text(json.dumps({"runs": runs, "groups": groups, "cpu": cpu}))
        out.with_suffix(".tmp").replace(out)  # whole, or not there

    atexit.register(dump)
    signal.signal(signal.SIGUSR1, lambda *_: dump())  # the harness asks before it stops the server
    engine_process.main()


def serve_child() -> None:
    from headwise.service.server import supervisor
    from headwise.service.settings import load_settings

    sys.exit(supervisor.run(load_settings(), "warning", False,
                            engine_module=["bench.experiments.engine_runs", "--engine-child"]))


def _engine_pid(pid: int) -> int | None:
    """The engine child among `pid`'s descendants (process mode's children have sessions of their own)."""
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            if b"--engine-child" in Path(f"/proc/{p}/cmdline").read_bytes():
                return p
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return None


def served(w: Workload, provider: str, precision: str, name: str, env: dict, cells, seconds: float,
           log_dir: Path) -> list[dict]:
    port, probe = free_port(), log_dir / f"{name}.probe.json"
    env = clean_env({"HEADWISE_MODELS_DIR": str(w.dir.parent), "HEADWISE_HOST": HOST, "HEADWISE_PORT": str(port),
                     "HEADWISE_PROVIDER": provider, "HEADWISE_PRECISION": precision, "HEADWISE_ENGINE": "process",
                     "PROBE_OUT": str(probe), **env})
    for k in [k for k in env if k.startswith("PROBE_") and not env[k]]:
        del env[k]
    server = Server(name, [sys.executable, "-m", "bench.experiments.engine_runs", "--serve-child"], env, port,
                    "/health/ready", log_dir, ready_streak=4)
    windows = []
    try:
        server.wait_ready(240)
        for tokens, n, clients in cells:
            body = w.body(tokens, inputs=n)
            url = server.url + "/v1/embed"
            load(url, body, clients, 1.0)
            time.sleep(0.3)
            t0 = time.time()
            res = load(url, body, clients, seconds)
            t1 = time.time()
            s = sample_from(res, n)
            windows.append({"cell": f"{tokens}x{n}x{clients}", "t0": t0, "t1": t1, "inputs_per_s": s.throughput,
                            "p50_ms": s.p50, "errors": s.errors})
        engine = _engine_pid(server.proc.pid)
        if engine is not None:  # its runs, written now: a CUDA engine's exit need not reach atexit
            os.kill(engine, signal.SIGUSR1)
            for _ in range(50):
                time.sleep(0.1)
                if probe.exists():
                    break
    finally:
        server.stop()
    data = json.loads(probe.read_text()) if probe.exists() else {"runs": [], "groups": [], "cpu": {}}
    out = []
    for win in windows:
        runs = [r for r in data["runs"] if win["t0"] <= r[0] <= win["t1"]]
        groups = [g for g in data["groups"] if win["t0"] <= g[0] <= win["t1"]]
        wall = win["t1"] - win["t0"]
        s = summary(runs)
        busy = sum(r[3] + r[4] + r[5] for r in runs) / wall if runs else float("nan")
        whole = sum(g[2] for g in groups) / wall if groups else float("nan")
        stacked = statistics.mean(g[1] for g in groups) if groups else float("nan")
        row = {"config": name, **win, **s, "busy": busy, "run_share": whole, "stacked": stacked}
        out.append(row)
        print(f"served {name:8} {win['cell']:10} {json.dumps({k: row[k] for k in row if k not in ('t0', 't1')})}",
              flush=True)
    print(f"served {name}: engine threads' CPU seconds over the server's life {data['cpu']}", flush=True)
    return out


def report(facts: str, off: dict | None, rows: list[dict], command: str) -> str:
    lines = ["# Where the engine's device runs spend their time", "", f"Command: `{command}`", "", facts, ""]
    if off:
        lines += [f"## Offline: {off['variant']} on {off['provider']}, output {off['outputs']}", "",
                  "| series | runs | rows | length | bind ms | run ms | run's thread CPU ms | copy ms | total ms (median) "
                  "| mean | p90 |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for label, s in off.items():
            if isinstance(s, dict) and s.get("runs"):
                lines.append(f"| {label} | {s['runs']} | {s['rows']:.1f} | {s['length']:.0f} | {s['bind_ms']:.3f} | "
                             f"{s['run_ms']:.3f} | {s['run_cpu_ms']:.3f} | {s['copy_ms']:.3f} | {s['total_ms']:.3f} | "
                             f"{s['total_mean_ms']:.3f} | {s['total_p90_ms']:.3f} |")
        lines.append("")
    if rows:
        lines += ["## Served: process mode, the engine's runs timed", "",
                  "| config | cell | inputs/s | p50 ms | runs | rows/run | front-end runs stacked | bind ms | run ms "
                  "| run's thread CPU ms | copy ms | total ms (median) | mean | p90 | busy (run_bound) | engine _run share |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            if not r.get("runs"):
                lines.append(f"| {r['config']} | {r['cell']} | {r['inputs_per_s']:,.0f} | {r['p50_ms']:.2f} | 0 |"
                             + " – |" * 12)
                continue
            lines.append(f"| {r['config']} | {r['cell']} | {r['inputs_per_s']:,.0f} | {r['p50_ms']:.2f} | {r['runs']} | "
                         f"{r['rows']:.1f} | {r['stacked']:.1f} | {r['bind_ms']:.3f} | {r['run_ms']:.3f} | {r['run_cpu_ms']:.3f} | "
                         f"{r['copy_ms']:.3f} | {r['total_ms']:.3f} | {r['total_mean_ms']:.3f} | "
                         f"{r['total_p90_ms']:.3f} | {r['busy']:.0%} | {r['run_share']:.0%} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--engine-child"]:
        return engine_child()
    if argv[:1] == ["--serve-child"]:
        return serve_child()
    ap = argparse.ArgumentParser(prog="python -m bench.experiments.engine_runs", description=__doc__.split("\n\n")[0])
    ap.add_argument("package")
    ap.add_argument("--provider", default="cpu")
    ap.add_argument("--precision", default="fp32", choices=sorted(PRECISION))
    ap.add_argument("--parts", default="offline,served")
    ap.add_argument("--runs", type=int, default=200, help="runs per offline series")
    ap.add_argument("--length", type=int, default=22, help="tokens per row offline (20 and the two special tokens)")
    ap.add_argument("--configs", default="base=", help="NAME=VAR=VALUE[,...];... served engine configurations")
    ap.add_argument("--frontends", type=int, default=8)
    ap.add_argument("--cells", default="20x1x256", help="TOKENSxINPUTSxCLIENTS, comma-separated")
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--out", default=None)
    ap.add_argument("--offline-child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.offline_child:
        print("RESULT " + json.dumps(offline_child(a.package, a.provider, a.precision, a.runs, a.length)))
        return None
    w = Workload(a.package)
    parts = strs(a.parts)
    off = None
    if "offline" in parts:  # its own process: its session's device memory goes with it
        proc = subprocess.run([sys.executable, "-m", "bench.experiments.engine_runs", str(w.dir), "--provider",
                               a.provider, "--precision", a.precision, "--runs", str(a.runs), "--length",
                               str(a.length), "--offline-child"], capture_output=True, text=True, timeout=300)
        sys.stdout.write("".join(ln + "\n" for ln in proc.stdout.splitlines() if not ln.startswith("RESULT ")))
        found = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        if not found:
            print(proc.stderr[-3000:], file=sys.stderr)
        off = json.loads(found[0][len("RESULT "):]) if found else None
    rows: list[dict] = []
    if "served" in parts:
        cells = [tuple(ints(c.replace("x", ","))) for c in strs(a.cells)]
        log_dir = Path(tempfile.mkdtemp(prefix="engine-runs-"))
        for spec in a.configs.split(";"):
            name, _, rest = spec.partition("=")
            env = {"HEADWISE_FRONTENDS": str(a.frontends), **key_values([x for x in rest.split(",") if x])}
            rows += served(w, a.provider, a.precision, name, env, cells, a.seconds, log_dir)
    command = "python -m bench.experiments.engine_runs " + " ".join(argv)
    facts = "\n".join(f"- {k}: {v}" for k, v in machine_facts(a.provider).items())
    text = report(facts, off, rows, command)
    print(text)
    if a.out:
        Path(a.out).write_text(text)
    return None


if __name__ == "__main__":
    main()
