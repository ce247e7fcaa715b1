"""The batcher with a fake run function: batch cuts, waiting rules, overload, disconnects."""

import asyncio
import time

import numpy as np
import pytest

from headwise.service.engine.batching import Entry, Job, Limits
from headwise.service.engine.cutting import fits
from headwise.service.errors import Disconnected, Overloaded
from tests.unit.fakes import DrivenBatcher


class Recorder:
    def __init__(self, delay=0.0):
        self.delay = delay
        self.batches = []

    def __call__(self, entries, padded):
        self.batches.append(([e.length for e in entries], padded))
        if self.delay:
            time.sleep(self.delay)
        return [(e.job.params, e.index, e.length) for e in entries]


class Hooks:
    def __init__(self):
        self.dropped, self.depths, self.waits = [], [], []

    def on_depth(self, n):
        self.depths.append(n)

    def on_queue_wait(self, s):
        self.waits.append(s)

    def on_dropped(self, job):
        self.dropped.append(job)


def make(run, max_tokens=1024, max_size=64, wait_s=0.0, max_queue=100, buckets=(8, 16, 32, 64), hooks=None,
         pad_to_bucket=True):
    return DrivenBatcher(run, Limits(max_tokens, max_size, wait_s, max_queue), list(buckets), hooks,
                   pad_to_bucket=pad_to_bucket)


def submit(b, lengths, tag=None, is_disconnected=None):
    job = Job(len(lengths), params=tag, is_disconnected=is_disconnected)
    entries = [Entry(job, i, np.ones(n, np.int64), np.zeros(n, np.int64)) for i, n in enumerate(lengths)]
    return b.submit(job, entries)


WAIT_FOR = asyncio.wait_for  # the real one, for tests that record the batcher's waits


def run(coro):
    return asyncio.run(WAIT_FOR(coro, 10))


@pytest.fixture
def waits(monkeypatch):
    """Every wait the batcher makes for more clients: its timeouts (no clock read by tests)."""
    seen = []

    async def wait_for(aw, timeout):
        seen.append(timeout)
        return await WAIT_FOR(aw, timeout)

    monkeypatch.setattr("headwise.service.engine.batching.asyncio.wait_for", wait_for)
    return seen


def test_idle_server_runs_a_lone_request_at_once(waits):
    async def main():
        b = make(Recorder(), wait_s=5.0)  # a long max wait must not be spent when idle
        b.start()
        res = await submit(b, [5], "a")
        await b.close()
        return res

    assert run(main()) == [("a", 0, 5)]
    assert waits == []  # it never waited for company


def test_requests_arriving_during_a_run_share_the_next_batch():
    async def main():
        rec = Recorder(delay=0.05)
        b = make(rec)
        b.start()
        first = submit(b, [5], 0)
        await asyncio.sleep(0.01)  # the first batch is running now
        rest = [submit(b, [5], i) for i in range(1, 11)]
        results = await asyncio.gather(first, *rest)
        await b.close()
        return rec, results

    rec, results = run(main())
    assert [len(x[0]) for x in rec.batches] == [1, 10]
    assert [r[0][0] for r in results] == list(range(11))  # each got its own result


def test_waits_for_recent_clients_to_come_back_but_no_longer_than_max_wait(waits):
    async def main():
        rec = Recorder()
        b = make(rec, wait_s=0.3)
        futs = [submit(b, [5], i) for i in range(3)]
        b.start()
        await asyncio.gather(*futs)  # one batch served 3 clients
        first = submit(b, [5], "a")
        await asyncio.sleep(0.02)
        rest = [submit(b, [6], "b"), submit(b, [7], "c")]
        await asyncio.gather(first, *rest)
        together = list(waits)
        await submit(b, [5], "d")  # the other two never come back: it goes after max_wait
        alone = waits[len(together):]
        await asyncio.sleep(0.1)  # quiet for a while: idle again, no wait at all
        n = len(waits)
        await submit(b, [5], "e")
        idle = waits[n:]
        await b.close()
        return rec, together, alone, idle

    rec, together, alone, idle = run(main())
    assert [x[0] for x in rec.batches[:2]] == [[5, 5, 5], [5, 6, 7]]  # it waited for them
    assert together and all(0 < t <= 0.3 for t in together)
    assert alone and all(0 < t <= 0.3 for t in alone)  # never past max_wait
    assert idle == []


