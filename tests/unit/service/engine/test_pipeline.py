"""The overlapped pipeline (Batcher(overlap=True)): requests that arrive while a batch runs on
a slow fake device are tokenised on the tokenizer thread, and every request still gets exactly
its own results, under cancellation, disconnects, tokenizer errors and shutdown."""

import asyncio
import random
import threading
import time

import numpy as np

from headwise.service.engine.batching import Entry, Job, Limits
from headwise.service.errors import Disconnected, NotReady
from tests.unit.fakes import DrivenBatcher

BUCKETS = [8, 16, 32, 64]


class SlowDevice:
    """The inference thread's run: holds each batch `delay` seconds (or, with `hold`, until that
    Event is set), answers (job tag, index); `started` is set once a run has begun."""

    def __init__(self, delay=0.02, hold: threading.Event | None = None):
        self.delay, self.hold, self.started = delay, hold, threading.Event()
        self.spans = []  # (start, end) of each run
        self.threads = set()

    def __call__(self, entries, padded):
        t0 = time.perf_counter()
        self.threads.add(threading.current_thread().name)
        self.started.set()
        if self.hold is not None:
            assert self.hold.wait(10), "the test never let the device go"
        time.sleep(self.delay)
        self.spans.append((t0, time.perf_counter()))
        return [(e.job.params, e.index, int(e.ids[0])) for e in entries]


class Tokenizer:
    """`prepare`: one entry per raw input, its ids the input's number; records where and when."""

    def __init__(self, fail=()):
        self.calls = []  # (thread name, start, end, tags)
        self.fail = set(fail)

    def __call__(self, jobs):
        t0 = time.perf_counter()
        out = []
        for j in jobs:
            if j.params in self.fail:
                out.append(ValueError(f"{j.params}: too long"))
            else:
                out.append([Entry(j, i, np.full(1 + n % 7, n, np.int64), np.zeros(1 + n % 7, np.int64))
                            for i, n in enumerate(j.inputs)])
        time.sleep(0.002)
        self.calls.append((threading.current_thread().name, t0, time.perf_counter(), [j.params for j in jobs]))
        return out


def pipeline(device, tokenizer, max_size=8, wait_s=0.0, max_queue=10_000):
    return DrivenBatcher(device, Limits(1024, max_size, wait_s, max_queue), BUCKETS, None,
                         prepare=tokenizer, overlap=True)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


def job(tag, inputs, is_disconnected=None):
    return Job(len(inputs), inputs=inputs, params=tag, is_disconnected=is_disconnected)


def test_requests_arriving_during_a_batch_are_tokenised_beside_it():
    device, tok = SlowDevice(0.0, hold=threading.Event()), Tokenizer()

    async def main():
        b = pipeline(device, tok, max_size=64)
        b.start()
        first = b.submit(job("a", [1, 2]))
        assert await asyncio.to_thread(device.started.wait, 10)  # a's batch is on the device now
        later = [b.submit(job(t, list(range(n, n + 16)))) for t, n in (("b", 3), ("c", 40))]  # 32 inputs
        for _ in range(500):  # the device is held until they are tokenised (or 5 s have passed)
            if any(c[3] == ["b", "c"] for c in tok.calls):
                break
            await asyncio.sleep(0.01)
        device.hold.set()
        out = await asyncio.gather(first, *later)
        await b.close()
        return out

    a, b_, c = run(main())
    assert a == [("a", 0, 1), ("a", 1, 2)]
    assert b_ == [("b", i, 3 + i) for i in range(16)] and c == [("c", i, 40 + i) for i in range(16)]
    beside = [c for c in tok.calls if c[3] == ["b", "c"]]
    assert beside and beside[0][0].startswith("headwise-tok")  # not the inference thread
    start, end = device.spans[0]
    assert start < beside[0][1] < end  # while a's batch ran
    assert device.threads == {next(iter(device.threads))} and not next(iter(device.threads)).startswith("headwise-tok")
    assert len(device.spans) == 2  # b and c ran together, after a


def test_a_few_inputs_wait_for_the_next_hop_rather_than_a_hop_of_their_own():
    """Under OVERLAP_MIN_INPUTS waiting inputs the thread hop would cost about what it saves."""
    from headwise.service.engine.batching import OVERLAP_MIN_INPUTS

    device, tok = SlowDevice(0.03), Tokenizer()

    async def main():
        b = pipeline(device, tok)
        b.start()
        first = b.submit(job("a", [1]))
        await asyncio.sleep(0.01)
        few = b.submit(job("f", list(range(OVERLAP_MIN_INPUTS - 1))))
        out = await asyncio.gather(first, few)
        await b.close()
        return out

    _, few = run(main())
    assert few == [("f", i, i) for i in range(OVERLAP_MIN_INPUTS - 1)]
    assert all(c[0].startswith("headwise-infer") for c in tok.calls)


