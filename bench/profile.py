"""Profile a headwise server under wrk load with py-spy, and summarise where its CPU went.

    python -m bench.profile --models DIR --precision fp32 --clients 16 --tokens 20 [--attention]

Starts `headwise serve`, loads it with the same wrk script as the benchmark, samples it with
`py-spy record --format raw` (Python stacks of threads doing work; add --native for C++ frames),
and writes <out>/profile-<label>.md: the server's CPU per input, samples per thread, and the
functions with the most inclusive and self time. The raw stacks stay in a temp folder (its
path is printed), out of the repository.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from bench.args import key_values
from bench.facts import machine_facts
from bench.http import load, probe, sample_from
from bench.noise import TICK, ForeignLoad, proc_ticks
from bench.server import start_headwise
from bench.workload import Workload

FRAME = re.compile(r"^(?P<fn>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")


def _short(file: str) -> str:
    for mark in ("site-packages/", "/work/main/", "python3.11/", "python3.12/"):
        if mark in file:
            return file.split(mark, 1)[1]
    return file


def frame_name(frame: str) -> str:
    m = FRAME.match(frame.strip())
    if not m:
        return frame.strip()
    return f"{m['fn']} ({_short(m['file'])})"


def summarise(raw: str, top: int = 25) -> dict:
    """py-spy raw (collapsed) stacks → totals by thread, inclusive and self counts per function."""
    inclusive: Counter = Counter()
    self_: Counter = Counter()
    threads: Counter = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = stack.split(";")
        thread = frames[0] if frames[0].startswith(("thread", "process")) else "?"
        frames = [f for f in frames if not f.startswith(("thread", "process"))]
        if not frames:
            continue
        total += n
        threads[thread] += n
        names = [frame_name(f) for f in frames]
        for name in set(names):
            inclusive[name] += n
        self_[names[-1]] += n
    return {"total": total, "threads": threads.most_common(), "inclusive": inclusive.most_common(top),
            "self": self_.most_common(top)}


def to_markdown(title: str, summary: dict, facts: dict) -> str:
    total = max(1, summary["total"])
    out = [f"# {title}\n", "| fact | value |", "|---|---|"]
    out += [f"| {k} | {v} |" for k, v in facts.items()]
    out += ["", "## Samples per thread (busy samples only)\n", "| thread | samples | share |", "|---|---|---|"]
    out += [f"| {t} | {n} | {n / total:.0%} |" for t, n in summary["threads"]]
    out += ["", "## Inclusive (function on the stack)\n", "| function | share |", "|---|---|"]
    out += [f"| `{f}` | {n / total:.1%} |" for f, n in summary["inclusive"]]
    out += ["", "## Self (function at the top of the stack)\n", "| function | share |", "|---|---|"]
    out += [f"| `{f}` | {n / total:.1%} |" for f, n in summary["self"]]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__)
    p.add_argument("--models", default="models")
    p.add_argument("--precision", default="fp32", choices=["fp32", "int8", "fp16"])
    p.add_argument("--provider", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--tokens", type=int, default=20)
    p.add_argument("--attention", action="store_true", help="all heads, base64 float16")
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    p.add_argument("--native", action="store_true", help="py-spy --native (C/C++ frames too)")
    p.add_argument("--server-env", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = p.parse_args(argv)

    pyspy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    w = Workload(args.models)
    body = w.body(args.tokens, attention=args.attention)
    tmp = Path(tempfile.mkdtemp(prefix="headwise-profile-"))
    label = f"{args.precision}{'-attention' if args.attention else ''}-c{args.clients}-{args.tokens}tok"
    server = start_headwise(w.dir, args.precision, args.provider, tmp,
                            key_values(args.server_env))
    try:
        server.wait_ready()
        probe(server.url + "/v1/embed", body, args.attention)
        load(server.url + "/v1/embed", body, args.clients, 2)  # warm
        raw_file = tmp / "stacks.txt"
        result: dict = {}

        def drive():
            result["res"] = load(server.url + "/v1/embed", body, args.clients, args.seconds + 2)

        t = threading.Thread(target=drive)
        ticks0 = proc_ticks(server.proc.pid)
        with ForeignLoad([server.proc.pid]) as others:
            t0 = time.perf_counter()
            t.start()
            time.sleep(1.0)
            cmd = [pyspy, "record", "--pid", str(server.proc.pid), "--duration", str(int(args.seconds)),
                   "--rate", str(args.rate), "--format", "raw", "--threads", "--nonblocking",
                   "--output", str(raw_file)]
            if args.native:
                cmd.append("--native")
            spy = subprocess.run(cmd, capture_output=True, text=True, timeout=args.seconds + 60)
            t.join(args.seconds + 120)
            wall = time.perf_counter() - t0
        cpu_s = (proc_ticks(server.proc.pid) - ticks0) / TICK
        if not raw_file.is_file():
            print(f"py-spy wrote nothing:\n{spy.stdout}\n{spy.stderr}", file=sys.stderr)
            return 1
        raw = raw_file.read_text()
        sample = sample_from(result["res"])
        inputs = sample.throughput * wall
        facts = {
            "load": f"wrk, {args.clients} clients, {args.tokens}-token inputs"
                    f"{', attention all heads base64 fp16' if args.attention else ''}",
            "server": f"headwise serve, HEADWISE_PRECISION={args.precision}, provider {args.provider}"
                      f"{', ' + ', '.join(args.server_env) if args.server_env else ''}",
            "throughput (while sampled)": f"{sample.throughput:,.1f} inputs/s, p50 {sample.p50:.2f} ms, "
                                          f"p99 {sample.p99:.2f} ms, errors {sample.errors}",
            "server CPU": f"{cpu_s / wall:.2f} cores; {1000 * cpu_s / max(1, inputs):.2f} CPU-ms per input",
            "other processes": f"{others.cores:.2f} cores",
            "py-spy": f"{args.rate} Hz, {int(args.seconds)} s, raw stacks, --nonblocking"
                      f"{', --native' if args.native else ''}",
            "git commit": machine_facts(args.provider)["git commit"],
            "cpu": machine_facts(args.provider)["cpu"],
            "command": "python -m bench.profile " + " ".join(argv if argv is not None else sys.argv[1:]),
        }
        md = to_markdown(f"Profile: headwise {label}", summarise(raw), facts)
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / f"profile-{label}.md"
        path.write_text(md)
        print(md)
        print(f"wrote {path}; raw stacks: {raw_file}")
        return 0
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
