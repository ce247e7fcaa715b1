"""A model's serving loops (service.engine.encoder): for each role, its batcher says what the
next hop does, the hop runs (tokenise, then the batch) on the batcher's inference thread, and
the batcher answers what it settled; with overlap, a second loop tokenises beside a running
batch. What tokenises and runs is the model's (`Model`); the loops own no state of their own."""

from __future__ import annotations

import asyncio
from typing import Protocol

from headwise.service.engine.batching import Batcher, Done, Entry, Job, Work
from headwise.service.engine.work import Outcome

# Process mode: a hop with at most this many inputs, to tokenise or to run, runs on the event loop
# (tokenising, padding and answering a few short inputs holds it less than a thread hop costs);
# larger ones on the inference thread, unless the lane is `light` (Lane.serve).
LOOP_TOKENISE = 8


def on_loop(work: Work) -> bool:
    """Whether a hop is small enough for the event loop: the inputs it tokenises and the
    entries it runs (a batch tokenised beforehand, with overlap), at most LOOP_TOKENISE."""
    return sum(j.size for j in work.jobs) + len(work.batch) <= LOOP_TOKENISE


def overlap(pipeline: str, backend) -> bool:
    """Whether requests are tokenised beside a running batch (HEADWISE_PIPELINE; auto: on
    CUDA, where the device runs the batch and the host's cores would wait)."""
    return pipeline == "on" or (pipeline == "auto" and backend.provider == "cuda")


def shared_queue(backend, role: str):
    """Process mode: `role`'s queue as every front-end fills it (None in process)."""
    shared = getattr(backend, "shared_queue", None)
    return shared(role) if shared is not None else None


class Model(Protocol):
    """What a lane drives (EncoderRuntime; tests give a stand-in): `backend` (whose `run_async`,
    when it has one, makes a hop of few inputs run on the loop: process mode)."""

    backend: object

    def prepare(self, jobs: list[Job]) -> list[Outcome]: ...

    def run_batch(self, role: str, entries: list[Entry], padded: int) -> list: ...


class Lane:
    def __init__(self, model: Model):
        self.model = model

    @property
    def awaited(self) -> bool:
        """Whether the backend's run is awaited (process mode: the device is another process's)."""
        return hasattr(self.model.backend, "run_async")

    async def serve(self, role: str, batcher: Batcher, light: bool = False) -> None:
        """This variant's loop: the batcher says what the next hop does, the hop runs on the
        batcher's inference thread, the batcher answers what it settled. With a backend whose
        run is awaited (process mode: the device is another process's), a hop of few inputs runs
        on the loop itself: no thread waits for the engine, and no hop there and back; `light`
        (answers of a vector or so per input): every hop does, since a front-end's threads share
        its one core and the GIL, and a thread beside the loop only adds their switching."""
        loop = asyncio.get_running_loop()
        awaited = self.awaited
        while True:
            work = await batcher.next()
            try:
                if awaited and (light or on_loop(work)):
                    done = await self.hop_async(role, batcher, work)
                else:
                    done = await loop.run_in_executor(batcher.executor, self.hop, role, batcher, work)
            except Exception as e:  # the hop could not run (tokenising failed, the thread is gone)
                done = Done([e] * len(work.jobs), work.batch, e if work.batch else [])
            batcher.finish(work, done)

    async def tokenise(self, batcher: Batcher, light: bool = False) -> None:
        """Overlap: tokenise what arrives while a batch runs, on the batcher's tokenizer thread
        (`light`, with a backend whose run is awaited: on the loop, as `serve`)."""
        loop = asyncio.get_running_loop()
        here = light and self.awaited
        while True:
            jobs = await batcher.next_to_tokenise()
            try:
                if here:
                    outcome = self.model.prepare(jobs)
                else:
                    outcome = await loop.run_in_executor(batcher.tokenizer, self.model.prepare, jobs)
            except Exception as e:  # the thread is gone (shutting down): each job gets the error
                outcome = [e] * len(jobs)
            batcher.tokenised(jobs, outcome)

    def hop(self, role: str, batcher: Batcher, work: Work) -> Done:
        """Inference thread: tokenise (and, when it all fits one batch, run at once), or run."""
        outcome, batch, padded, done = self.tokenised(batcher, work)
        if done is not None:
            return done
        try:
            return Done(outcome, batch, self.model.run_batch(role, batch, padded))
        except Exception as e:
            return Done(outcome, batch, e)

    async def hop_async(self, role: str, batcher: Batcher, work: Work) -> Done:
        """hop on the loop, the backend's run awaited."""
        outcome, batch, padded, done = self.tokenised(batcher, work)
        if done is not None:
            return done
        try:
            return Done(outcome, batch, await self.model.run_batch_async(role, batch, padded, batcher))
        except Exception as e:
            return Done(outcome, batch, e)

    def tokenised(self, batcher: Batcher, work: Work) -> tuple:
        """A hop's first half: its jobs tokenised and planned → (outcome, batch, padded, the
        hop's Done when nothing is to run)."""
        if not work.jobs:
            return None, work.batch, work.padded, None
        outcome = self.model.prepare(work.jobs)
        plan = batcher.plan(work, outcome) if work.run else None
        if plan is None:
            return outcome, None, 0, Done(outcome, None, None)
        batch, padded = plan
        return outcome, batch, padded, Done(outcome, [], []) if not batch else None
