"""How evenly process mode's front-ends share the connections: `headwise serve` in process mode
over the instant stand-in engine (bench/process_mode.py), loaded by `--runs` wrk runs of
`--clients` new keep-alive connections each. By default each run has a server of its own,
loaded at its first ready answer, as clients reach a server after a rollout (readiness waits
for every front-end to serve since 236e265; before it, a sibling could still be starting);
`--reuse` loads one server run after run, back to back. Per run: requests/s and the busiest
front-end's share of the front-ends' CPU (1/F when even, 1.0 when one front-end served every
connection while the others sat idle).

    python -m bench.spread --models DIR --frontends 2 --runs 10

Linux only; needs wrk. Results: bench/results/reuseport-*.md.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from bench.http import load
from bench.process_mode import Layout, family, top_share
from bench.workload import Workload


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="models", help="a folder holding one model package")
    ap.add_argument("--frontends", type=int, default=2)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--inputs", type=int, default=32, help="inputs per request")
    ap.add_argument("--tokens", type=int, default=20)
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=2)
    ap.add_argument("--reuse", action="store_true", help="one server for every run, loaded back to back")
    a = ap.parse_args(argv)
    w = Workload(a.models)
    body = w.body(a.tokens, inputs=a.inputs)
    logs = Path(tempfile.mkdtemp(prefix="spread-"))
    shares, server = [], None
    try:
        for i in range(a.runs):
            if server is None:
                server = Layout(f"process:{a.frontends}", w.dir.parent, "instant", False, logs, settle_s=0,
                                ready_streak=1)  # at its first ready answer
            before = family(server.pid)
            res = load(server.server.url + "/v1/embed", body, a.clients, a.seconds)
            share = top_share(before, family(server.pid), "server.frontend")
            shares.append(share)
            rps = (res["requests"] - res.get("status", 0)) / (res["duration_us"] / 1e6)
            print(f"run {i + 1}: {rps:,.0f} requests/s, busiest front-end {100 * share:.0f}%", flush=True)
            if not a.reuse:
                server.stop()
                server = None
    finally:
        if server is not None:
            server.stop()
    lopsided = sum(s >= 0.9 for s in shares)
    print(f"runs where one front-end did at least 90% of the work: {lopsided} of {len(shares)}")


if __name__ == "__main__":
    main()
