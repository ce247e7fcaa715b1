"""Host work of a plain POST /v1/embed, in process, A/B between trees (issue 37, item 7): the
app as `headwise serve` builds it (server.fastpath installed, the engine started on a uvloop
loop, the protocol's request cycle) with a backend that answers at once, driven through
uvicorn's request cycle on loopback TCP connections (bench.stages_http's way, copied here so
that any tree, before or after, runs the same driver).

    python bench/plain_path.py --models /tmp/models old=/tmp/ab-old new=/tmp/ab-new --rounds 60
    python bench/plain_path.py --models /tmp/models off=/tmp/t on=/tmp/t --env on:HEADWISE_OTEL=true
    python bench/plain_path.py --models /tmp/models --child                  # the tree on PYTHONPATH
    valgrind --tool=callgrind --instr-atstart=no python bench/plain_path.py --models M --child --instr

A/B: one child process per tree (PYTHONPATH=TREE, this interpreter), all started and warmed
first, then blocks of `--requests` requests run in turn, one child at a time (the others wait
on their stdin, idle), the order rotating each round. A block is `--clients` requests sent at
once, again and again (they batch together, as wrk's connections do); its cost is the child's
CPU time (every thread, both ends of the connections) per request. Per tree: the median over
rounds, and against the first tree, the median of the rounds' differences and their
quartiles: a machine's drift hits both sides of a round alike. `--pin CPU`: every child on one
CPU (the threads' handoffs then cost no cross-core wakeups: steadier, and less than a free
run). Each child also checks its answer: the body (the stand-in's vectors are the same in
every tree) and the header names are printed per tree.

`--child`: one sitting of the tree on PYTHONPATH, `--blocks` blocks → JSON; with `--profile
FILE`, a cProfile of the event loop's thread over one block first; with `--instr` (under
callgrind), the instructions of one block only (callgrind_control toggles them). Left out:
httptools parsing the request and the connection's events (bench.overhead has them).
"""

from __future__ import annotations

import argparse
import asyncio
import email.utils
import json
import logging
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HOST = "127.0.0.1"
PATH = "/v1/embed"
TEXT = "The quick brown fox jumps over the lazy dog near the river bank today."  # bench.overhead's
LOG = logging.getLogger("bench.plain_path")
DEFAULT_HEADERS = [(b"date", email.utils.formatdate(usegmt=True).encode()), (b"server", b"uvicorn")]


# -- the child: one tree, in process ----------------------------------------------------------
class Instant:
    """bench.standin.Instant's surface: the embed variant's outputs at once; counts its runs."""

    provider, precision = "cpu", "fp32"
    runs = inputs = 0

    def __init__(self, package, settings):
        import numpy as np

        self.package, self.settings = package, settings
        self.variants = {"embed": "fast"}
        self._rows = np.random.default_rng(0).random((256, package.d_model), dtype=np.float32)
        self._np = np

    def run(self, role, feeds, outputs):
        b, t = feeds["input_ids"].shape
        Instant.runs += 1
        Instant.inputs += b
        made = {"sentence_embedding": lambda: self._rows[:b],
                "last_hidden_state": lambda: self._np.zeros((b, t, self.package.d_model), self._np.float32)}
        return {name: made[name]() for name in outputs}


def scope_for(body: bytes) -> dict:
    return {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
            "server": (HOST, 8000), "client": (HOST, 50000), "scheme": "http", "method": "POST",
            "root_path": "", "path": PATH, "raw_path": PATH.encode(), "query_string": b"",
            "headers": [(b"host", b"127.0.0.1:8000"), (b"user-agent", b"wrk"),
                        (b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))],
            "state": {}}


class Conn:
    """One loopback TCP connection, its server end wrapped as `headwise serve` wraps it, and
    the request cycle class its protocol runs requests on (uvicorn's where it has none)."""

    @classmethod
    async def open(cls) -> Conn:
        from headwise.service.server.http_protocol import CoalescingTransport

        self = cls()
        loop = asyncio.get_running_loop()
        accepted = loop.create_future()
        self.received, self.sent, self.arrived = 0, 0, asyncio.Event()

        class Accept(asyncio.Protocol):
            def connection_made(_, transport):
                accepted.set_result(transport)

        class Reader(asyncio.Protocol):
            def data_received(_, data):
                self.received += len(data)
                self.arrived.set()

        self.server = await loop.create_server(Accept, HOST, 0)
        await loop.create_connection(Reader, HOST, self.server.sockets[0].getsockname()[1])
        raw = await accepted

        class Counted:
            def write(_, data):
                self.sent += len(data)
                raw.write(data)

            def writelines(_, chunks):
                for c in chunks:
                    _.write(c)

            def __getattr__(_, name):
                return getattr(raw, name)

        self.transport = CoalescingTransport(Counted(), loop)
        try:
            from headwise.service.server.http_protocol import Cycle as cycle_class
        except ImportError:
            from uvicorn.protocols.http.httptools_impl import RequestResponseCycle as cycle_class
        self.cycle_class = cycle_class
        return self

    def cycle(self, scope: dict, body: bytes):
        from uvicorn.protocols.http.flow_control import FlowControl

        c = self.cycle_class(scope=scope, transport=self.transport, flow=FlowControl(self.transport), logger=LOG,
                             access_logger=LOG, access_log=False, default_headers=DEFAULT_HEADERS,
                             message_event=asyncio.Event(), expect_100_continue=False, keep_alive=True,
                             on_response=lambda: None)
        c.body, c.more_body = bytearray(body), False
        c.message_event.set()
        return c

    async def drained(self) -> None:
        self.transport.flush()
        while self.received < self.sent:
            self.arrived.clear()
            await asyncio.wait_for(self.arrived.wait(), 10)


