"""How the batcher cuts a batch from its queue of tokenised entries (service.engine.batching):
pure functions of the queue, the limits and the length buckets, with no clock, thread or
future, unit-tested on their own (as TEI's `core/src/queue.rs` tests its `next_batch`)."""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Sequence
from itertools import islice
from operator import attrgetter

from headwise.service.engine.work import Entry, Job, Limits

LENGTH = attrgetter("length")
WINDOW = 4  # a batch is chosen among the oldest WINDOW × max_batch_size live entries


def bucket(buckets: Sequence[int], length: int) -> int:
    """The smallest length bucket that holds `length` (the largest when none does)."""
    i = bisect.bisect_left(buckets, length)
    return buckets[min(i, len(buckets) - 1)]


def fits(limits: Limits, count: int, padded: int) -> bool:
    """Whether `count` inputs padded to `padded` tokens make one batch under `limits`: its
    size, its padded tokens and, for attention, its B·L·H·T² weights."""
    if count > limits.max_batch_size or count * padded > limits.max_batch_tokens:
        return False
    return not limits.cell_bytes or count * limits.cell_bytes * padded * padded <= limits.budget_bytes


def cut(queue: Sequence[Entry], limits: Limits, buckets: Sequence[int]) -> list[Entry]:
    """One batch: the oldest live entry (whose client still waits) plus its nearest neighbours
    by length, shorter ones first (they add no padding), as many as fit; sorted by length.
    [] when no entry is live. The oldest always goes, so no entry waits behind newer ones."""
    start = next((i for i, e in enumerate(queue) if not e.job.done), None)
    if start is None:
        return []
    window = [e for e in islice(queue, start, start + WINDOW * limits.max_batch_size) if not e.job.done]
    oldest = window[0]
    ordered = sorted(window, key=LENGTH)
    p = ordered.index(oldest)
    lo, hi = p, p + 1  # the batch is ordered[lo:hi]
    while lo > 0 and fits(limits, hi - lo + 1, bucket(buckets, ordered[hi - 1].length)):
        lo -= 1
    while hi < len(ordered) and fits(limits, hi - lo + 1, bucket(buckets, ordered[hi].length)):
        hi += 1
    return ordered[lo:hi]


def take(queue: deque[Entry], queued: dict[Job, int], batch: list[Entry]) -> tuple[deque[Entry], dict[Job, int]]:
    """The queue and its count of entries per job without `batch` and without the entries of
    every job that is over (its client gone, or failed). A batch is cut from the oldest entries
    (`cut`: WINDOW), so the queue is walked only that far, and past it only when one of its jobs
    is over. `queue` and `queued` are changed in place, or replaced."""
    kept, taken, left = [], set(map(id, batch)), len(batch)
    while left:
        e = queue.popleft()
        if id(e) in taken:
            left -= 1
        elif not e.job.done:
            kept.append(e)
            continue
        if (n := queued[e.job] - 1) > 0:
            queued[e.job] = n
        else:
            del queued[e.job]
    queue.extendleft(reversed(kept))
    if any(job.done for job in queued):
        return deque(e for e in queue if not e.job.done), {job: n for job, n in queued.items() if not job.done}
    return queue, queued
