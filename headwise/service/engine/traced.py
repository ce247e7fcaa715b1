"""The engine's spans when tracing is on (service.tracing): a batch span under each request a
batch serves, linked to the others, and the device run under it, written by whoever owns the
device (here, or the engine process: a backend with `traces_device` takes the batch spans'
traceparents along with the run)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from headwise.service import tracing
from headwise.service.engine.work import Entry, Job


@contextmanager
def batch_spans(entries: list[Entry], padded: int, role: str, at: float) -> Iterator[list]:
    """A `batch` span per traced request among `entries`, begun at `at`, written on leaving;
    yields them ([] when tracing is off or no request is traced). The first request's links to
    every other request's span, and each other one links to the first's: a batch of n requests
    makes 2(n − 1) links, not n(n − 1). The spans share one attributes dict (written once,
    only read after)."""
    jobs = [j for j in dict.fromkeys(e.job for e in entries) if j.trace is not None] if tracing.ON else []
    if not jobs:
        yield []
        return
    attributes = {"headwise.batch.size": len(entries), "headwise.batch.padded_length": padded,
                  "headwise.batch.requests": len(jobs), "headwise.graph": role}
    first = tracing.start("batch", jobs[0].trace, at, [j.trace for j in jobs[1:]], attributes)
    spans = [first, *(tracing.start("batch", j.trace, at, [first.context], attributes) for j in jobs[1:])]
    try:
        yield spans
    finally:
        tracing.end(spans, time.perf_counter())


def run(backend, role: str, feeds: dict, outputs: list[str], spans: list):
    """backend.run, with a `device run` span under each batch span (no span: the plain run)."""
    if not spans:
        return backend.run(role, feeds, outputs)
    if getattr(backend, "traces_device", False):
        return backend.run(role, feeds, outputs, trace=[tracing.traceparent(s) for s in spans])
    t0 = time.perf_counter()
    out = backend.run(role, feeds, outputs)
    device_spans(spans, t0, time.perf_counter(), role, len(next(iter(feeds.values()))))
    return out


async def run_async(backend, role: str, feeds: dict, outputs: list[str], gone, spans: list):
    """backend.run_async (process mode), its device run traced by the engine process (no span:
    the plain run)."""
    if spans:
        return await backend.run_async(role, feeds, outputs, gone, trace=[tracing.traceparent(s) for s in spans])
    return await backend.run_async(role, feeds, outputs, gone)


def device_spans(parents: list, start: float, end: float, role: str, rows: int) -> None:
    tracing.device_runs([s.context for s in parents], start, end, **{"headwise.graph": role, "headwise.device.rows": rows})


def queued(job: Job) -> None:
    """The `queue` span of a request whose first batch has just been formed."""
    if job.trace is not None:
        tracing.record("queue", job.trace, job.enqueued_at, job.enqueued_at + job.timing.queue)


def tokenised(jobs: list[Job], start: float, took: float) -> None:
    for job in jobs:
        if job.trace is not None:
            tracing.record("tokenise", job.trace, start, start + took, **{"headwise.inputs": job.size})
