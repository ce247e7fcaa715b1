"""Host work per stage of one POST /v1/embed request (issue 27), in process: the functions the
server runs for a request, each timed on its own, for 1 input of 20 tokens and 32 inputs of
128 tokens, with a model-free backend and with the real model.

    python -m bench.stages --models /tmp/models/all-minilm-l6-v2     # → bench/results/stages-cpu.md
    python -m bench.stages --models DIR --backends model-free --reps 50

The app is built as `headwise serve` builds it (server.fastpath installed, the engine prepared
and started on a uvloop loop), with bench.standin.Instant (outputs of the right shapes at once)
or the service's own onnxruntime backend and Settings. Each stage is called `--reps` times
(fewer once `--budget` seconds have passed) on the same request: its median wall time, and the
process's CPU time per call (every thread: tokenizers' and onnxruntime's pools do a stage's
work off the calling thread), both less an empty call's. Then the same request end to end: the
engine's embed (event loop → inference thread → event loop) and the whole app on uvicorn's
request cycle and a loopback socket. Not measured: reading and parsing the request's bytes
(httptools) and the connection's own events, which only a real server shows (bench.overhead).
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import shlex
import sys
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter, perf_counter_ns, process_time_ns
from unittest import mock

import numpy as np
import orjson

from bench.stages_calls import (
    Answering,
    Asked,
    Captured,
    Recorder,
    Replay,
    StageGone,
    batch_feeds,
    batching,
    body_parser,
    copy_out,
    in_order,
    need,
    route_call,
    serialise_parts,
    swapped,
    tokenizer_parts,
)
from bench.stages_http import Loopback, body_receive, http_scope

PATH = "/v1/embed"
SHAPES = ((1, 20), (32, 128))  # (inputs, tokens each)
MODEL_FREE, ORT = "model-free", "onnxruntime"
OUT = Path(__file__).resolve().parent / "results" / "stages-cpu.md"
MIN_REPS = 3


# -- timing ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Timing:
    """One call's cost, in µs."""

    wall_us: float  # median per call
    cpu_us: float  # the process's CPU per call (mean)
    reps: int


async def _settle(value):
    return await value if inspect.isawaitable(value) else value


class Clock:
    """Times a call `reps` times (at least MIN_REPS, fewer once `budget_s` has passed), after
    one untimed warm-up call, less an empty call's cost."""

    def __init__(self, reps: int, budget_s: float):
        self.reps, self.budget_s = reps, budget_s
        self._empty = (0.0, 0.0)

    async def calibrate(self) -> None:
        empty = await self.time(lambda: None)
        self._empty = (empty.wall_us, empty.cpu_us)

    async def time(self, call, setup=None, after=None) -> Timing:
        """`call(*setup())`, awaited when it answers an awaitable; `setup` before and `after(answer)`
        after each call are not timed."""
        walls, cpu, deadline = [], 0, perf_counter() + self.budget_s
        for i in range(self.reps + 1):
            args = await _settle(setup()) if setup else ()
            c0, t0 = process_time_ns(), perf_counter_ns()
            answer = call(*args)
            if inspect.isawaitable(answer):
                answer = await answer
            t1, c1 = perf_counter_ns(), process_time_ns()
            if after:
                await _settle(after(answer))
            if i:
                walls.append(t1 - t0)
                cpu += c1 - c0
                if len(walls) >= MIN_REPS and perf_counter() > deadline:
                    break
        # A cheap stage less the empty call's cost can come out below zero on a busy machine (and
        # CPU is the process's, other threads' included): it reads as nothing, not as negative.
        wall = max(0.0, float(np.median(walls)) / 1e3 - self._empty[0])
        return Timing(wall, max(0.0, cpu / len(walls) / 1e3 - self._empty[1]), len(walls))


# -- one profile -------------------------------------------------------------------------------
@dataclass
class Row:
    """One measured call: the stage it belongs to and what runs."""

    stage: str
    what: str
    timing: Timing
    part: bool = False  # "of which": measured inside the row above, not added to the total


