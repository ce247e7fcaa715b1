"""Dynamic batching (docs/architecture.md): one queue per (model, variant).

Requests arrive as raw texts. The batcher decides what the next hop to the inference thread
does (`next` → Work) and takes its outcome back (`finish`); the engine runs the hop, so the
batcher calls nothing of the engine. A hop batch-encodes every request waiting (one thread hop
per batch, not one per request), splitting them into entries (one per input), or runs a batch
cut by padded tokens and batch size, sorted by length and padded to a few length buckets.
When everything that was waiting fits in one batch (the common case under steady load)
tokenising and running are one hop, not two. It waits up to `max_wait` for more only when a
recent batch served more clients than are now queued: an idle server runs a lone request at
once.

With `overlap` (on CUDA by default), once OVERLAP_MIN_INPUTS inputs are waiting while a batch
runs they are tokenised on a thread of their own (`next_to_tokenise` → `tokenised`), so that the
next batch is ready when the device is done with this one; fewer (single-input requests
trickling in) are tokenised by the next hop on the inference thread, as without overlap.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from headwise.service.cpu import INFERENCE_NICENESS, lowered_thread
from headwise.service.engine import traced
from headwise.service.engine.cutting import bucket, cut, fits, take
from headwise.service.engine.work import Done, Entry, Job, Limits, Outcome, Phase, Work
from headwise.service.errors import Disconnected, NotReady, Overloaded

log = logging.getLogger("headwise.service")

__all__ = ["Batcher", "Done", "Entry", "Job", "Limits", "Phase", "Work"]

IDLE_AFTER_S = 0.05  # a queue quiet for this long has no clients about to come back
# Tokenising beside a running batch costs a thread hop and a third thread contending for the
# GIL with the event loop and the inference thread: worth it for a batch's worth of waiting
# inputs (a few large requests), not for single-input requests trickling in, which the next hop
# tokenises as without overlap (bench/results/gpu-h100.md).
OVERLAP_MIN_INPUTS = 32


class Batcher:
    """`executor`: the inference thread its hops run on, shared with another batcher; by
    default one of its own at `niceness` (service.cpu), closed with it. `yield_to`: batchers
    of plain work this one gives way to (analytics): before each of its batches it waits until
    none of them has work waiting or running, so that plain work always goes first between two
    of its batches, and it still runs whenever they leave room. `overlap`: tokenise beside a
    running batch, on a thread of its own (`tokenizer`)."""

    def __init__(self, limits: Limits, buckets: list[int], hooks=None, pad_to_bucket: bool = True,
                 executor: ThreadPoolExecutor | None = None, niceness: int = INFERENCE_NICENESS,
                 yield_to: Sequence[Batcher] = (), overlap: bool = False):
        # CUDA wants a few fixed shapes (IOBinding buffers, graph capture); onnxruntime's CPU
        # kernels take any length, so there a batch is padded only to its longest input (less
        # padding is less work: bench/results/experiments-cpu.md).
        self.pad_to_bucket = pad_to_bucket
        self.limits = limits
        self.buckets = buckets
        self.hooks = hooks  # optional: on_depth(n), on_queue_wait(seconds), on_dropped(job)
        # process mode: this queue's depth in every front-end (backends.queues.SharedQueue), so
        # that HEADWISE_MAX_QUEUE bounds the whole server's
        self.shared = None
        self._pending: deque[Job] = deque()  # not yet tokenised
        self._pending_inputs = 0
        self._queue: deque[Entry] = deque()
        self._queued: dict[Job, int] = {}  # each job with entries in _queue: how many
        self._wakeup = asyncio.Event()
        self._recent = 0  # clients served by the last batch
        self._last_end = 0.0
        self.phase = Phase.WAITING
        self._inflight: list[Job] = []  # the jobs of the hop in hand (CHECKING, RUNNING)
        self._tasks: list[asyncio.Task] = []  # the serve loop, then (overlap) the tokenise loop
        self._tokenizing: list[Job] = []  # jobs on the tokenizer thread beside it (overlap)
        self._tok_wakeup = asyncio.Event()
        self._idle = asyncio.Event()  # set whenever nothing waits or runs here
        self._idle.set()
        self.yield_to = tuple(yield_to)
        self._owns_executor = executor is None
        self.executor = executor or lowered_thread("headwise-infer", niceness)
        self.overlap = overlap
        self.tokenizer = lowered_thread("headwise-tok", niceness) if overlap else None

    # -- public surface -----------------------------------------------------------------
    def start(self, serve, tokenise=None) -> None:
        """Run `serve` (the engine's loop over `next` and `finish`) and, with overlap,
        `tokenise` (its loop over `next_to_tokenise` and `tokenised`) as this queue's tasks,
        which `close` stops."""
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(serve), *([loop.create_task(tokenise)] if tokenise is not None else [])]

    @property
    def depth(self) -> int:
        return len(self._queue) + self._pending_inputs

    def bucket(self, length: int) -> int:
        return bucket(self.buckets, length)

    @property
    def idle(self) -> bool:
        return not (self._queue or self._pending or self._tokenizing
                    or self.phase is Phase.CHECKING or self.phase is Phase.RUNNING)

    async def wait_idle(self) -> None:
        while not self.idle:
            self._idle.clear()
            await self._idle.wait()

    def _idle_changed(self) -> None:
        if self.idle:
            self._idle.set()

    async def _give_way(self) -> None:
        """Wait until every batcher this one yields to is idle at the same moment."""
        while not all(b.idle for b in self.yield_to):
            for b in self.yield_to:
                await b.wait_idle()

    def check_room(self, n: int) -> None:
        elsewhere = self.shared.elsewhere() if self.shared is not None else 0
        if self.depth + elsewhere + n > self.limits.max_queue:
            where = " across the front-ends" if self.shared is not None else ""
            raise Overloaded(f"queue full ({self.limits.max_queue} inputs waiting{where}); retry shortly")

    def submit(self, job: Job, entries: list[Entry] | None = None) -> asyncio.Future:
        """Queue a job: its entries, or (None) its raw inputs for `prepare` to tokenise."""
        self.check_room(job.size)
        job.future = asyncio.get_running_loop().create_future()
        job.enqueued_at = time.perf_counter()
        if entries is None:
            self._pending.append(job)
            self._pending_inputs += job.size
        else:
            self._admit(job, entries)
        self._depth_changed()
        self._wakeup.set()
        self._tok_wakeup.set()
        return job.future

    async def close(self, timeout: float = 5.0) -> None:
        """Finish what is queued and running, then stop."""
        deadline = time.monotonic() + timeout
        alive = bool(self._tasks) and not self._tasks[0].done()
        while alive and not self.idle and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for task in self._tasks:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            except Exception:  # a loop that died: its jobs still get their answer below
                log.exception("a batcher loop failed")
        for job in self._unanswered():
            job.future.set_exception(NotReady("server shutting down"))
        self._queue.clear()
        self._pending.clear()
        self._queued.clear()
        self._tokenizing = []
        self._idle.set()
        if self._owns_executor:
            self.executor.shutdown(wait=False, cancel_futures=True)
        if self.tokenizer is not None:
            self.tokenizer.shutdown(wait=False, cancel_futures=True)

    def abort(self, exc: Exception) -> None:
        """Fail every job not answered yet, the running batch's too (its thread may hang)."""
        for job in self._unanswered():
            job.future.set_exception(exc)

    def _unanswered(self) -> list[Job]:
        """Every job waiting, being tokenised or in the hop, not answered yet (each once)."""
        jobs = dict.fromkeys([*self._pending, *(e.job for e in self._queue), *self._tokenizing, *self._inflight])
        return [job for job in jobs if not job.done]

    # -- the hops -----------------------------------------------------------------------
    async def next(self) -> Work:
        """Wait for work, gather recent clients (up to max_wait), and say what the next hop does."""
        while True:
            if self.phase is not Phase.CUT:
                while not (self._queue or self._pending or self._tokenizing):
                    self._idle_changed()  # jobs dropped without running may have emptied it
                    self._wakeup.clear()
                    await self._wakeup.wait()
                await self._gather()
                if self.yield_to:
                    await self._give_way()
                if self._tokenizing and not self._full():  # what it tokenises joins the next batch
                    self._wakeup.clear()
                    await self._wakeup.wait()
                    continue
                if self._pending and not (self.overlap and self._queue):  # else the tokenizer takes them
                    run = not self._queue
                    jobs = self._take_pending()
                    self._check(jobs)
                    gone = await self.disconnected(jobs)
                    self.phase = Phase.WAITING
                    jobs = [j for j in jobs if j not in gone and not j.done]
                    if jobs:
                        return self._begin(Work(jobs, [], run=run))
            elif self.yield_to:
                await self._give_way()
            self.phase = Phase.WAITING
            batch, padded = self.cut()
            if not batch:
                self._inflight = []
                continue
            self._check(_jobs_of(batch))
            gone = await self.disconnected(self._inflight)
            self.phase = Phase.WAITING
            batch = [e for e in batch if e.job not in gone] if gone else batch
            if batch:
                return self._begin(Work([], batch, padded))

    def _check(self, jobs: list[Job]) -> None:
        """Work in hand: not idle while its clients are asked, and reached by abort() and close()."""
        self.phase = Phase.CHECKING
        self._inflight = jobs

    def _begin(self, work: Work) -> Work:
        self.phase = Phase.RUNNING
        self._inflight = work.jobs or _jobs_of(work.batch)  # what abort() must reach
        self._tok_wakeup.set()
        return work

    async def next_to_tokenise(self) -> list[Job]:
        """Overlap: wait until OVERLAP_MIN_INPUTS inputs are waiting while a hop runs, and take them."""
        while True:
            while not (self.phase is Phase.RUNNING and self._pending_inputs >= OVERLAP_MIN_INPUTS):
                self._tok_wakeup.clear()
                await self._tok_wakeup.wait()
            self._tokenizing = jobs = self._take_pending()
            try:
                gone = await self.disconnected(jobs)
            except Exception as e:  # a probe that fails: its jobs get the error, the loop goes on
                self.tokenised(jobs, [e] * len(jobs))
                continue
            self._tokenizing = jobs = [j for j in jobs if j not in gone and not j.done]
            if jobs:
                return jobs
            self._wakeup.set()
            self._idle_changed()

    def tokenised(self, jobs: list[Job], outcome: Sequence[Outcome]) -> None:
        """Event loop: queue what the tokenizer thread made of `jobs` (or fail them)."""
        try:
            self._settle(jobs, outcome, admit=True)
        finally:
            self._tokenizing = []
            self._wakeup.set()
            self._idle_changed()

    def plan(self, work: Work, outcome: Sequence[Outcome]) -> tuple[list[Entry], int] | None:
        """Inference thread, after tokenising `work.jobs` with run: the batch to run in the same
        hop, or None when it does not fit one batch (its entries are then queued)."""
        batch = sorted((e for res in outcome if not isinstance(res, BaseException) for e in res),
                       key=lambda e: e.length)
        if not batch:
            return [], 0
        if not fits(self.limits, len(batch), self.bucket(batch[-1].length)):
            return None
        for job in work.jobs:
            job.expect(job.size)
        self._waited({e.job for e in batch})
        return batch, self._padded(batch[-1].length)

    def finish(self, work: Work, done: Done) -> None:
        """Event loop: answer what the hop settled, queue what it tokenised without running."""
        try:
            if done.outcome is not None:
                self._settle(work.jobs, done.outcome, admit=done.batch is None)
            if isinstance(done.results, Exception):  # the whole batch fails; each handler gets it
                for job in {en.job for en in done.batch}:
                    if not job.done:
                        job.future.set_exception(done.results)
            elif done.batch:
                self._deliver(done.batch, done.results)
        finally:
            self._inflight = []
            self._last_end = time.perf_counter()
            if done.batch:
                self._recent = len({en.job for en in done.batch})
            self.phase = Phase.CUT if done.batch is None and self._queue else Phase.WAITING
            self._idle_changed()

    def _admit(self, job: Job, entries: list[Entry]) -> None:
        job.expect(len(entries))
        if entries:
            self._queue.extend(entries)
            self._queued[job] = len(entries)

    def _take_pending(self) -> list[Job]:
        jobs = [j for j in self._pending if not j.done]
        self._pending.clear()
        self._pending_inputs = 0
        self._depth_changed()
        return jobs

    def _settle(self, jobs: list[Job], outcome: Sequence[Outcome], admit: bool) -> None:
        """Fail each job `prepare` refused; queue the others' entries if `admit`."""
        for job, res in zip(jobs, outcome, strict=True):
            if job.done:
                continue
            if isinstance(res, BaseException):
                job.future.set_exception(res)
            elif admit:
                self._admit(job, res)
        self._depth_changed()

    async def _gather(self) -> None:
        """Wait (at most max_wait) for the clients a recent batch served to come back."""
        if self.limits.max_wait_s <= 0:
            return
        start = time.perf_counter()
        recent = self._recent if start - self._last_end < IDLE_AFTER_S else 0
        deadline = start + self.limits.max_wait_s
        while True:
            jobs = len(self._pending) + len(self._tokenizing) + len(self._queued)
            if jobs >= recent or self._full():
                return
            left = deadline - time.perf_counter()
            if left <= 0:
                return
            self._wakeup.clear()
            try:
                await asyncio.wait_for(self._wakeup.wait(), left)
            except asyncio.TimeoutError:
                return

    def _full(self) -> bool:
        n = self.depth
        if n >= self.limits.max_batch_size:
            return True
        longest = max((e.length for e in self._queue), default=0)
        return n * self.bucket(longest) >= self.limits.max_batch_tokens

    def cut(self) -> tuple[list[Entry], int]:
        """Take one batch (service.engine.cutting) out of the queue → (it, its padded length)."""
        batch = cut(self._queue, self.limits, self.buckets)
        if not batch:  # every entry's client has gone
            self._queue, self._queued = deque(), {}
            return [], 0
        self._queue, self._queued = take(self._queue, self._queued, batch)
        self._depth_changed()
        self._waited({e.job for e in batch})
        return batch, self._padded(batch[-1].length)

    def _padded(self, longest: int) -> int:
        """The length a batch whose longest input is `longest` is padded to."""
        return self.bucket(longest) if self.pad_to_bucket else longest

    def _waited(self, jobs) -> None:
        now, hooks = time.perf_counter(), self.hooks
        for job in jobs:
            waited = now - job.enqueued_at
            if hooks is not None:
                hooks.on_queue_wait(waited)
            t = job.timing
            if not t.started:  # its first batch: the wait, less the tokenising it may include
                t.started = True
                queue = waited - t.tokenize
                t.queue = queue if queue > 0.0 else 0.0
                traced.queued(job)

    async def disconnected(self, jobs) -> set[Job]:
        """The jobs whose client has gone: failed (nobody reads it) and counted as dropped."""
        gone = set()
        for job in jobs:
            if job.is_disconnected is not None and await job.is_disconnected():
                gone.add(job)
                if not job.done:
                    job.future.set_exception(Disconnected("client disconnected"))
                if self.hooks is not None:
                    self.hooks.on_dropped(job)
        return gone

    def _deliver(self, batch: list[Entry], results: Sequence[Any]) -> None:
        for entry, result in zip(batch, results, strict=True):
            job = entry.job
            if job.done:
                continue
            job.results[entry.index] = result
            job.left -= 1
            if job.left == 0:
                job.future.set_result(job.results)

    def _depth_changed(self) -> None:
        if self.hooks is not None:
            self.hooks.on_depth(self.depth)
        if self.shared is not None:
            self.shared.set(self.depth)


def _jobs_of(batch: list[Entry]) -> list[Job]:
    """The jobs of a batch's entries, each once, in order."""
    return list(dict.fromkeys(e.job for e in batch))
