"""What a long-lived server process does with its heap once it is ready.

A server imports and builds everything it will keep (the framework, the models' tokenizers and
sessions, metrics, routes) before it answers, and after that its collector keeps looking at it:
every full collection walks each of those objects again, and under load a request's objects
live long enough to be promoted and trigger them. `settle()` collects what start-up left
behind and then freezes what is left (`gc.freeze`: those objects stay out of every later
collection; they are still freed when their count drops to zero), so that collections look at
what requests make. Only for a process's own server: a test that builds an app and lets it
go would keep its cycles for good (`create_app(settle_heap=...)` is off unless a server asks).
bench/results/gc-freeze.md measures what it saves.

It then collects less often (THRESHOLDS). Under load a request's objects outlive many of
Python's default young collections (one each 700 tracked allocations) and are promoted; and once
start-up is frozen, the long-lived count that otherwise holds full collections back is small, so
at the defaults a full collection, walking every request in flight, followed every tenth middle
one (bench/results/gc-thresholds.md). Cycles are still collected, later.
"""

from __future__ import annotations

import gc

THRESHOLDS = (20_000, 20, 100)  # CPython 3.11's defaults: (700, 10, 10), measured there


def settle() -> int:
    """Collect start-up's garbage, then freeze the rest, and collect less often from now on →
    the objects frozen."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
    return gc.get_freeze_count()
