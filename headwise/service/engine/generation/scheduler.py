"""One generation scheduler per model: a task on the event loop that, each iteration,
admits waiting requests (joining their caches to the running batch), steps every active
sequence together by one token on the model's inference thread, delivers the tokens, and
drops finished and cancelled rows. onnxruntime never runs on the event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque

from headwise.service.cpu import lowered_thread
from headwise.service.engine.generation.batch import Batch, Stepper, join, keep
from headwise.service.engine.generation.sequence import Sequence
from headwise.service.errors import NotReady, Overloaded

log = logging.getLogger("headwise.service")


class Scheduler:
    def __init__(self, stepper: Stepper, name: str, max_rows: int, max_queue: int):
        self.stepper = stepper
        self.name = name
        self.max_rows = max_rows
        self.max_queue = max_queue
        self.waiting: deque[Sequence] = deque()
        self.batch: Batch | None = None
        self.active = 0
        self.closed = False
        self._wake = asyncio.Event()
        self._pool = lowered_thread(f"headwise-gen-{name}")
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name=f"generate-{self.name}")

    def submit(self, seq: Sequence) -> None:
        if self.closed:
            raise NotReady("the server is draining")
        if len(self.waiting) + self.active >= self.max_queue:
            raise Overloaded(f"{self.max_queue} generations queued or running; try again shortly")
        self.waiting.append(seq)
        self._wake.set()

    def depth(self) -> int:
        return len(self.waiting) + self.active

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if self.batch is None and not self.waiting:
                self._wake.clear()
                await self._wake.wait()
                continue
            room = self.max_rows - (len(self.batch.rows) if self.batch else 0)
            new = []
            while self.waiting and len(new) < room:
                s = self.waiting.popleft()
                if not s.cancelled:
                    new.append(s)
            try:
                delivered = await loop.run_in_executor(self._pool, self._iterate, new)
            except Exception as e:  # a graph failed: end every request in it, keep serving
                log.exception("generation step failed on model %s", self.name)
                for s in new + (self.batch.rows if self.batch else []):
                    s.fail(e)
                self.batch = None
                self.active = 0
                continue
            for seq, events in delivered:
                if events:
                    seq.deliver(events)
            await asyncio.sleep(0)  # let requests and disconnects in between steps

    def _iterate(self, new: list[Sequence]) -> list:
        """Inference thread: drop what ended, admit `new`, one step for the batch."""
        events = []
        self.batch = keep(self.batch)
        if new:
            admitted, events = self.stepper.admit(new)
            self.batch = join(self.batch, admitted)
        if self.batch is not None:
            events += self.stepper.step(self.batch) if self._ready_to_step(new) else []
            self.batch = keep(self.batch)
        self.active = len(self.batch.rows) if self.batch else 0
        return events

    def _ready_to_step(self, new: list[Sequence]) -> bool:
        # A decoder's new rows have just had their first token from prefill; stepping at once
        # is fine too, but a separate iteration lets that token reach the client first.
        if not self.stepper.decoder_only or not new:
            return True
        return any(s not in new for s in self.batch.rows)

    def abort(self, error: Exception) -> None:
        """Grace period over: every generation still waiting or running fails with `error` now
        (its rows are cancelled, so the loop drops them at its next step)."""
        for s in list(self.waiting) + (self.batch.rows if self.batch else []):
            s.fail(error)

    async def close(self, timeout: float = 5.0) -> None:
        self.closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, asyncio.TimeoutError, Exception):
                await asyncio.wait_for(asyncio.shield(self._task), timeout)
        err = NotReady("the server is shutting down")
        for s in list(self.waiting) + (self.batch.rows if self.batch else []):
            s.fail(err)
        self._pool.shutdown(wait=False, cancel_futures=True)