@dataclass
class Profile:
    """One request shape on one backend: its stages, and the request end to end."""

    backend: str
    inputs: int
    tokens: int
    rows: list[Row] = field(default_factory=list)
    whole: list[Row] = field(default_factory=list)  # end to end, in process
    batches: list[tuple[int, int]] = field(default_factory=list)  # (inputs, padded length) per run
    body_bytes: tuple[int, int] = (0, 0)  # the response body's, and the bound the route counts for it
    served: str = ""  # what the backend serves, and how

    @property
    def total(self) -> Timing:
        rows = [r.timing for r in self.rows if not r.part]
        return Timing(sum(t.wall_us for t in rows), sum(t.cpu_us for t in rows), min(t.reps for t in rows))


def served_by(backend) -> str:
    """The backend's class, provider, precision, variants and (onnxruntime) intra-op threads."""
    threads = getattr(backend, "threads", None)
    return (f"{type(backend).__name__}: provider {backend.provider}, {backend.precision}, variants "
            f"{backend.variants}" + (f", {threads} intra-op threads" if threads else ""))


class Sitting:
    """One POST /v1/embed of `texts`: each stage timed on its own, in the order the server runs
    them, then the request end to end."""

    def __init__(self, app, texts: list[str], clock: Clock, conn: Loopback, backend: str):
        self.app, self.clock, self.conn = app, clock, conn
        self.engine = app.state.engine
        self.rt = next(iter(self.engine.models.values()))
        self.body = orjson.dumps({"inputs": texts[0] if len(texts) == 1 else texts})
        self.prof = Profile(backend, len(texts), 0, served=served_by(self.rt.backend))

    async def run(self) -> Profile:
        from headwise.service.engine.batching import Job
        from headwise.service.engine.params import EmbedResult

        inputs, params = await self.parse()
        job = Job(len(inputs), inputs=inputs, params=params)
        role = "attention" if params.attention is not None else "embed"  # as EncoderRuntime._submit
        entries = await self.tokenise(job)
        data = await self.run_batches(role, job, entries)
        await self.answer(EmbedResult(self.rt.name, self.rt.package.version, data, job.answer_bytes))
        await self.end_to_end(inputs, params)
        return self.prof

    async def time(self, stage: str, what: str, call, part: bool = False, **how) -> None:
        self.prof.rows.append(Row(stage, what, await self.clock.time(call, **how), part))

    async def parse(self) -> tuple[list, object]:
        """The body parsed as the route's dependency parses it; then the route run as far as
        the engine, for the inputs and params it hands over."""
        from starlette.requests import Request

        from headwise.service.api.dependencies import disconnect_probe, get_engine
        from headwise.service.api.timing import started_at

        scope, receive = http_scope(PATH, self.body), body_receive(self.body)
        parse = body_parser(self.app, PATH)
        await self.time("parse", "Request + the route's json_body (pydantic model_validate_json)",
                        lambda: parse(Request(scope, receive)))
        self.answering = Answering(self.engine)
        self.endpoint = route_call(self.app, PATH, {parse: await parse(Request(scope, receive)),
                                                    get_engine: self.answering, disconnect_probe: None,
                                                    started_at: perf_counter()})
        self.request = Request(http_scope(PATH, self.body))
        with suppress(Asked):
            await self.endpoint(self.request)
        return self.answering.asked

    async def tokenise(self, job) -> list:
        """The batcher's tokenising and its checks → the job's entries."""
        rt, inputs, truncate = self.rt, job.inputs, job.params.truncate
        encode, entries_of = need(rt.tokenizer, "encode_unchecked"), need(rt, "entries")
        await self.time("tokenise", "TextTokenizer.encode_unchecked", lambda: encode(inputs, truncate))
        for what, call in tokenizer_parts(rt.package, inputs).items():
            await self.time("tokenise", what, call, part=True)
        encs = encode(inputs, truncate)
        self.prof.tokens = encs[0].length
        await self.time("validate", "batcher: EncoderRuntime.entries (max_len, answer bound, metrics, Entry "
                        "objects)", lambda: entries_of(job, encs))
        return entries_of(job, encs)

    async def run_batches(self, role: str, job, entries) -> list:
        """Batch, pad, run and cut out the results → each input's Embedded, in order."""
        rt = self.rt
        batch, feeds, run_batch = batching(rt, role, job, entries), batch_feeds(rt), need(rt, "run_batch")
        await self.time("pad and batch", "Batcher.plan (or submit and cut when it does not fit one batch)", batch)
        batches = batch()
        self.prof.batches = [(len(b), padded) for b, padded in batches]
        await self.time("pad and batch", "batch_feeds (padded int64 arrays), per batch",
                        lambda: [feeds(b, padded) for b, padded in batches])
        recorder = Recorder(rt.backend)
        with swapped(rt, backend=recorder):
            answers = [run_batch(role, b, padded) for b, padded in batches]
        real, runs = rt.backend, recorder.runs
        await self.time("device run", f"{type(real).__name__}.run, per batch",
                        lambda: [real.run(r, f, o) for r, f, o, _ in runs])
        if (copy := copy_out(real, runs)) is not None:
            await self.time("device run", "copy out: IOBinding's copy_outputs_to_cpu of the same outputs", copy,
                            part=True)
        with swapped(rt, backend=Replay(recorder), feeds=lambda entries, padded, role="embed": {}):
            await self.time("post-process", "EncoderRuntime.run_batch after the run (outputs answered at once)",
                            lambda: [run_batch(role, b, padded) for b, padded in batches])
        return in_order(batches, answers, job.size)

    async def answer(self, result) -> None:
        """The route's own checks and params, its JSON, the write."""
        from headwise.service.api.responses import budgeted_json
        from headwise.service.api.routers import embed as router

        self.answering.result = result
        captured = Captured()
        need(router, "answer")
        with mock.patch.object(router, "answer", captured):
            route = await self.clock.time(lambda: self.endpoint(self.request))
        self.prof.rows.insert(1, Row("validate", "route: engine.get, EmbedParams, Engine.check_inputs, response bound "
                                     "(embed answered at once)", route))  # in the request's order: after parse
        budget, size, build = captured.args
        self.prof.body_bytes = (len(orjson.dumps(build(), option=orjson.OPT_SERIALIZE_NUMPY)), size)
        await self.time("serialise", "budgeted_json: the route's build() + orjson (on a thread when over 64 KiB)",
                        lambda: budgeted_json(budget, size, build), after=lambda r: r.reservation.release())
        for what, call in serialise_parts(build).items():
            await self.time("serialise", what, call, part=True)
        conn = self.conn

        async def respond():
            return await budgeted_json(budget, size, build), conn.cycle(http_scope(PATH, self.body))

        async def write(response, cycle) -> None:
            await response(cycle.scope, cycle.receive, cycle.send)
            conn.flush()

        await self.time("write", "BudgetedResponse → uvicorn's cycle.send → CoalescingTransport → loopback socket",
                        write, setup=respond, after=lambda _: conn.drained())

    async def end_to_end(self, inputs: list, params) -> None:
        """An empty hop to the inference thread, the engine's embed, and the whole request in
        process: what the stages leave out (scheduling, bookkeeping between them)."""
        app, conn, engine, rt = self.app, self.conn, self.engine, self.rt
        loop, executor = asyncio.get_running_loop(), need(rt, "batchers")["embed"].executor
        whole = self.prof.whole

        def request():
            scope = http_scope(PATH, self.body)
            return scope, conn.cycle(scope, self.body)

        async def answer(scope, cycle) -> None:
            await app(scope, cycle.receive, cycle.send)
            conn.flush()
            if not cycle.response_complete:
                raise StageGone(f"POST {PATH} did not complete its response in process")

        whole.append(Row("hop", "an empty round trip to the inference thread (run_in_executor, as "
                         "Lane.serve)", await self.clock.time(lambda: loop.run_in_executor(executor, int))))
        whole.append(Row("engine", "Engine.embed: event loop → inference thread (tokenise, batch, run, results) → "
                         "event loop", await self.clock.time(lambda: engine.embed(rt, inputs, params))))
        whole.append(Row("request", "the whole request: uvicorn's cycle → ServiceMiddleware → fast path → route → "
                         "engine → socket", await self.clock.time(answer, setup=request,
                                                                  after=lambda _: conn.drained())))


