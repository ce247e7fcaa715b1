"""The engine process's core (process mode, docs/architecture.md#process-mode): it holds the
only sessions and runs what every front-end sends, on threads of its own so that the device
never waits on a socket:

- the IO thread owns the ROUTER socket the front-ends connect to: it reads their messages,
  answers `Hello` and `Ping` at once, queues `Run`s, and sends the results the run thread
  hands it over an inproc socket (a ZMQ socket is used by one thread only);
- the run thread takes the oldest run (plain work before analytics rows, whose lane keeps its
  priority here too) and, for the roles whose rows stack, every queued run of the same model,
  role, outputs and padded length, up to the batch limits; runs them as one batch on the
  backend; and cuts each front-end's rows back out.

Front-ends batch their own requests (service.engine.batching) and send each batch as one run;
the core stacks the batches that F front-ends sent while the device was busy into one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import zmq

from headwise.service.backends import wire
from headwise.service.backends.onnxruntime import Backend

log = logging.getLogger("headwise.service")

# Roles whose runs stack along the batch axis: no attention weights among their outputs, so
# stacking stays within the attention budget each front-end cut its batch by.
STACKED = ("embed", "analytics")
OUTBOX = "inproc://headwise-engine-outbox"


@dataclass(slots=True)
class Pending:
    ident: bytes
    run: wire.Run
    feeds: dict[str, np.ndarray]
    key: tuple | None  # what a run must share to stack with it (None: it runs alone)
    rows: int
    tokens: int  # rows × padded length


def _key(run: wire.Run, feeds: dict[str, np.ndarray]) -> tuple | None:
    if run.role not in STACKED:
        return None
    return (run.model, run.role, tuple(run.outputs), tuple((n, a.dtype.str, a.shape[1:]) for n, a in feeds.items()))


class EngineCore:
    """`backends`: model name → its loaded (and warmed) backend. `on_run(model, role, runs,
    rows, seconds)` is told of every device run."""

    def __init__(self, backends: dict[str, Backend], address: str, *, max_batch_size: int, max_batch_tokens: int,
                 on_run: Callable[[str, str, int, int, float], None] | None = None):
        self.backends = backends
        self.address = address
        self.max_batch_size, self.max_batch_tokens = max_batch_size, max_batch_tokens
        self.on_run = on_run or (lambda *_: None)
        self._ctx = zmq.Context()
        self._pending: deque[Pending] = deque()
        self._cond = threading.Condition()
        self._stopping = False
        self._run_done = threading.Event()
        self._bound = threading.Event()
        self._failed: BaseException | None = None
        self.welcome = wire.Welcome(pid=0, models={
            name: wire.ModelFacts(b.provider, b.precision, dict(b.variants)) for name, b in backends.items()})
        self._threads = [threading.Thread(target=self._io, name="headwise-engine-io", daemon=True),
                         threading.Thread(target=self._runs, name="headwise-engine-run", daemon=True)]

    def start(self, pid: int) -> None:
        """Bind and serve; returns once the socket is bound (raises what binding raised)."""
        self.welcome.pid = pid
        for t in self._threads:
            t.start()
        self._bound.wait()
        if self._failed is not None:
            raise self._failed

    def stop(self, timeout: float) -> None:
        """Runs already queued are finished and answered; later ones get `not_ready`."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        for t in self._threads:
            t.join(timeout)
        self._ctx.destroy(linger=0)

    # -- the IO thread ------------------------------------------------------------------------
    def _io(self) -> None:
        router = self._ctx.socket(zmq.ROUTER)
        outbox = self._ctx.socket(zmq.PULL)
        try:
            router.bind(self.address)
            outbox.bind(OUTBOX)
        except zmq.ZMQError as e:
            self._failed = e
            self._bound.set()
            return
        self._bound.set()
        poller = zmq.Poller()
        poller.register(router, zmq.POLLIN)
        poller.register(outbox, zmq.POLLIN)
        while True:
            ready = dict(poller.poll(50))
            if outbox in ready:
                while True:
                    try:
                        router.send_multipart(outbox.recv_multipart(zmq.NOBLOCK, copy=False), copy=False)
                    except zmq.Again:
                        break
            if router in ready:
                while True:
                    try:
                        frames = router.recv_multipart(zmq.NOBLOCK, copy=False)
                    except zmq.Again:
                        break
                    self._receive(router, frames)
            if self._run_done.is_set() and not ready:
                break
        router.close(linger=200)
        outbox.close(linger=0)

    def _receive(self, router, frames: list) -> None:
        ident = frames[0].bytes
        try:
            msg, arrays = wire.decode(frames[1:])
        except Exception as e:  # a front-end of another version: it gets a failure, the engine goes on
            log.error("engine: undecodable message: %s", e)
            router.send_multipart([ident, *wire.encode(wire.Failure(-1, "error", f"undecodable message: {e}"))])
            return
        if isinstance(msg, wire.Run):
            refusal = self._refusal(msg)
            if refusal is None:
                rows = next(iter(arrays.values())).shape[0] if arrays else 0
                length = next(iter(arrays.values())).shape[1] if arrays else 0
                with self._cond:
                    if not self._stopping:
                        self._pending.append(Pending(ident, msg, arrays, _key(msg, arrays), rows, rows * length))
                        self._cond.notify()
                        return
                refusal = wire.Failure(msg.seq, "not_ready", "the engine is stopping")
            router.send_multipart([ident, *wire.encode(refusal)])
        elif isinstance(msg, wire.Ping):
            router.send_multipart([ident, *wire.encode(wire.Pong())])
        elif isinstance(msg, wire.Hello):
            router.send_multipart([ident, *wire.encode(self.welcome)])

    def _refusal(self, run: wire.Run) -> wire.Failure | None:
        backend = self.backends.get(run.model)
        if backend is None or run.role not in backend.variants:
            return wire.Failure(run.seq, "unknown", f"the engine serves no {run.role!r} of model {run.model!r}")
        return None

    # -- the run thread -----------------------------------------------------------------------
    def _runs(self) -> None:
        out = self._ctx.socket(zmq.PUSH)
        out.connect(OUTBOX)
        try:
            while True:
                with self._cond:
                    while not self._pending and not self._stopping:
                        self._cond.wait()
                    if not self._pending:
                        break
                    group = self._take()
                for frames in self._run(group):
                    out.send_multipart(frames, copy=False)
        finally:
            out.close(linger=1000)
            self._run_done.set()

    def _take(self) -> list[Pending]:
        """The next device run: the oldest plain run (else the oldest analytics one) and the
        queued runs that stack with it, within the batch limits. Holds the lock."""
        pending = self._pending
        first = next((p for p in pending if p.run.role != "analytics"), pending[0])
        pending.remove(first)
        group, rows, tokens = [first], first.rows, first.tokens
        if first.key is None:
            return group
        for p in list(pending):
            if p.key == first.key and rows + p.rows <= self.max_batch_size and tokens + p.tokens <= self.max_batch_tokens:
                pending.remove(p)
                group.append(p)
                rows += p.rows
                tokens += p.tokens
        return group

    def _run(self, group: list[Pending]) -> list[list]:
        """Each run's answer frames, addressed to its front-end."""
        first = group[0].run
        if len(group) == 1:
            feeds = group[0].feeds
        else:
            feeds = {name: np.concatenate([p.feeds[name] for p in group]) for name in group[0].feeds}
        t0 = time.perf_counter()
        try:
            out = self.backends[first.model].run(first.role, feeds, first.outputs)
        except Exception as e:
            log.exception("engine: %s run of model %s failed", first.role, first.model)
            return [[p.ident, *wire.encode(wire.Failure(p.run.seq, "error", f"{type(e).__name__}: {e}"))]
                    for p in group]
        self.on_run(first.model, first.role, len(group), sum(p.rows for p in group), time.perf_counter() - t0)
        answers, at = [], 0
        for p in group:
            mine = {name: a[at:at + p.rows] for name, a in out.items()} if len(group) > 1 else out
            at += p.rows
            answers.append([p.ident, *wire.encode(wire.Result(p.run.seq, wire.specs(mine)), mine)])
        return answers
