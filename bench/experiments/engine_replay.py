"""The engine's own Python per message (issue 37), in one process and without sockets: each
message's frames decoded and filed (`EngineCore._receive`), then taken, run on a device that holds
nothing and answered in runs of N messages (`_take`, `_run`), as the engine's one thread does
between two device runs. Its private methods are why this is an experiment (bench/README.md).

    python -m bench.experiments.engine_replay --per-run 8 --rows 1

Prints the best of 7 rounds of 8,000 messages, in µs per message. For an A/B, run it from each
tree's clone in turn (it replays the `EngineCore` of the tree it runs in); results:
bench/results/engine-feed-1129.md.
"""

from __future__ import annotations

import argparse
import math
import time
from collections import deque

import zmq

from bench.engine_feed import MODEL, OUTPUT, ROLE, HeldDevice, run_feeds
from headwise.service.backends import wire
from headwise.service.backends.core import EngineCore


def replay(messages: int = 8000, per_run: int = 8, rows: int = 1, length: int = 22, rounds: int = 7) -> float:
    """The engine's own Python per message, in this process and without sockets: each message's
    frames decoded and filed (`EngineCore._receive`), then taken, run on a device that holds
    nothing and answered in runs of `per_run` messages (`_take`, `_run`). Best of `rounds`, µs."""
    core = EngineCore({MODEL: HeldDevice(0.0, 0.0)}, "ipc://unused", max_batch_size=64, max_batch_tokens=64 * 512)
    feeds = run_feeds(rows, length)

    def frames(seq: int) -> list:
        run = wire.Run(seq, "ipc://reply", MODEL, ROLE, [OUTPUT], wire.specs(feeds), [])
        return [zmq.Frame(b"front-end")] + [zmq.Frame(bytes(f)) for f in wire.encode(run, feeds)]

    class Router:  # answers to Hello and Ping would go here; none are sent
        def send_multipart(self, *_a, **_k):
            pass

    msgs, router, best = [frames(i) for i in range(messages)], Router(), math.inf
    for _ in range(rounds):
        pending: deque = deque()
        t0 = time.perf_counter()
        for i in range(0, messages, per_run):
            for fr in msgs[i:i + per_run]:
                core._receive(router, fr, pending)
            while pending:
                core._run(core._take(pending))
        best = min(best, time.perf_counter() - t0)
    return best / messages * 1e6


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.experiments.engine_replay", description=__doc__.split("\n\n")[0])
    ap.add_argument("--per-run", type=int, default=8, help="messages a device run")
    ap.add_argument("--rows", type=int, default=1, help="rows a message")
    ap.add_argument("--length", type=int, default=22)
    a = ap.parse_args(argv)
    print(f"{replay(per_run=a.per_run, rows=a.rows, length=a.length):.2f} µs of the engine's Python per message "
          f"({a.per_run} messages a run, {a.rows} rows each; best of 7 rounds of 8,000)")


if __name__ == "__main__":
    main()
