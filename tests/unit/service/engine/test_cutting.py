"""The batch cut (service.engine.cutting), on its own: a queue of entries in, one batch out."""

import numpy as np

from headwise.service.engine.cutting import bucket, cut, fits
from headwise.service.engine.work import Entry, Job, Limits, length_buckets

BUCKETS = length_buckets(64)  # 8, 12, 16, 24, 32, 48, 64


def queue(*lengths: int, done: tuple[int, ...] = ()) -> list[Entry]:
    """One entry per length, oldest first, each its own job; those at `done` are answered."""
    out = []
    for i, n in enumerate(lengths):
        job = Job(1)
        job.future = _Future(i in done)
        out.append(Entry(job, 0, np.zeros(n, np.int64), np.zeros(n, np.int64)))
    return out


class _Future:
    """A handler's future, answered or still awaited (Job.done reads it)."""

    def __init__(self, answered: bool):
        self.answered = answered

    def done(self) -> bool:
        return self.answered


def lengths(batch: list[Entry]) -> list[int]:
    return [e.length for e in batch]


def test_bucket_is_the_smallest_that_holds_the_length():
    assert [bucket(BUCKETS, n) for n in (1, 8, 9, 12, 13, 64, 65)] == [8, 8, 12, 12, 16, 64, 64]


def test_fits_counts_rows_padded_tokens_and_the_attention_budget():
    lim = Limits(100, 4, 0.0, 10)
    assert fits(lim, 4, 25) and not fits(lim, 5, 8) and not fits(lim, 4, 26)
    att = Limits(10_000, 64, 0.0, 10, cell_bytes=16, budget_bytes=16 * 2 * 32 * 32)
    assert fits(att, 2, 32) and not fits(att, 3, 32)


def test_the_oldest_goes_with_its_nearest_neighbours_by_length_shorter_first():
    q = queue(20, 60, 5, 18, 22, 40)
    assert lengths(cut(q, Limits(3 * 24, 64, 0.0, 100), BUCKETS)) == [5, 18, 20]  # 3 × 24 tokens: 22 would need a 4th row
    assert lengths(cut(q, Limits(10_000, 64, 0.0, 100), BUCKETS)) == [5, 18, 20, 22, 40, 60]  # all fit


def test_the_oldest_always_goes_even_alone():
    q = queue(60, 8, 8, 8)
    assert lengths(cut(q, Limits(64, 64, 0.0, 100), BUCKETS)) == [60]  # 60 pads to 64: no room for another


def test_answered_entries_are_skipped_and_a_queue_of_them_gives_nothing():
    q = queue(30, 10, 12, done=(0,))
    assert lengths(cut(q, Limits(10_000, 64, 0.0, 100), BUCKETS)) == [10, 12]
    assert cut(queue(5, 6, done=(0, 1)), Limits(10_000, 64, 0.0, 100), BUCKETS) == []
    assert cut([], Limits(10_000, 64, 0.0, 100), BUCKETS) == []


def test_the_batch_size_caps_the_rows():
    q = queue(*[8] * 10)
    batch = cut(q, Limits(10_000, 4, 0.0, 100), BUCKETS)
    assert len(batch) == 4 and q[0] in batch