class Harness:
    """The app on one package, `clients` connections, and blocks of requests on them."""

    @classmethod
    async def start(cls, models: str, clients: int) -> Harness:
        from headwise.service.api.app import create_app
        from headwise.service.server import fastpath
        from headwise.service.settings import Settings

        self = cls()
        app = fastpath.install(create_app(Settings(models_dir=models, provider="cpu"), backend_factory=Instant))
        self.app, self.engine = fastpath.Entry(app), app.state.engine
        self.engine.load_packages()
        self.engine.prepare()
        self.engine.start()
        try:  # as `headwise serve` does once ready, in a tree that does (service.heap)
            from headwise.service import heap
        except ImportError:
            pass
        else:
            heap.settle()
        self.body = json.dumps({"inputs": TEXT}).encode()
        self.conns = [await Conn.open() for _ in range(clients)]
        return self

    async def one(self, conn: Conn, send=None) -> None:
        scope = scope_for(self.body)
        c = conn.cycle(scope, self.body)
        await self.app(scope, c.receive, send or c.send)
        if not c.response_complete:
            raise RuntimeError(f"POST {PATH} did not complete its response")

    async def answer(self) -> dict:
        """One request's body and header names, as sent."""
        sent, conn = [], self.conns[0]
        c = conn.cycle(scope_for(self.body), self.body)

        async def keep(message):
            sent.append(message)
            await c.send(message)

        await self.app(c.scope, c.receive, keep)
        await conn.drained()
        start = next(m for m in sent if m["type"] == "http.response.start")
        return {"answer": b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body").decode(),
                "headers": sorted(k.decode() for k, _ in start["headers"])}

    async def block(self, n: int) -> float:
        """µs of the process's CPU per request over about `n` requests."""
        rounds = max(1, n // len(self.conns))
        t0 = time.process_time_ns()
        for _ in range(rounds):
            await asyncio.gather(*(self.one(c) for c in self.conns))
            for c in self.conns:
                await c.drained()
        return (time.process_time_ns() - t0) / (rounds * len(self.conns)) / 1000

    async def close(self) -> None:
        await self.engine.close(1.0)


async def sitting(a) -> dict:
    import gc

    import headwise

    h = await Harness.start(a.models, a.clients)
    try:
        out = await h.answer()
        await h.block(a.requests)  # warm
        if a.profile:
            import cProfile

            prof = cProfile.Profile()
            prof.enable()
            await h.block(a.requests)
            prof.disable()
            prof.dump_stats(a.profile)
        gc0, objects = [g["collections"] for g in gc.get_stats()], len(gc.get_objects())
        runs0, inputs0 = Instant.runs, Instant.inputs
        if a.instr:  # under valgrind --tool=callgrind --instr-atstart=no: this block's instructions only
            toggle = ["callgrind_control", "--instr=on", str(os.getpid())]
            await asyncio.to_thread(subprocess.run, toggle, check=True, capture_output=True)
            per = [await h.block(a.requests)]
            toggle[1] = "--instr=off"
            await asyncio.to_thread(subprocess.run, toggle, check=True, capture_output=True)
        else:
            per = [await h.block(a.requests) for _ in range(a.blocks)]
    finally:
        await h.close()
    return {"us_per_request": statistics.median(per), "blocks": per,
            "gc_collections": [g["collections"] - c for g, c in zip(gc.get_stats(), gc0, strict=True)],
            "gc_objects": objects, "mean_batch": round((Instant.inputs - inputs0) / max(Instant.runs - runs0, 1), 2),
            "headwise": str(Path(headwise.__file__).parent), **out}


async def serve_blocks(a) -> None:
    """Answer the parent: one line per command on stdin ("N": a block of N requests → its µs
    per request; "answer": the answer and headers; "quit")."""
    import headwise

    loop = asyncio.get_running_loop()
    h = await Harness.start(a.models, a.clients)
    try:
        await h.block(a.requests)  # warm
        print(json.dumps({"ready": str(Path(headwise.__file__).parent)}), flush=True)
        while (line := (await loop.run_in_executor(None, sys.stdin.readline)).strip()) not in ("", "quit"):
            reply = await h.answer() if line == "answer" else {"us": await h.block(int(line))}
            print(json.dumps(reply), flush=True)
    finally:
        await h.close()


# -- the parent: blocks alternating between trees ---------------------------------------------
class Child:
    def __init__(self, name: str, tree: Path, a):
        env = {k: v for k, v in os.environ.items() if not k.startswith("HEADWISE_")}
        env["PYTHONPATH"] = str(tree)
        for spec in a.env:  # NAME:KEY=VALUE, this side's own settings
            side, _, kv = spec.partition(":")
            if side == name:
                key, _, value = kv.partition("=")
                env[key] = value
        argv = [sys.executable, str(Path(__file__).resolve()), "--child", "--serve", "--models", a.models,
                "--clients", str(a.clients), "--requests", str(a.requests)]
        if a.pin is not None:
            argv = ["taskset", "-c", str(a.pin), *argv]
        self.name = name
        self.proc = subprocess.Popen(argv, cwd=tree, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)
        self.where = self.ask(None)["ready"]

    def ask(self, command: str | None) -> dict:
        if command is not None:
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"{self.name}: the child stopped (rc {self.proc.wait()})")
        return json.loads(line)

    def close(self) -> None:
        self.proc.stdin.write("quit\n")
        self.proc.stdin.close()
        self.proc.wait(30)