def test_raw_inputs_are_tokenised_together_on_the_batcher_thread():
    seen = []

    def prepare(jobs):
        seen.append([j.params for j in jobs])
        out = []
        for j in jobs:
            if j.params == "bad":
                out.append(ValueError("too long"))
            else:
                out.append([Entry(j, i, np.ones(len(t), np.int64), np.zeros(len(t), np.int64))
                            for i, t in enumerate(j.inputs)])
        return out

    async def main():
        rec = Recorder()
        b = DrivenBatcher(rec, Limits(1024, 64, 0.0, 100), [8, 16], None, prepare=prepare)
        jobs = [Job(2, inputs=["abc", "de"], params="x"), Job(1, inputs=["z" * 9], params="bad"),
                Job(1, inputs=["hello"], params="y")]
        futs = [b.submit(j) for j in jobs]
        assert b.depth == 4
        b.start()
        ok1 = await futs[0]
        with pytest.raises(ValueError):
            await futs[1]
        ok2 = await futs[2]
        await b.close()
        return rec, ok1, ok2, jobs

    rec, ok1, ok2, _ = run(main())
    assert seen == [["x", "bad", "y"]]  # one batch encode for all three requests
    assert rec.batches == [([2, 3, 5], 8)]
    assert [r[1:] for r in ok1] == [(0, 3), (1, 2)]
    assert [r[1:] for r in ok2] == [(0, 5)]


def test_cut_by_padded_tokens_and_size():
    async def main():
        rec = Recorder()
        b = make(rec, max_tokens=64, max_size=6)
        futs = [submit(b, [5] * 20, "many")]  # bucket 8: at most 64/8 = 8, size cap 6
        b.start()
        await asyncio.gather(*futs)
        await b.close()
        return rec

    rec = run(main())
    assert [len(x[0]) for x in rec.batches] == [6, 6, 6, 2]
    assert all(p == 8 for _, p in rec.batches)


@pytest.mark.parametrize("pad_to_bucket, padded", [(True, [32, 8]), (False, [30, 4])])
def test_sorted_by_length_oldest_first(pad_to_bucket, padded):
    async def main():
        rec = Recorder()
        b = make(rec, max_tokens=64, pad_to_bucket=pad_to_bucket)
        futs = [submit(b, [30], "old"), submit(b, [3], "s1"), submit(b, [28], "l2"), submit(b, [4], "s2")]
        b.start()
        await asyncio.gather(*futs)
        await b.close()
        return rec

    rec = run(main())
    # the oldest (30) goes first with its nearest length (28); the short ones go together. The
    # batches are cut by their bucketed cost either way; without buckets (CPU) each is padded
    # only to its own longest input.
    assert rec.batches == [([28, 30], padded[0]), ([3, 4], padded[1])]


def test_multi_input_job_split_across_batches_gets_results_in_order():
    async def main():
        b = make(Recorder(), max_tokens=16)
        fut = submit(b, [9, 3, 12, 2], "j")
        b.start()
        res = await fut
        await b.close()
        return res

    assert [r[1:] for r in run(main())] == [(0, 9), (1, 3), (2, 12), (3, 2)]


def test_a_cut_takes_its_batch_out_in_order_and_drops_the_entries_of_a_job_that_is_over():
    """Cut by hand (no serving loop): what is left is the queue less the batch, in order, and
    entries of a job that is over (its client gone) go at the next cut wherever they are."""
    async def main():
        b = make(Recorder(), max_size=4)
        futs = [submit(b, [5 + i % 3] * 8, f"j{i}") for i in range(8)]
        for _ in range(3):
            before = list(b._queue)
            batch, _ = b.cut()
            assert list(b._queue) == [e for e in before if e not in batch]
            assert b.depth == len(before) - 4
        futs[6].cancel()  # far past the entries a cut looks at
        before = list(b._queue)
        batch, _ = b.cut()
        assert list(b._queue) == [e for e in before if e not in batch and e.job.params != "j6"]
        assert b.depth == len(before) - 4 - 8
        assert b._queued == _counts(b._queue)
        for f in futs:  # the batches cut here never run
            f.cancel()
        await b.close()

    run(main())


def _counts(queue) -> dict:
    out = {}
    for e in queue:
        out[e.job] = out.get(e.job, 0) + 1
    return out


def test_full_queue_is_overloaded_with_retry_after():
    async def main():
        b = make(Recorder(), max_queue=3)
        submit(b, [5, 5])
        with pytest.raises(Overloaded) as e:
            submit(b, [5, 5])
        b.check_room(1)
        await b.close()
        return e.value

    err = run(main())
    assert "queue full" in err.message  # a domain error: 429 and Retry-After are the api's (service.api.errors)


def test_disconnected_clients_are_dropped_before_inference():
    async def gone():
        return True

    async def here():
        return False

    async def main():
        rec, hooks = Recorder(), Hooks()
        b = make(rec, hooks=hooks)
        dropped = submit(b, [7], "gone", is_disconnected=gone)
        kept = submit(b, [5], "here", is_disconnected=here)
        b.start()
        res = await kept
        with pytest.raises(Disconnected):
            await dropped
        await b.close()
        return rec, hooks, res

    rec, hooks, res = run(main())
    assert rec.batches == [([5], 8)]
    assert len(hooks.dropped) == 1 and res == [("here", 0, 5)]
    assert hooks.waits and hooks.depths[-1] == 0