def test_an_idle_server_tokenises_and_runs_a_lone_request_in_one_hop():
    device, tok = SlowDevice(0.0), Tokenizer()

    async def main():
        b = pipeline(device, tok)
        b.start()
        out = await b.submit(job("x", [5]))
        await b.close()
        return out

    assert run(main()) == [("x", 0, 5)]
    assert [c[0].startswith("headwise-infer") for c in tok.calls] == [True]


def test_every_request_gets_its_own_results_under_cancellation_disconnects_and_errors():
    device, tok = SlowDevice(0.005), Tokenizer(fail={"bad3", "bad17"})
    rng = random.Random(7)

    async def gone():
        return True

    async def here():
        return False

    async def main():
        b = pipeline(device, tok, max_size=16)
        b.start()
        futs, expect, cancelled = [], {}, []
        for k in range(120):
            tag = f"bad{k}" if k in (3, 17) else f"j{k}"
            inputs = [rng.randrange(1000) for _ in range(rng.randint(1, 20))]
            probe = gone if k % 11 == 5 else here
            fut = b.submit(job(tag, inputs, probe))
            futs.append((tag, probe, fut))
            expect[tag] = [(tag, i, n) for i, n in enumerate(inputs)]
            if k % 13 == 4:
                cancelled.append(fut)
            if k % 10 == 0:
                await asyncio.sleep(0.004)  # let batches run while more arrive
        for fut in cancelled:
            fut.cancel()
        results = []
        for tag, probe, fut in futs:
            try:
                results.append((tag, probe, await fut))
            except BaseException as e:
                results.append((tag, probe, e))
        await b.close()
        return results, expect, b

    results, expect, b = run(main())
    for tag, probe, res in results:
        if isinstance(res, asyncio.CancelledError):
            continue
        if tag.startswith("bad"):
            assert isinstance(res, (ValueError, Disconnected)), (tag, res)
        elif probe.__name__ == "gone":
            assert isinstance(res, Disconnected), (tag, res)
        else:
            assert res == expect[tag]
    ran = [c for c in tok.calls if c[0].startswith("headwise-tok")]
    assert ran, "nothing was tokenised beside a running batch"
    assert b.idle and not b._tokenizing


def test_results_match_inputs_exactly():
    """Each input's answer carries its own number: nothing crosses between requests."""
    device, tok = SlowDevice(0.003), Tokenizer()
    rng = random.Random(3)

    async def main():
        b = pipeline(device, tok, max_size=8)
        b.start()
        jobs = []
        for k in range(60):
            inputs = [rng.randrange(10_000) for _ in range(rng.randint(1, 12))]
            jobs.append((inputs, b.submit(job(f"t{k}", inputs))))
            if k % 7 == 0:
                await asyncio.sleep(0.002)
        out = [(inputs, await fut) for inputs, fut in jobs]
        await b.close()
        return out

    for inputs, res in run(main()):
        assert [n for _, _, n in res] == inputs


def test_close_drains_the_pipeline():
    """Shutdown finishes what is queued, tokenising and running: no accepted request is lost."""
    device, tok = SlowDevice(0.01), Tokenizer()

    async def main():
        b = pipeline(device, tok, max_size=4)
        b.start()
        futs = [b.submit(job(f"d{k}", [k, k + 1])) for k in range(10)]
        await asyncio.sleep(0.015)
        futs += [b.submit(job(f"e{k}", [k])) for k in range(10)]
        await b.close(timeout=10)
        return [f.result() for f in futs]

    out = run(main())
    assert len(out) == 20 and all(out)


def test_close_past_its_grace_fails_the_waiting_with_not_ready():
    device, tok = SlowDevice(0.05), Tokenizer()

    async def main():
        b = pipeline(device, tok, max_size=1)
        b.start()
        futs = [b.submit(job(f"s{k}", [k])) for k in range(6)]
        await asyncio.sleep(0.01)
        await b.close(timeout=0.06)
        return [f.exception() if f.done() and f.exception() else "ok" if f.done() else "pending" for f in futs]

    out = run(main())
    assert "pending" not in out  # every accepted request got an answer: a result or a 503
    assert all(o == "ok" or isinstance(o, NotReady) for o in out)


def test_a_failing_disconnect_probe_fails_its_jobs_and_the_pipeline_goes_on():
    device, tok = SlowDevice(0.03), Tokenizer()

    async def broken():
        raise OSError("probe failed")

    async def main():
        b = pipeline(device, tok, max_size=64)
        b.start()
        first = b.submit(job("a", [1]))
        await asyncio.sleep(0.01)  # a runs: the next 32 inputs go to the tokenizer, whose probe fails
        bad = b.submit(job("bad", list(range(32)), broken))
        try:
            await bad
        except OSError as e:
            failed = e
        later = await b.submit(job("later", [7]))
        await first
        await b.close()
        return failed, later, b.idle

    failed, later, idle = run(main())
    assert isinstance(failed, OSError) and later == [("later", 0, 7)] and idle


