"""Process mode's transport (service.backends.wire, core, remote) over a real ZMQ IPC socket,
with the fake backend in the engine's place: each run gets exactly its own rows back, the
batches front-ends send while the device is busy stack into one run (plain before analytics),
failures come back as errors, and a front-end notices the engine's death."""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time

import numpy as np
import pytest

from headwise.service.backends import wire
from headwise.service.backends.core import EngineCore
from headwise.service.backends.remote import EngineGone, EngineLink
from headwise.service.errors import Disconnected, NotReady
from headwise.service.package import load_package
from headwise.service.settings import Settings
from tests.fixtures.engine_core import OUTPUTS, Recording, feeds
from tests.unit.fakes import FakeBackend, client_for, wait_ready


def test_frames_round_trip_every_dtype_and_layout():
    arrays = {"ids": np.arange(12, dtype=np.int64).reshape(3, 4), "f16": np.ones((2, 0, 3), np.float16),
              "t": np.arange(24, dtype=np.float32).reshape(2, 3, 4).transpose(0, 2, 1)}  # not contiguous
    msg, out = wire.decode(wire.encode(wire.Result(7, wire.specs(arrays)), arrays))
    assert isinstance(msg, wire.Result) and msg.seq == 7
    for name, a in arrays.items():
        assert out[name].dtype == a.dtype and np.array_equal(out[name], a)


def test_frames_that_do_not_match_their_header_are_refused():
    frames = wire.encode(wire.Result(1, [wire.Array("a", "<f4", (2,))]))
    with pytest.raises(ValueError, match="1 arrays announced, 0 frames"):
        wire.decode(frames)


def test_a_run_answers_what_the_backend_answers(engine):
    core, link, backend = engine()
    f = feeds(3, 7)
    got = link.run("tiny", "embed", f, OUTPUTS)
    want = backend.run("embed", f, OUTPUTS)
    assert set(got) == set(OUTPUTS) and all(np.array_equal(got[k], want[k]) for k in OUTPUTS)
    remote = link.backend(load_package(core_package(core)), None)
    assert (remote.provider, remote.precision, remote.warmed) == ("cpu", "fp32", True)
    assert remote.has("attention") and not remote.has("decode")


def core_package(core):
    return next(iter(core.backends.values())).package.path