def test_a_failing_batch_fails_its_requests_only():
    calls = []

    def flaky(entries, padded):
        calls.append(len(entries))
        if len(calls) == 1:
            raise RuntimeError("boom")
        return [None] * len(entries)

    async def main():
        b = make(flaky)
        b.start()
        with pytest.raises(RuntimeError):
            await submit(b, [5])
        assert await submit(b, [5]) == [None]
        await b.close()

    run(main())


def _prepare_lengths(jobs):
    return [[Entry(j, i, np.ones(n, np.int64), np.zeros(n, np.int64)) for i, n in enumerate(j.inputs)]
            for j in jobs]


def test_waiting_requests_that_fit_one_batch_are_tokenised_and_run_in_one_hop():
    async def main():
        rec = Recorder()
        b = DrivenBatcher(rec, Limits(1024, 64, 0.0, 100), [8, 16], None, prepare=_prepare_lengths)
        hops = []
        submit_ = b.executor.submit
        b.executor.submit = lambda fn, *a: hops.append(fn) or submit_(fn, *a)
        futs = [b.submit(Job(1, inputs=[n], params=n)) for n in (7, 3, 5)]
        b.start()
        res = await asyncio.gather(*futs)
        await b.close()
        return rec, hops, res

    rec, hops, res = run(main())
    assert len(hops) == 1 and rec.batches == [([3, 5, 7], 8)]
    assert res == [[(7, 0, 7)], [(3, 0, 3)], [(5, 0, 5)]]


def test_waiting_requests_over_one_batch_are_queued_and_cut():
    async def main():
        rec = Recorder()
        b = DrivenBatcher(rec, Limits(64, 6, 0.0, 100), [8, 16], None, prepare=_prepare_lengths)
        futs = [b.submit(Job(10, inputs=[5] * 10, params="a")), b.submit(Job(3, inputs=[9, 2, 4], params="b"))]
        b.start()
        res = await asyncio.gather(*futs)
        await b.close()
        return rec, res

    rec, (a, bb) = run(main())
    assert sorted(n for lengths, _ in rec.batches for n in lengths) == sorted([5] * 10 + [9, 2, 4])
    assert all(len(lengths) <= 6 for lengths, _ in rec.batches)
    assert a == [("a", i, 5) for i in range(10)] and bb == [("b", 0, 9), ("b", 1, 2), ("b", 2, 4)]


def test_max_rows_is_the_largest_batch_the_batcher_would_form():
    lim = Limits(256, 16, 0.0, 100, cell_bytes=2 * 2 * 4, budget_bytes=1 << 14)
    for padded in (1, 8, 16, 32, 64):
        rows = lim.max_rows(padded)
        assert fits(lim, rows, padded) or rows == 1
        assert not fits(lim, rows + 1, padded)


def test_the_hop_walks_its_phases_on_the_loop_alone():
    """Driven by hand, as TEI's queue is tested: next → RUNNING, finish → WAITING; a hop that
    tokenised more than one batch leaves CUT, and the next hop cuts a batch at once."""
    from headwise.service.engine.batching import Batcher, Done, Phase

    async def main():
        b = Batcher(Limits(64, 2, 0.0, 100), [8, 16])
        seen = [(b.phase, b.idle)]
        submit(b, [5])
        work = await b.next()
        seen.append((b.phase, b.idle, [e.length for e in work.batch]))
        b.finish(work, Done(None, work.batch, [None]))
        seen.append((b.phase, b.idle))
        job = Job(3, inputs=["a", "b", "c"])
        b.submit(job)
        work = await b.next()  # the raw job, to tokenise and run when it fits one batch
        seen.append((b.phase, work.run, len(work.jobs)))
        entries = [Entry(job, i, np.ones(n, np.int64), np.zeros(n, np.int64)) for i, n in enumerate((3, 4, 6))]
        b.finish(work, Done([entries], None, None))  # over max_batch_size 2: queued, not run
        seen.append((b.phase, b.idle, b.depth))
        work = await b.next()
        seen.append((b.phase, [e.length for e in work.batch]))
        await b.close()
        seen.append(type(job.future.exception()).__name__)  # its last input was still queued
        return seen

    assert run(main()) == [(Phase.WAITING, True), (Phase.RUNNING, False, [5]), (Phase.WAITING, True),
                           (Phase.RUNNING, True, 1), (Phase.CUT, False, 3), (Phase.RUNNING, [3, 4]), "NotReady"]