def test_process_mode_runs_few_inputs_on_the_loop_and_a_tokenised_batch_on_the_inference_thread():
    """With the device another process's (a backend with run_async), a hop of few inputs runs on
    the event loop; a batch tokenised beforehand (overlap) is padded and answered on the
    inference thread when it is larger than LOOP_TOKENISE, as a hop that tokenises as many is."""
    from types import SimpleNamespace

    from headwise.service.engine.batching import Batcher
    from headwise.service.engine.lane import LOOP_TOKENISE, Lane, on_loop
    from headwise.service.engine.work import Work

    where = []

    def answers(entries):
        return [(e.job.params, e.index, int(e.ids[0])) for e in entries]

    async def run_batch_async(role, entries, padded, batcher):
        where.append(("loop", len(entries)))
        await asyncio.sleep(0.05)
        return answers(entries)

    def run_batch(role, entries, padded):
        where.append(("thread", len(entries)))
        time.sleep(0.05)
        return answers(entries)

    model = SimpleNamespace(prepare=Tokenizer(), run_batch=run_batch, run_batch_async=run_batch_async,
                            backend=SimpleNamespace(run_async=None))

    async def main():
        b = Batcher(Limits(1024, 64, 0.0, 10_000), BUCKETS, None, overlap=True)
        lane = Lane(model)
        b.start(lane.serve("embed", b), lane.tokenise(b))
        first = b.submit(job("a", [1]))
        await asyncio.sleep(0.02)  # a's run is awaited on the loop now
        later = [b.submit(job(t, list(range(n, n + 16)))) for t, n in (("b", 3), ("c", 40))]
        out = await asyncio.gather(first, *later)
        await b.close()
        return out

    a, b_, c = run(main())
    assert a == [("a", 0, 1)] and b_ == [("b", i, 3 + i) for i in range(16)] and c[0] == ("c", 0, 40)
    assert where == [("loop", 1), ("thread", 32)]
    entry = Entry(job("x", [1]), 0, np.ones(1, np.int64), np.zeros(1, np.int64))
    assert on_loop(Work([], [entry] * LOOP_TOKENISE)) and not on_loop(Work([], [entry] * (LOOP_TOKENISE + 1)))
    assert not on_loop(Work([job("j", list(range(LOOP_TOKENISE + 1)))], [], run=True))


def test_a_light_lane_in_process_mode_tokenises_and_runs_every_hop_on_the_loop():
    """`light` (the embedding head's fast graph): with the device another process's, every hop
    runs on the event loop whatever its size, and so does overlap's tokenising beside a run;
    no thread is used, and each request still gets its own answer."""
    from types import SimpleNamespace

    from headwise.service.engine.batching import Batcher
    from headwise.service.engine.lane import LOOP_TOKENISE, Lane

    where, tokenizer = [], Tokenizer()

    async def run_batch_async(role, entries, padded, batcher):
        where.append((threading.current_thread().name, len(entries)))
        await asyncio.sleep(0.05)
        return [(e.job.params, e.index, int(e.ids[0])) for e in entries]

    model = SimpleNamespace(prepare=tokenizer, run_batch=None, run_batch_async=run_batch_async,
                            backend=SimpleNamespace(run_async=None))

    async def main():
        b = Batcher(Limits(1024, 64, 0.0, 10_000), BUCKETS, None, overlap=True)
        lane = Lane(model)
        b.start(lane.serve("embed", b, light=True), lane.tokenise(b, light=True))
        first = b.submit(job("a", list(range(LOOP_TOKENISE + 1))))
        await asyncio.sleep(0.02)  # a's run is awaited on the loop now: the next 32 are tokenised beside it
        later = [b.submit(job(t, list(range(n, n + 16)))) for t, n in (("b", 3), ("c", 40))]
        out = await asyncio.gather(first, *later)
        await b.close()
        return out, threading.current_thread().name

    (a, b_, c), loop = run(main())
    assert a[-1] == ("a", LOOP_TOKENISE, LOOP_TOKENISE) and b_ == [("b", i, 3 + i) for i in range(16)]
    assert c[0] == ("c", 0, 40)
    assert where == [(loop, LOOP_TOKENISE + 1), (loop, 32)]
    assert [(name, tags) for name, _, _, tags in tokenizer.calls] == [(loop, ["a"]), (loop, ["b", "c"])]
