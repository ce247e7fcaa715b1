"""The engine process's core (process mode, docs/architecture.md#process-mode): it holds the
only sessions and runs what every front-end sends, on one thread that owns both the ROUTER
socket the front-ends connect to and the device:

- between two device runs it reads every message that came meanwhile (ZMQ's own I/O thread,
  in C and without the GIL, received them while the device ran), answers `Hello` and `Ping`,
  and files each `Run` and `Abort`;
- it takes the oldest run (plain work before analytics rows, whose lane keeps its priority
  here too) and, for the roles whose rows stack, every queued run of the same model, role,
  outputs and padded length, up to the batch limits; runs them as one batch on the backend;
  cuts each front-end's rows back out and pushes each answer to the socket its run named
  (`reply_to`; ZMQ queues it and its I/O thread writes it). An `Abort` that arrives before its
  run starts takes the rows of clients that have gone out of it (a stacked run runs without
  them and answers zeros in their place); a run left with no row is dropped.

One thread, not a reading thread beside the running one: onnxruntime gives the GIL up while a
graph runs and must take it back when the run ends, and a second Python thread reading small
messages kept it from the running thread for milliseconds at a time (on the H200's host, a
0.7 ms run took 10 ms at the median beside such a thread: bench/results/engine-runs-h200.md).

Front-ends batch their own requests (service.engine.batching) and send each batch as one run;
the core stacks the batches that F front-ends sent while the device was busy into one.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import zmq

from headwise.service import tracing
from headwise.service.backends import wire
from headwise.service.backends.onnxruntime import Backend
from headwise.service.backends.queues import (
    QUEUES_FILE,
    RUN_CLOCK_FILE,
    QueueTable,
    RunClock,
    beside,
)
from headwise.service.errors import NotReady

log = logging.getLogger("headwise.service")

# Roles whose runs stack along the batch axis: no attention weights among their outputs, so
# stacking stays within the attention budget each front-end cut its batch by.
STACKED = ("embed", "analytics")
IDLE_POLL_MS = 50  # how long an idle engine waits for a message before it looks whether it is stopping
# Each front-end thread and event loop has an answer address of its own, and a restarted
# front-end new ones; a ZMQ context holds at most 1023 sockets. So once this many more answer
# sockets are open than after the last look, those of front-ends that have gone are closed.
SWEEP_EVERY = 32
REPLY_LINGER_MS = 1000  # at stop, an answer socket still delivers what it queued, this long


@dataclass(slots=True)
class Pending:
    run: wire.Run
    feeds: dict[str, np.ndarray]
    key: tuple | None  # what a run must share to stack with it (None: it runs alone)
    rows: int
    length: int  # padded
    dropped: set[int] = field(default_factory=set)  # rows whose clients have gone (stacked roles)

    @property
    def live(self) -> int:
        return self.rows - len(self.dropped)

    @property
    def tokens(self) -> int:
        return self.live * self.length

    def _kept(self) -> np.ndarray:
        return np.array([i for i in range(self.rows) if i not in self.dropped], dtype=np.intp)

    def live_feeds(self) -> dict[str, np.ndarray]:
        """The feeds of the rows whose clients are still there (every feed of a stacked role
        has its rows on axis 0)."""
        if not self.dropped:
            return self.feeds
        kept = self._kept()
        return {name: a[kept] for name, a in self.feeds.items()}

    def all_rows(self, out: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """`out` of the live rows, with zeros in the dropped rows' places."""
        if not self.dropped:
            return out
        kept, full = self._kept(), {}
        for name, a in out.items():
            full[name] = np.zeros((self.rows, *a.shape[1:]), a.dtype)
            full[name][kept] = a
        return full


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: it runs
        pass
    return True


def _key(run: wire.Run) -> tuple | None:
    """From the run's header: its arrays' names, dtypes and shapes past the rows."""
    if run.role not in STACKED:
        return None
    return (run.model, run.role, tuple(run.outputs), tuple((a.name, a.dtype, a.shape[1:]) for a in run.arrays))