def _concurrently(link, calls):
    """Each (role, feeds) from a thread of its own, started together → their answers."""
    out = [None] * len(calls)

    def one(i, role, f):
        out[i] = link.run("tiny", role, f, OUTPUTS)

    threads = [threading.Thread(target=one, args=(i, *c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
        time.sleep(0.02)
    for t in threads:
        t.join(30)
    return out


def test_batches_sent_while_the_device_is_busy_stack_and_each_gets_its_own_rows(engine):
    core, link, backend = engine(delay=0.3)
    calls = [("embed", feeds(1 + i, 9, seed=i)) for i in range(4)]
    got = _concurrently(link, calls)
    for (role, f), answer in zip(calls, got, strict=True):
        want = FakeBackend.run(backend, role, f, OUTPUTS)
        assert all(np.array_equal(answer[k], want[k]) for k in OUTPUTS)
    assert max(r[2] for r in core.runs) >= 2  # runs stacked into one device run
    assert sum(r[3] for r in core.runs) == 1 + 2 + 3 + 4


def test_runs_stack_only_alike_and_within_the_batch_limits(engine):
    _core, link, backend = engine(delay=0.3, max_batch_size=4)
    calls = [("embed", feeds(2, 9)), ("embed", feeds(3, 9, 1)), ("embed", feeds(1, 12, 2)),
             ("attention", feeds(1, 9, 3)), ("attention", feeds(1, 9, 4)), ("embed", feeds(2, 9, 5))]
    got = _concurrently(link, calls)
    for (role, f), answer in zip(calls, got, strict=True):
        assert np.array_equal(answer["sentence_embedding"], FakeBackend.run(backend, role, f, OUTPUTS)["sentence_embedding"])
    rows = [n for role, n in backend.order]
    assert max(rows) <= 4
    assert all(n == 1 for role, n in backend.order if role == "attention")  # attention runs never stack


def test_plain_runs_go_before_queued_analytics_rows(engine):
    _core, link, backend = engine()
    backend.gate = threading.Event()  # the first run holds the device until the others wait
    first = threading.Thread(target=link.run, args=("tiny", "embed", feeds(1, 8), OUTPUTS))
    first.start()
    deadline = time.monotonic() + 10
    while not backend.order and time.monotonic() < deadline:
        time.sleep(0.005)
    later = [threading.Thread(target=link.run, args=("tiny", role, f, OUTPUTS))
             for role, f in (("analytics", feeds(2, 8, 1)), ("embed", feeds(3, 8, 2)))]
    for t in later:
        t.start()
    time.sleep(0.5)  # both reach the engine's socket (ZMQ's I/O thread takes them meanwhile)
    backend.gate.set()
    for t in (first, *later):
        t.join(30)
    assert [role for role, _ in backend.order] == ["embed", "embed", "analytics"]


def test_failures_come_back_as_errors(engine):
    _core, link, _backend = engine()
    with pytest.raises(RuntimeError, match="ValueError: the device said no"):
        link.run("tiny", "fail", feeds(1, 8), OUTPUTS)
    with pytest.raises(RuntimeError, match="serves no 'embed' of model 'other'"):
        link.run("other", "embed", feeds(1, 8), OUTPUTS)
    assert np.isfinite(link.run("tiny", "embed", feeds(1, 8), OUTPUTS)["sentence_embedding"]).all()


def test_a_stopping_engine_finishes_what_it_queued_and_refuses_the_rest(engine):
    core, link, _backend = engine(delay=0.3)
    answers, errors = [], []

    def one(f):
        try:
            answers.append(link.run("tiny", "embed", f, OUTPUTS))
        except NotReady as e:
            errors.append(e)

    first = threading.Thread(target=one, args=(feeds(1, 8),))
    first.start()
    time.sleep(0.1)
    stopper = threading.Thread(target=core.stop, args=(5,))
    stopper.start()
    time.sleep(0.05)
    one(feeds(1, 8, 1))  # sent while the first still runs, after the stop: refused
    first.join(10)
    stopper.join(10)
    assert len(answers) == 1 and answers[0]["sentence_embedding"].shape[0] == 1
    assert len(errors) == 1 and "stopping" in str(errors[0])


def test_the_front_end_notices_the_engines_death(engine):
    stand_in = subprocess.Popen(["sleep", "60"])  # the engine's pid as the watchdog sees it
    try:
        _core, link, _backend = engine(delay=2.0, pid=stand_in.pid)
        told = []
        link.on_lost(told.append)
        caught = []
        t = threading.Thread(target=lambda: caught.append(_raises(link)))
        t.start()
        time.sleep(0.2)
        stand_in.kill()
        stand_in.wait()
        t.join(5)
        assert told and isinstance(caught[0], EngineGone)
        with pytest.raises(EngineGone):
            link.run("tiny", "embed", feeds(1, 8), OUTPUTS)
    finally:
        stand_in.kill()


def _raises(link):
    try:
        link.run("tiny", "embed", feeds(1, 8), OUTPUTS)
    except Exception as e:
        return e
    return None


def test_the_app_answers_alike_through_the_engine(engine, package):
    """One code path: the app on the remote backend answers as on the backend itself."""
    _core, link, _backend = engine()
    bodies = [("/v1/embed", {"inputs": ["hello there", "a cat"]}),
              ("/v1/embed", {"inputs": ["hello there"], "attention": {"layers": [0], "heads": [0]}}),
              ("/v1/similarity", {"source": "a cat", "targets": ["a dog"], "explain": True}),
              ("/v1/occlusion", {"input": "the cat sat"})]
    with client_for(package) as direct, client_for(package, backend=link.backend) as remote:
        wait_ready(direct)
        wait_ready(remote)
        for path, body in bodies:
            a, b = direct.post(path, json=body), remote.post(path, json=body)
            assert a.status_code == b.status_code == 200, (a.text, b.text)
            assert a.content == b.content


def _gone_after(seconds: float, rows: set[int]):
    """A run's `gone` probe: no client has gone until `seconds` from now, then `rows` have."""
    at = time.monotonic() + seconds

    async def gone() -> set[int]:
        return rows if time.monotonic() >= at else set()
    return gone


def test_gone_clients_rows_are_taken_out_of_a_waiting_run_and_a_run_left_empty_is_dropped(engine):
    core, link, backend = engine(delay=0.4)
    busy = threading.Thread(target=link.run, args=("tiny", "embed", feeds(1, 8), OUTPUTS))
    busy.start()  # the device is busy: the runs below wait in the engine
    time.sleep(0.05)
    some, every = feeds(3, 9, 1), feeds(2, 9, 2)

    async def both():
        a = asyncio.ensure_future(link.run_async("tiny", "embed", some, OUTPUTS, _gone_after(0, {1})))
        b = asyncio.ensure_future(link.run_async("tiny", "embed", every, OUTPUTS, _gone_after(0, {0, 1})))
        return await asyncio.gather(a, b, return_exceptions=True)

    partly, dropped = asyncio.run(both())
    busy.join(10)
    assert isinstance(dropped, Disconnected)
    want = FakeBackend.run(backend, "embed", some, OUTPUTS)["sentence_embedding"]
    got = partly["sentence_embedding"]
    assert np.array_equal(got[[0, 2]], want[[0, 2]]) and not got[1].any()  # the gone row: zeros, not run
    assert backend.order == [("embed", 1), ("embed", 2)]  # the busy run, then 3 rows less the gone one
    assert sorted(core.drops) == [1, 2]


def test_an_abort_after_its_run_started_changes_nothing_in_the_engine(engine):
    core, link, backend = engine(delay=0.3)
    with pytest.raises(Disconnected):
        asyncio.run(link.run_async("tiny", "embed", feeds(1, 8), OUTPUTS, _gone_after(0.1, {0})))
    time.sleep(0.3)  # its answer came to nobody
    f = feeds(2, 8, 3)
    assert np.array_equal(link.run("tiny", "embed", f, OUTPUTS)["sentence_embedding"],
                          FakeBackend.run(backend, "embed", f, OUTPUTS)["sentence_embedding"])
    assert core.drops == [] and backend.order == [("embed", 1), ("embed", 2)]


def test_numbered_front_ends_share_the_engines_queue_table(engine):
    core, link, _backend = engine()
    pkg = load_package(core_package(core))
    links = [EngineLink(core.address, connect_timeout_s=5, slot=(i, 2)) for i in (0, 1)]
    try:
        a, b = (lk.backend(pkg, None) for lk in links)
        a.shared_queue("embed").set(3)
        a.shared_queue("analytics").set(1)
        assert (b.shared_queue("embed").elsewhere(), b.shared_queue("analytics").elsewhere()) == (3, 1)
        assert a.shared_queue("embed").elsewhere() == 0 and a.shared_queue("nothing") is None
        assert link.backend(pkg, None).shared_queue("embed") is None  # no slot: its own bound
    finally:
        for lk in links:
            lk.close()


def test_one_engine_thread_reads_the_socket_and_runs_the_device(engine):
    """No Python thread beside the one that runs the device: one that read messages took the GIL
    from it for milliseconds after each run (bench/results/engine-feed-1129.md)."""
    before = set(threading.enumerate())  # threads, not names: an earlier test's may linger
    _core, link, _backend = engine()
    assert np.isfinite(link.run("tiny", "embed", feeds(2, 5), OUTPUTS)["sentence_embedding"]).all()
    engines = [t.name for t in threading.enumerate() if t not in before
               and t.name.startswith("headwise-engine") and t.name != "headwise-engine-watch"]  # the link's
    assert engines == ["headwise-engine"]


def test_an_engine_thread_that_fails_says_so(package, tmp_path):
    """A bug that ends the engine's thread is told to `on_exit` (the engine process then exits 3,
    and the supervisor restarts the server) instead of leaving a process that answers nobody."""
    pkg = load_package(package)
    ended = []

    def take(_pending):  # outside any run: a failing run fails its group alone (test_engine_faults.py)
        raise RuntimeError("a bug")

    core = EngineCore({pkg.name: Recording(pkg, Settings(models_dir=package.parent))}, f"ipc://{tmp_path}/e.sock",
                      max_batch_size=64, max_batch_tokens=16384, on_exit=ended.append)
    core._take = take
    core.start(__import__("os").getpid())
    link = EngineLink(core.address, connect_timeout_s=5)
    try:
        def ask():  # its answer never comes: the run ends when the link is marked lost
            with pytest.raises(EngineGone):
                link.run("tiny", "embed", feeds(1, 4), OUTPUTS)

        asking = threading.Thread(target=ask, daemon=True)
        asking.start()
        deadline = time.monotonic() + 10
        while not ended and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(ended) == 1 and isinstance(ended[0], RuntimeError)
    finally:
        link.lost = "the test is over"  # what the watchdog sets when the engine process dies
        asking.join(5)
        link.close()
        core.stop(2)
    stopped = []
    core = EngineCore({pkg.name: Recording(pkg, Settings(models_dir=package.parent))}, f"ipc://{tmp_path}/f.sock",
                      max_batch_size=64, max_batch_tokens=16384, on_exit=stopped.append)
    core.start(__import__("os").getpid())
    core.stop(2)
    assert stopped == [None]
