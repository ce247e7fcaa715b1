"""A front-end's backend in process mode (docs/architecture.md#process-mode): the same
`run(role, feeds, outputs)` as `OrtBackend`, carried over ZMQ IPC to the engine process that
holds the sessions (service.backends.core). Everything above the backend (batchers, heads,
analytics, generation) is the one code path of both modes; only this transport differs, as
vLLM's in-process and multi-process clients drive one EngineCore.

onnxruntime is never imported here: a front-end opens no session and no CUDA context.
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
import threading
from collections.abc import Awaitable, Callable
from itertools import count

import numpy as np
import zmq
import zmq.asyncio

from headwise.service.backends import wire
from headwise.service.backends.queues import FrontEndQueues, QueueTable, SharedQueue
from headwise.service.errors import Disconnected, NotReady
from headwise.service.package import ModelPackage, PackageError
from headwise.service.settings import Settings

log = logging.getLogger("headwise.service")

POLL_MS = 50  # how often a waiting run looks whether the engine is still there
ABORT_POLL_S = 0.05  # how often a run awaited on a loop asks whether its clients are still there
WATCH_S = 0.1  # how often the watchdog looks
GONE = "the engine process is gone; the server is restarting"


class EngineGone(NotReady):
    """The engine process died: every run waiting and every later one gets 503."""


class EngineLink:
    """One front-end's connection to the engine: per thread that runs (each batcher's inference
    thread, the generation scheduler's) a DEALER socket its runs go out on and a PULL socket
    their answers come back to, one run in flight each; and a watchdog that notices the
    engine's death within WATCH_S. `on_lost` callbacks run on the watchdog's thread."""

    def __init__(self, address: str, connect_timeout_s: float = 30.0, slot: tuple[int, int] | None = None):
        """`slot`: (this front-end's number, how many there are): its column of the engine's
        queue table; None: the queue bound stays this front-end's own."""
        self.address = address
        self._ctx = zmq.Context()
        self._local = threading.local()
        self._seq, self._n = count(), count()
        # each running thread's answers come to a socket of its own, beside the engine's
        self._dir = os.path.dirname(address[len("ipc://"):]) if address.startswith("ipc://") else tempfile.gettempdir()
        self._sockets: list[zmq.Socket] = []
        self._lock = threading.Lock()
        self.lost: str | None = None
        self._on_lost: list[Callable[[str], None]] = []
        self._loops: dict[asyncio.AbstractEventLoop, _LoopSockets] = {}
        self.welcome = self._hello(connect_timeout_s)
        self.queues: FrontEndQueues | None = None
        if slot is not None and self.welcome.queue_table:
            table = QueueTable(self.welcome.queue_table, len(self.welcome.queues))
            self.queues = table.front_end(*slot)
        self._watch = threading.Thread(target=self._watchdog, name="headwise-engine-watch", daemon=True)
        self._watch.start()

    def _hello(self, timeout_s: float) -> wire.Welcome:
        sock = self._ctx.socket(zmq.DEALER)
        sock.connect(self.address)
        try:
            sock.send_multipart(wire.encode(wire.Hello()))
            if not sock.poll(int(timeout_s * 1000)):
                raise PackageError(f"no engine answered at {self.address} within {timeout_s:.0f} s")
            msg, _ = wire.decode(sock.recv_multipart())
        finally:
            sock.close(linger=0)
        if not isinstance(msg, wire.Welcome):
            raise PackageError(f"the engine at {self.address} answered {type(msg).__name__} to hello")
        return msg

    def on_lost(self, callback: Callable[[str], None]) -> None:
        self._on_lost.append(callback)

    def backend(self, package: ModelPackage, settings: Settings) -> RemoteBackend:
        """The engine's backend factory in a front-end (service.engine.encoder.BackendFactory)."""
        facts = self.welcome.models.get(package.name)
        if facts is None:
            raise PackageError(f"the engine process does not serve model {package.name!r} "
                               f"(it serves {', '.join(sorted(self.welcome.models)) or 'nothing'})")
        return RemoteBackend(self, package.name, facts)

    def close(self) -> None:
        self.lost = self.lost or "closed"
        for here in self._loops.values():  # made through a shadow of the context: not in its list
            here.reader.cancel()
            here.send.close(linger=0)
            here.recv.close(linger=0)
        self._ctx.destroy(linger=0)

    # -- runs (any thread) ----------------------------------------------------------------------
    def _sockets_here(self) -> tuple[zmq.Socket, zmq.Socket, str]:
        """This thread's (DEALER to the engine, PULL its answers come to, that PULL's address)."""
        mine = getattr(self._local, "mine", None)
        if mine is None:
            send = self._ctx.socket(zmq.DEALER)
            send.connect(self.address)
            recv = self._ctx.socket(zmq.PULL)
            recv.RCVTIMEO = POLL_MS
            address = wire.answer_address(self._dir, "r", next(self._n))
            recv.bind(address)
            mine = self._local.mine = (send, recv, address)
            with self._lock:
                self._sockets += [send, recv]
        return mine

    def run(self, model: str, role: str, feeds: dict[str, np.ndarray], outputs: list[str],
            trace: list[str] | None = None) -> dict[str, np.ndarray]:
        if self.lost:
            raise EngineGone(GONE)
        send, recv, address = self._sockets_here()
        seq = next(self._seq)
        run = wire.Run(seq, address, model, role, outputs, wire.specs(feeds), trace or [])
        send.send_multipart(wire.encode(run, feeds), copy=False)
        while True:
            try:
                frames = recv.recv_multipart(copy=False)
                break
            except zmq.Again:
                if self.lost:
                    raise EngineGone(GONE) from None
        msg, arrays = wire.decode(frames)
        if getattr(msg, "seq", None) != seq:
            raise RuntimeError(f"engine answered run {getattr(msg, 'seq', None)} to run {seq}")
        return _answer(msg, arrays)

    # -- runs awaited on an event loop ----------------------------------------------------------
    async def run_async(self, model: str, role: str, feeds: dict[str, np.ndarray], outputs: list[str],
                        gone: Gone | None = None, trace: list[str] | None = None) -> dict[str, np.ndarray]:
        """`run`, awaited on the running loop: no thread waits, and the loop reads the answer
        when its socket is readable. While it waits, `gone()` is asked every ABORT_POLL_S which
        rows' clients have gone, and the engine is told (`Abort`); when all have, the run
        raises Disconnected at once."""
        if self.lost:
            raise EngineGone(GONE)
        loop = asyncio.get_running_loop()
        here = self._loops.get(loop)
        if here is None:
            here = self._loops[loop] = _LoopSockets(self, loop)
        return await here.run(model, role, feeds, outputs, gone, trace)

    # -- the watchdog -------------------------------------------------------------------------
    def _watchdog(self) -> None:
        pid = self.welcome.pid
        stop = threading.Event()
        while not stop.wait(WATCH_S):
            if self.lost:
                return
            if not _alive(pid):
                self.lost = GONE
                log.error("engine process %d is gone: answering 503 until the supervisor restarts the server", pid)
                for callback in self._on_lost:
                    callback(GONE)
                for loop, here in list(self._loops.items()):
                    loop.call_soon_threadsafe(here.fail, EngineGone(GONE))
                return


def _alive(pid: int) -> bool:
    """Whether process `pid` runs (not a zombie awaiting its parent)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


Gone = Callable[[], Awaitable[set[int]]]  # the rows of a run whose clients have gone


class _LoopSockets:
    """One event loop's sockets to the engine: runs go out on a DEALER, and one reader task
    hands each answer that comes to the loop's PULL to the run awaiting it (by `seq`)."""

    def __init__(self, link: EngineLink, loop: asyncio.AbstractEventLoop):
        ctx = zmq.asyncio.Context.shadow(link._ctx)
        self.link = link
        self.send = ctx.socket(zmq.DEALER)
        self.send.connect(link.address)
        self.recv = ctx.socket(zmq.PULL)
        self.address = wire.answer_address(link._dir, "a", next(link._n))
        self.recv.bind(self.address)
        self.waiting: dict[int, asyncio.Future] = {}
        self.reader = loop.create_task(self._read())

    async def _read(self) -> None:
        while True:
            try:
                frames = await self.recv.recv_multipart(copy=False)
            except zmq.ZMQError:  # the link closed (shutting down)
                return
            try:
                msg, arrays = wire.decode(frames)
            except Exception as e:
                log.error("front-end: undecodable answer from the engine: %s", e)
                continue
            fut = self.waiting.pop(getattr(msg, "seq", -1), None)
            if fut is not None and not fut.done():
                fut.set_result((msg, arrays))

    def fail(self, exc: Exception) -> None:
        for fut in self.waiting.values():
            if not fut.done():
                fut.set_exception(exc)
        self.waiting.clear()

    async def run(self, model: str, role: str, feeds: dict[str, np.ndarray], outputs: list[str],
                  gone: Gone | None, trace: list[str] | None = None) -> dict:
        seq = next(self.link._seq)
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self.waiting[seq] = fut
        watch = _Watch(self, seq, len(next(iter(feeds.values()), ())), fut, gone) if gone else None
        try:
            await self.send.send_multipart(
                wire.encode(wire.Run(seq, self.address, model, role, outputs, wire.specs(feeds), trace or []), feeds),
                copy=False)
            if watch:
                watch.arm(loop)
            msg, arrays = await fut
        finally:
            self.waiting.pop(seq, None)
            if watch:
                watch.disarm()
        return _answer(msg, arrays)


class _Watch:
    """A run's clients, looked at every ABORT_POLL_S while its answer is awaited (a timer: a run
    answered sooner costs one timer handle): the engine is told of the rows whose clients went,
    and a run with none left stops waiting."""

    __slots__ = ("fut", "gone", "rows", "seq", "sockets", "task", "timer", "told")

    def __init__(self, sockets: _LoopSockets, seq: int, rows: int, fut: asyncio.Future, gone: Gone):
        self.sockets, self.seq, self.rows, self.fut, self.gone = sockets, seq, rows, fut, gone
        self.told: set[int] = set()
        self.timer = self.task = None

    def arm(self, loop: asyncio.AbstractEventLoop) -> None:
        if not self.fut.done():
            self.timer = loop.call_later(ABORT_POLL_S, self._look, loop)

    def disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        if self.task is not None and not self.task.done():
            self.task.cancel()

    def _look(self, loop: asyncio.AbstractEventLoop) -> None:
        self.timer = None
        self.task = loop.create_task(self._check(loop))

    async def _check(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            gone = await self.gone() - self.told
        except Exception:  # a probe that fails: the run is awaited to its end, unwatched
            log.exception("front-end: asking whether a run's clients are there failed")
            return
        if gone and not self.fut.done():
            self.told |= gone
            every = len(self.told) >= self.rows
            await self.sockets.send.send_multipart(wire.encode(wire.Abort(
                self.seq, self.sockets.address, None if every else sorted(self.told))))
            if every:
                if not self.fut.done():
                    self.fut.set_exception(Disconnected("every client of the run has gone"))
                return
        self.arm(loop)


def _answer(msg, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    if isinstance(msg, wire.Failure):
        if msg.kind == "not_ready":
            raise NotReady(msg.message)
        raise RuntimeError(f"engine: {msg.message}")
    return arrays


class RemoteBackend:
    """A model's sessions in the engine process, behind `Backend`'s surface (and the
    generative backend's `has`). The engine warmed them before any front-end started."""

    warmed = True
    traces_device = True  # the engine process writes the device-run spans (backends.core)

    def __init__(self, link: EngineLink, model: str, facts: wire.ModelFacts):
        self.link, self.model = link, model
        self.provider, self.precision = facts.provider, facts.precision
        self.variants = dict(facts.variants)

    def has(self, variant: str) -> bool:
        return variant in self.variants

    def shared_queue(self, role: str) -> SharedQueue | None:
        """The queue of `role` (a batcher's) as every front-end fills it."""
        row = self.link.welcome.queues.get(f"{self.model}/{role}")
        return None if self.link.queues is None or row is None else self.link.queues.queue(row)

    def run(self, role: str, feeds: dict[str, np.ndarray], outputs: list[str],
            trace: list[str] | None = None) -> dict[str, np.ndarray]:
        """`trace`: the batch spans' traceparents, under which the engine writes the device run."""
        return self.link.run(self.model, role, feeds, outputs, trace)

    async def run_async(self, role: str, feeds: dict[str, np.ndarray], outputs: list[str],
                        gone: Gone | None = None, trace: list[str] | None = None) -> dict[str, np.ndarray]:
        return await self.link.run_async(self.model, role, feeds, outputs, gone, trace)