class EngineCore:
    """`backends`: model name → its loaded (and warmed) backend. `on_run(model, role, runs,
    rows, seconds)` is told of every device run, `on_drop(model, rows)` of rows dropped by
    `Abort` before they ran, `on_exit(crash)` that the engine's thread has ended (`crash`: the
    exception that ended it, None after stop())."""

    def __init__(self, backends: dict[str, Backend], address: str, *, max_batch_size: int, max_batch_tokens: int,
                 on_run: Callable[[str, str, int, int, float], None] | None = None,
                 on_drop: Callable[[str, int], None] | None = None,
                 on_exit: Callable[[BaseException | None], None] | None = None):
        self.backends = backends
        self.address = address
        self.max_batch_size, self.max_batch_tokens = max_batch_size, max_batch_tokens
        self.on_run = on_run or (lambda *_: None)
        self.on_drop = on_drop or (lambda *_: None)
        self.on_exit = on_exit or (lambda *_: None)
        self._ctx = zmq.Context()
        self._stopping = self._destroying = False
        self._bound = threading.Event()
        self._failed: BaseException | None = None
        self.welcome = wire.Welcome(pid=0, models={
            name: wire.ModelFacts(b.provider, b.precision, dict(b.variants)) for name, b in backends.items()})
        self.queues: QueueTable | None = None
        self.clock: RunClock | None = None
        self._thread = threading.Thread(target=self._serve, name="headwise-engine", daemon=True)
        self._replies: dict[str, zmq.Socket] = {}  # reply_to → a PUSH socket (the thread's own)
        self._sweep_at = SWEEP_EVERY

    def start(self, pid: int) -> None:
        """Bind and serve; returns once the socket is bound (raises what binding raised)."""
        self.welcome.pid = pid
        if (path := beside(self.address, QUEUES_FILE)) is not None:  # shared with the front-ends
            names = sorted({f"{name}/{role}" for name, b in self.backends.items() for role in (*b.variants, "analytics")})
            self.queues = QueueTable.create(path, len(names))
            self.welcome.queue_table, self.welcome.queues = path, {n: i for i, n in enumerate(names)}
            self.clock = RunClock.create(beside(self.address, RUN_CLOCK_FILE))
        self._thread.start()
        self._bound.wait()
        if self._failed is not None:
            raise self._failed

    def stop(self, timeout: float) -> None:
        """Runs already read are finished and answered; those read from now on get `not_ready`."""
        self._stopping = True
        self._thread.join(timeout)
        self._destroying = True  # what the thread raises from now on is the context closing under it
        self._ctx.destroy(linger=0)

    # -- the engine's thread --------------------------------------------------------------------
    def _serve(self) -> None:
        router = self._ctx.socket(zmq.ROUTER)
        try:
            router.bind(self.address)
        except zmq.ZMQError as e:
            self._failed = e
            self._bound.set()
            return
        self._bound.set()
        pending: deque[Pending] = deque()
        read_stopping = False  # once the socket has been read since stop(), it is not read again
        crash: BaseException | None = None
        try:
            while True:
                stopping = self._stopping  # read before the socket: what is read after it is refused
                if not read_stopping:
                    self._read(router, pending)  # everything received meanwhile, so that it can stack
                    read_stopping = stopping
                if not pending:
                    if stopping:
                        return
                    router.poll(IDLE_POLL_MS)  # waits in ZMQ, the GIL let go
                    continue
                for p, frames in self._answers(self._take(pending)):
                    self._send(p.run.seq, p.run.reply_to, frames)
        except BaseException as e:  # a bug, or the context closed under a run that outlasted stop()
            if not self._destroying:  # a failure while draining is one too: what was queued is lost
                crash = e
                log.exception("engine: its thread failed; the engine process ends so that the server restarts")
        finally:
            for sock in self._replies.values():
                sock.close(linger=REPLY_LINGER_MS)
            router.close(linger=200)
            self.on_exit(crash)

    def _send(self, seq: int, reply_to: str, frames: list) -> None:
        """Queue an answer on the socket its run named, never waiting (no high-water mark: a
        front-end reads what it asked for); an address ZMQ refuses is logged and its answer
        dropped (nobody could read it), and the engine goes on."""
        try:
            sock = self._replies.get(reply_to)
            if sock is None:
                if len(self._replies) >= self._sweep_at:
                    self._sweep()
                sock = self._ctx.socket(zmq.PUSH)
                sock.sndhwm = 0
                try:
                    sock.connect(reply_to)
                except zmq.ZMQError:
                    sock.close(linger=0)
                    raise
                self._replies[reply_to] = sock
            sock.send_multipart(frames, copy=False, flags=zmq.NOBLOCK)
        except zmq.ZMQError as e:
            log.error("engine: the answer to run %d could not be sent to %r: %s", seq, reply_to, e)

    def _sweep(self) -> None:
        """Close the answer sockets of front-ends that have gone (what they queued: nobody reads it)."""
        for address in [a for a in self._replies if (pid := wire.owner(a)) is not None and not _alive(pid)]:
            self._replies.pop(address).close(linger=0)
        self._sweep_at = len(self._replies) + SWEEP_EVERY

    def _read(self, router, pending: deque[Pending]) -> None:
        while True:
            try:
                frames = router.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            self._receive(router, frames, pending)

    def _receive(self, router, frames: list, pending: deque[Pending]) -> None:
        ident = frames[0].bytes
        try:
            msg, arrays = wire.decode(frames[1:])
        except Exception as e:  # a front-end of another version: it is told, the engine goes on
            log.error("engine: undecodable message: %s", e)
            failure = f"undecodable message: {e}"
            if (run := wire.salvage(frames[1]) if len(frames) > 1 else None) is not None:  # told where it waits
                self._send(run[0], run[1], wire.encode(wire.Failure(run[0], "error", failure)))
            else:
                router.send_multipart([ident, *wire.encode(wire.Failure(-1, "error", failure))])
            return
        if isinstance(msg, wire.Run):
            first = next(iter(arrays.values()), None)
            rows, length = (first.shape[0], first.shape[1]) if first is not None and first.ndim > 1 else (0, 0)
            if (refusal := self._refusal(msg, rows)) is not None:  # answered now, not queued
                self._send(msg.seq, msg.reply_to, wire.encode(refusal))
                return
            pending.append(Pending(msg, arrays, _key(msg), rows, length))
        elif isinstance(msg, wire.Abort):
            self._abort(pending, msg)
        elif isinstance(msg, wire.Ping):
            router.send_multipart([ident, *wire.encode(wire.Pong())])
        elif isinstance(msg, wire.Hello):
            router.send_multipart([ident, *wire.encode(self.welcome)])

    def _refusal(self, run: wire.Run, rows: int) -> wire.Failure | None:
        if self._stopping:
            return wire.Failure(run.seq, "not_ready", "the engine is stopping")
        backend = self.backends.get(run.model)
        if backend is None or run.role not in backend.variants:
            return wire.Failure(run.seq, "unknown", f"the engine serves no {run.role!r} of model {run.model!r}")
        if run.role in STACKED:  # rows are counted and cut back out by the first array's
            for a in run.arrays:  # (the header's shapes are the arrays')
                if len(a.shape) < 2 or a.shape[0] != rows:
                    return wire.Failure(run.seq, "error", "a stacked run's arrays need rows on their first axis, "
                                                          "as many each")
        return None

    def _abort(self, pending: deque[Pending], abort: wire.Abort) -> None:
        """Take the gone clients' rows out of a run that has not started (one that has runs
        to its end: its answer is read by nobody). A run that does not stack is dropped only
        when all its rows have gone."""
        p = next((p for p in pending if p.run.seq == abort.seq and p.run.reply_to == abort.reply_to), None)
        if p is None:
            return
        rows = set(range(p.rows)) if abort.rows is None else {r for r in abort.rows if 0 <= r < p.rows}
        if p.key is None and len(rows) < p.rows:
            return
        new = rows - p.dropped
        p.dropped |= new
        if new:
            self.on_drop(p.run.model, len(new))
        if not p.live:
            pending.remove(p)

    def _take(self, pending: deque[Pending]) -> list[Pending]:
        """The next device run: the oldest plain run (else the oldest analytics one) and the
        queued runs that stack with it, within the batch limits."""
        first = next((p for p in pending if p.run.role != "analytics"), pending[0])
        pending.remove(first)
        group, rows, tokens = [first], first.live, first.tokens
        if first.key is None:
            return group
        for p in list(pending):
            if (p.key == first.key and rows + p.live <= self.max_batch_size
                    and tokens + p.tokens <= self.max_batch_tokens):
                pending.remove(p)
                group.append(p)
                rows += p.live
                tokens += p.tokens
        return group

    def _answers(self, group: list[Pending]) -> list[tuple[Pending, list]]:
        """Each run's answer frames; a run that fails on the host (stacking its rows, cutting
        them back out) or on the device fails its group alone."""
        try:
            return self._run(group)
        except Exception as e:
            run = group[0].run
            log.exception("engine: %s run of model %s failed", run.role, run.model)
            return [(p, wire.encode(wire.Failure(p.run.seq, "error", f"{type(e).__name__}: {e}"))) for p in group]

    def _run(self, group: list[Pending]) -> list[tuple[Pending, list]]:
        first = group[0]
        run = first.run
        lives = [p.live_feeds() for p in group]
        feeds = lives[0] if len(group) == 1 else {name: np.concatenate([f[name] for f in lives]) for name in first.feeds}
        backend = self.backends[run.model]
        try:
            if run.role in getattr(backend, "lazy", list)():  # made now, before the run's clock starts:
                backend.load(run.role)                         # a graph's load is no stuck device
        except NotReady as e:  # it cannot be (HEADWISE_ANALYSIS=lazy): said to each run that needs it
            return [(p, wire.encode(wire.Failure(p.run.seq, "not_ready", str(e)))) for p in group]
        t0 = time.perf_counter()
        if self.clock is not None:
            self.clock.started()
        try:
            out = backend.run(run.role, feeds, run.outputs)
        finally:
            if self.clock is not None:
                self.clock.ended()
        t1 = time.perf_counter()
        self.on_run(run.model, run.role, len(group), sum(p.live for p in group), t1 - t0)
        if tracing.ON:
            tracing.device_runs([tracing.context_of(tp) for p in group for tp in p.run.trace], t0, t1, **{
                "headwise.graph": run.role, "headwise.device.rows": sum(p.live for p in group),
                "headwise.device.stacked_runs": len(group)})
        answers, at = [], 0
        for p in group:
            mine = {name: a[at:at + p.live] for name, a in out.items()} if len(group) > 1 else out
            mine = p.all_rows(mine)
            at += p.live
            answers.append((p, wire.encode(wire.Result(p.run.seq, wire.specs(mine)), mine)))
        return answers
