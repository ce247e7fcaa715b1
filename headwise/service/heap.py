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
"""

from __future__ import annotations

import gc


def settle() -> int:
    """Collect start-up's garbage, then freeze the rest → the objects frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