# -- the app around a package --------------------------------------------------------------------
def serve(package_dir: Path, backend: str, provider: str):
    """The app `headwise serve` runs on this one package (the fast path installed), its engine's
    sessions made and warmed up; started later, on the running loop."""
    from bench.standin import Instant
    from headwise.service.api.app import create_app
    from headwise.service.server import fastpath
    from headwise.service.settings import Settings

    settings = Settings(models_dir=package_dir, provider=provider)
    app = fastpath.install(create_app(settings, backend_factory=Instant if backend == MODEL_FREE else None))
    app.state.engine.load_packages()
    app.state.engine.prepare()
    return app


async def profile_all(package_dir: Path, backends, shapes, clock: Clock, provider: str = "cpu") -> list[Profile]:
    """Every backend × shape: the app built and started once per backend."""
    from bench.workload import Workload

    work = Workload(package_dir)
    await clock.calibrate()
    conn = await Loopback.open()
    out = []
    try:
        for backend in backends:
            app = serve(work.dir, backend, provider)
            app.state.engine.start()
            try:
                for n, tokens in shapes:
                    texts = work.texts(tokens, n)
                    out.append(await Sitting(app, texts, clock, conn, backend).run())
            finally:
                await app.state.engine.close(1.0)
    finally:
        await conn.close()
    return out


