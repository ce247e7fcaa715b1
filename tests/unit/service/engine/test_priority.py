"""Plain work before analytics rows (Batcher.yield_to), in both lanes: analytics sharing the
plain batcher's thread (CUDA, HEADWISE_ANALYTICS_THREADS=0) and on a thread of their own (CPU).
A fake run function stands in for the model; no clock is asserted beyond ordering."""

import asyncio
import threading
import time

import numpy as np

from headwise.service.engine.batching import Entry, Job, Limits
from tests.unit.fakes import DrivenBatcher

BUCKETS = [8, 16, 32, 64]


class Log:
    """Every batch run, in order, by either batcher: (tag, lengths), from any thread."""

    def __init__(self):
        self.batches: list[tuple[str, list[int]]] = []
        self.lock = threading.Lock()
        self.analytics_running = threading.Event()

    def runner(self, tag: str, delay: float):
        def run(entries, padded):
            with self.lock:
                self.batches.append((tag, [e.length for e in entries]))
            if tag == "analytics":
                self.analytics_running.set()
            time.sleep(delay)
            if tag == "analytics":
                self.analytics_running.clear()
            return [(tag, e.job.params, e.index) for e in entries]
        return run


def pair(log: Log, plain_delay=0.01, analytics_delay=0.01, analytics_tokens=16, shared=True):
    plain = DrivenBatcher(log.runner("plain", plain_delay), Limits(1024, 64, 0.0, 1000), BUCKETS)
    analytics = DrivenBatcher(log.runner("analytics", analytics_delay), Limits(analytics_tokens, 64, 0.0, 1000),
                              BUCKETS, executor=plain.executor if shared else None, yield_to=[plain])
    return plain, analytics


def submit(b, lengths, tag=None):
    job = Job(len(lengths), params=tag)
    entries = [Entry(job, i, np.ones(n, np.int64), np.zeros(n, np.int64)) for i, n in enumerate(lengths)]
    return b.submit(job, entries)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


async def close(*batchers):
    for b in batchers:
        await b.close()


def test_analytics_run_in_small_batches_and_plain_work_goes_between_two():
    async def main():
        log = Log()
        plain, analytics = pair(log, analytics_delay=0.02, analytics_tokens=16)
        plain.start(), analytics.start()
        rows = submit(analytics, [16] * 6, "occlusion")  # one row a batch
        while not log.batches:
            await asyncio.sleep(0.001)
        answers = await asyncio.gather(*(submit(plain, [8], f"p{i}") for i in range(3)))
        await rows
        await close(plain, analytics)
        return log.batches, answers

    batches, answers = run(main())
    assert [a[0][1] for a in answers] == ["p0", "p1", "p2"]
    assert all(lengths == [16] for tag, lengths in batches if tag == "analytics")  # within its token cap
    tags = [tag for tag, _ in batches]
    first_plain = tags.index("plain")
    # the plain requests arrived while the first analytics batch ran: they run next, before any other
    assert tags[0] == "analytics" and first_plain == 1
    assert tags.count("analytics") == 6 and tags[-1] == "analytics"


def test_analytics_are_not_starved_while_plain_traffic_leaves_room():
    async def main():
        log = Log()
        plain, analytics = pair(log, plain_delay=0.005, analytics_delay=0.005)
        plain.start(), analytics.start()
        rows = asyncio.ensure_future(submit(analytics, [16] * 4, "occlusion"))
        for i in range(40):  # one client, a short pause between its requests
            await submit(plain, [8], i)
            await asyncio.sleep(0.004)
            if rows.done():
                break
        done = rows.done()
        await rows
        await close(plain, analytics)
        return done, i

    done, requests = run(main())
    assert done, "the analytics job did not finish while plain traffic paused between requests"
    assert requests < 39


def test_each_class_keeps_its_own_fifo_order():
    async def main():
        log = Log()
        plain, analytics = pair(log, plain_delay=0.0, analytics_delay=0.005, analytics_tokens=16)
        plain.start(), analytics.start()
        # the second job's shorter rows would fill a batch better: they still wait their turn
        first, second = submit(analytics, [16] * 3, "a"), submit(analytics, [8] * 3, "b")
        got = await asyncio.gather(first, second)
        await close(plain, analytics)
        return got, log.batches

    (first, second), batches = run(main())
    assert [r[1] for r in first] == ["a"] * 3 and [r[1] for r in second] == ["b"] * 3
    assert [lengths for _, lengths in batches] == [[16], [16], [16], [8, 8], [8]]


def test_analytics_wait_while_plain_work_is_queued_or_running():
    async def main():
        log = Log()
        plain, analytics = pair(log, plain_delay=0.05)
        plain.start(), analytics.start()
        busy = [submit(plain, [8] * 64, i) for i in range(3)]  # three full batches, one after another
        await asyncio.sleep(0)
        rows = submit(analytics, [16], "occlusion")
        await asyncio.gather(*busy, rows)
        await close(plain, analytics)
        return [tag for tag, _ in log.batches]

    assert run(main()) == ["plain", "plain", "plain", "analytics"]


def test_on_a_thread_of_their_own_a_running_analytics_batch_does_not_hold_plain_work():
    async def main():
        log = Log()
        plain, analytics = pair(log, plain_delay=0.0, analytics_delay=1.0, shared=False)
        plain.start(), analytics.start()
        rows = submit(analytics, [16], "occlusion")
        while not log.analytics_running.is_set():
            await asyncio.sleep(0.001)
        answer = await submit(plain, [8], "plain")
        still_running = log.analytics_running.is_set()
        await rows
        await close(plain, analytics)
        return answer, still_running

    answer, still_running = run(main())
    assert answer[0][1] == "plain" and still_running  # answered while the analytics batch ran


def test_closing_the_analytics_batcher_leaves_a_shared_thread_to_its_owner():
    async def main():
        log = Log()
        plain, analytics = pair(log)
        plain.start(), analytics.start()
        await analytics.close()
        got = await submit(plain, [8], "after")
        await plain.close()
        return got

    assert run(main())[0][1] == "after"


def test_closing_analytics_then_plain_answers_every_analytics_job():
    """EncoderRuntime closes its analytics batcher first: it may borrow the embed batcher's
    thread, which closing that one ends."""
    async def main():
        log = Log()
        plain, analytics = pair(log, plain_delay=0.02, analytics_delay=0.02)
        plain.start(), analytics.start()
        rows = [submit(analytics, [16], i) for i in range(5)]
        busy = submit(plain, [8], "plain")
        await asyncio.sleep(0.01)
        await analytics.close(1.0)
        await plain.close(1.0)
        await asyncio.sleep(0)
        return [f.done() for f in rows], busy.done()

    rows_done, plain_done = run(main())
    assert all(rows_done) and plain_done


def test_a_batch_whose_thread_is_gone_fails_instead_of_hanging():
    async def main():
        log = Log()
        plain, analytics = pair(log)
        plain.start(), analytics.start()
        plain.executor.shutdown(wait=True)  # as closing the embed batcher first would
        rows = submit(analytics, [16], "occlusion")
        try:
            await asyncio.wait_for(rows, 5)
        except RuntimeError as e:
            return str(e)
        finally:
            await close(analytics, plain)

    assert "shutdown" in run(main())