def quartiles(xs: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(xs, n=4) if len(xs) > 1 else [xs[0]] * 3
    return q[0], q[2]


def ab(a) -> None:
    from headwise.export import cpu as cpu_info

    trees = [(n, Path(p).resolve()) for n, _, p in (t.partition("=") for t in a.trees)]
    children = [Child(n, p, a) for n, p in trees]
    try:
        answers = {c.name: c.ask("answer") for c in children}
        got: dict[str, list[float]] = {c.name: [] for c in children}
        for r in range(a.rounds):
            k = r % len(children)
            for c in children[k:] + children[:k]:
                got[c.name].append(c.ask(str(a.requests))["us"])
    finally:
        for c in children:
            c.close()
    base = children[0].name
    print(f"bench/plain_path.py on {cpu_info.label()}: POST {PATH}, 1 input ({TEXT!r}), {a.clients} clients, "
          f"blocks of {a.requests} requests, {a.rounds} rounds" + (f", every child on CPU {a.pin}" if a.pin is not None
                                                                    else ""))
    print(f"\n| tree | µs CPU/request, median of rounds (quartiles) | against {base}: median of rounds' "
          "differences (quartiles) | answer |")
    print("|---|---:|---:|---|")
    for c in children:
        xs = got[c.name]
        diffs = [x - b for x, b in zip(xs, got[base], strict=True)]
        q, dq = quartiles(xs), quartiles(diffs)
        same = "same body" if answers[c.name]["answer"] == answers[base]["answer"] else "BODY DIFFERS"
        print(f"| {c.name} | {statistics.median(xs):.1f} ({q[0]:.1f} … {q[1]:.1f}) | "
              f"{statistics.median(diffs):+.1f} ({dq[0]:+.1f} … {dq[1]:+.1f}) | {same}, "
              f"{len(answers[c.name]['headers'])} headers |")
    print()
    for c in children:
        print(f"{c.name}: {c.where}; headers {', '.join(answers[c.name]['headers'])}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trees", nargs="*", help="NAME=TREE, two or more: the first is the base")
    ap.add_argument("--models", required=True, help="a folder with one package")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--requests", type=int, default=1600, help="requests per block")
    ap.add_argument("--rounds", type=int, default=40, help="blocks per tree, alternating")
    ap.add_argument("--pin", type=int, help="run every child on this CPU (taskset)")
    ap.add_argument("--env", action="append", default=[], metavar="NAME:KEY=VALUE",
                    help="an environment variable for one side's child (repeatable): the same tree twice, "
                         "with and without a setting")
    ap.add_argument("--child", action="store_true", help="measure the tree on PYTHONPATH, in this process")
    ap.add_argument("--blocks", type=int, default=9, help="(--child) blocks in the sitting")
    ap.add_argument("--profile", help="(--child) write a cProfile of one block here")
    ap.add_argument("--instr", action="store_true", help="(--child, under callgrind) instructions of one block")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        import uvloop

        if a.serve:
            uvloop.run(serve_blocks(a))
        else:
            print(json.dumps(uvloop.run(sitting(a))))
        return
    if len(a.trees) < 2:
        ap.error("name two trees or more (NAME=TREE), or use --child")
    ab(a)


if __name__ == "__main__":
    # run as a file: its folder (bench/, whose http.py would shadow the standard library's) off the path
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
    main()