def run(package_dir: Path, backends=(MODEL_FREE, ORT), shapes=SHAPES, reps: int = 200, budget_s: float = 4.0,
        provider: str = "cpu") -> list[Profile]:
    """profile_all on a uvloop loop, as the server runs."""
    import uvloop

    loop = uvloop.new_event_loop()
    try:
        return loop.run_until_complete(profile_all(Path(package_dir), backends, shapes, Clock(reps, budget_s),
                                                   provider))
    finally:
        loop.close()


def main() -> None:
    from bench.stages_report import write_report

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", required=True, help="a package folder, or a folder holding one package")
    ap.add_argument("--reps", type=int, default=200, help="calls per stage (fewer past --budget)")
    ap.add_argument("--budget", type=float, default=4.0, help="seconds per stage, at least 3 calls whatever")
    ap.add_argument("--backends", default=f"{MODEL_FREE},{ORT}", help=f"{MODEL_FREE} and/or {ORT}")
    ap.add_argument("--shapes", default=",".join(f"{n}x{t}" for n, t in SHAPES), help="INPUTSxTOKENS,...")
    ap.add_argument("--provider", default="cpu", choices=("cpu", "cuda", "auto"), help="HEADWISE_PROVIDER")
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args()
    from bench.workload import find_package

    shapes = [tuple(int(x) for x in s.split("x")) for s in a.shapes.split(",")]
    profiles = run(find_package(a.models), a.backends.split(","), shapes, a.reps, a.budget, a.provider)
    command = "python -m bench.stages " + " ".join(shlex.quote(x) for x in sys.argv[1:])
    write_report(a.out, profiles, command, a.provider, {"reps": a.reps, "budget_s": a.budget})
    print(a.out.read_text())
    print(json.dumps({"written": str(a.out)}))


if __name__ == "__main__":
    main()
