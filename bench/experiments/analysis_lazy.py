"""Issue 39, item 5, after the change: what one graph for looking inside, loaded lazily,
costs and saves at start-up, at idle and on the first request that looks inside.

    python -m bench.experiments.analysis_lazy --models /tmp/pm-models \
        base=/tmp/ab-base lazy=/work/main eager=/work/main --env eager:HEADWISE_ANALYSIS=eager \
        --reps 3 --out bench/results/analysis-lazy.md

Each side is `headwise serve` from its own checkout (bench.server.start_headwise, fp32 on CPU,
the sides' turns alternating: bench.alternate). For each start it records:

- **ready**: seconds from the process's start to `/health/ready` answering 200;
- **idle RSS**: the resident memory of the server's process tree 2 s after ready;
- **first**: the first `/v1/embed` asking for every head's attention of one 20-token input (a
  lazy side makes the analysis session then), and **next**: the same request again;
- **RSS after**: the process tree's memory after those two requests.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.alternate import turn
from bench.facts import machine_facts
from bench.report import emit, facts_table
from bench.server import HOST, http, start_headwise

BODY = json.dumps({"inputs": ["the quick brown fox jumps over the lazy dog near the river bank today"],
                   "attention": {"layers": None, "heads": None, "encoding": "base64"}}).encode()


def tree_rss_mib(pid: int) -> float:
    """Resident memory of `pid` and every process below it, MiB (from /proc)."""
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d.name))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo += kids.get(p, [])
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def one_start(models: str, tree: Path, env: dict, log_dir: Path) -> dict:
    t0 = time.monotonic()
    srv = start_headwise(models, "fp32", "cpu", log_dir, extra_env=env, tree=tree, ready_streak=1)
    try:
        srv.wait_ready()
        ready = time.monotonic() - t0
        time.sleep(2)
        idle = tree_rss_mib(srv.proc.pid)
        times = []
        for _ in range(2):
            t1 = time.perf_counter()
            status, _ = http("POST", srv.url + "/v1/embed", BODY, timeout=120)
            times.append(time.perf_counter() - t1)
            if status != 200:
                raise RuntimeError(f"{tree}: attention request answered {status}:\n{srv.tail()}")
        return {"ready_s": ready, "idle_mib": idle, "first_ms": times[0] * 1e3, "next_ms": times[1] * 1e3,
                "after_mib": tree_rss_mib(srv.proc.pid)}
    finally:
        srv.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sides", nargs="+", help="name=checkout")
    p.add_argument("--models", required=True)
    p.add_argument("--env", action="append", default=[], help="NAME:KEY=VALUE for one side")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    sides = dict(s.split("=", 1) for s in args.sides)
    envs: dict[str, dict] = {name: {} for name in sides}
    for e in args.env:
        name, kv = e.split(":", 1)
        k, v = kv.split("=", 1)
        envs[name][k] = v
    rows: dict[str, list[dict]] = {name: [] for name in sides}
    with tempfile.TemporaryDirectory() as logs:
        for rep in range(args.reps):
            for name in turn(list(sides), rep):
                r = one_start(args.models, Path(sides[name]), envs[name], Path(logs))
                rows[name].append(r)
                print(f"rep {rep} {name}: " + ", ".join(f"{k} {v:.1f}" for k, v in r.items()), file=sys.stderr)
    keys = ("ready_s", "idle_mib", "first_ms", "next_ms", "after_mib")
    lines = ["| side | ready (s) | idle RSS (MiB) | first attention request (ms) | next (ms) | RSS after (MiB) |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, rs in rows.items():
        med = [statistics.median(r[k] for r in rs) for k in keys]
        lines.append(f"| {name} | {med[0]:.2f} | {med[1]:.0f} | {med[2]:.0f} | {med[3]:.0f} | {med[4]:.0f} |")
    command = "python -m bench.experiments.analysis_lazy " + shlex.join(sys.argv[1:])
    text = (f"# One graph for looking inside, loaded lazily: start-up, idle memory, first request\n\n"
            f"Command: `{command}`\n\n## Machine\n\n{facts_table(machine_facts('cpu'))}\n"
            f"## Medians of {args.reps} starts per side ({HOST}, fp32, CPU)\n\n" + "\n".join(lines) + "\n\n"
            "## Every start\n\n```\n" + json.dumps(rows, indent=1) + "\n```\n")
    emit(text, args.out)


if __name__ == "__main__":
    main()
