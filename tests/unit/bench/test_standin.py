"""The device stand-in (bench/standin.py): its timing table's interpolation, how long `run`
holds and what it returns, its counters, and the app serving it as a GPU. Timing bounds are
generous: the stand-in sleeps at least its time, and no upper bound tighter than a second."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

from bench import process_mode, standin, standin_run
from bench.noise import TICK
from bench.standin import Counters, HoldTable, Instant, StandIn
from tests.unit.fakes import D_MODEL, N_HEADS, N_LAYERS, client_for, wait_ready

# role → tokens → batch → ms: at 10 tokens batch 8 dips below batch 1 (measurement noise)
TABLE = HoldTable({"embed": {10: {1: 2.0, 8: 1.5, 16: 4.0}, 30: {1: 3.0, 16: 8.0}},
                   "attention": {10: {1: 5.0, 2: 7.0}}})


def package(**variants):
    return SimpleNamespace(d_model=D_MODEL, n_layers=N_LAYERS, n_heads=N_HEADS,
                           variants=variants or {"fast": 0, "fast.fp16": 0, "attention": 0})


def feeds(b: int, t: int) -> dict[str, np.ndarray]:
    return {"input_ids": np.ones((b, t), np.int64), "attention_mask": np.ones((b, t), np.int64)}


# -- the table ------------------------------------------------------------------------------
def test_table_is_exact_at_rising_points_and_linear_between():
    assert TABLE.ms("embed", 1, 10) == 2.0
    assert TABLE.ms("embed", 16, 30) == 8.0
    assert TABLE.ms("embed", 12, 10) == pytest.approx(3.0)  # 2.0 at 8 (lifted), 4.0 at 16
    assert TABLE.ms("embed", 1, 20) == pytest.approx(2.5)  # halfway between the lengths
    assert TABLE.ms("embed", 16, 20) == pytest.approx(6.0)


def test_table_is_never_below_batch_one_nor_falls_with_batch():
    assert TABLE.ms("embed", 8, 10) == 2.0  # measured 1.5, under batch 1's 2.0
    times = [TABLE.ms("embed", b, t) for t in (8, 10, 24, 30, 64) for b in range(1, 80)]
    assert min(times) >= 2.0
    for t in (8, 10, 24, 30, 64):
        row = [TABLE.ms("embed", b, t) for b in range(1, 80)]
        assert row == sorted(row)


def test_table_outside_the_measurements():
    assert TABLE.ms("embed", 1, 4) == 2.0  # shorter than measured: the shortest length's time
    assert TABLE.ms("embed", 32, 10) == pytest.approx(8.0)  # 2.0 → 4.0 over 8 → 16 goes on
    assert TABLE.ms("embed", 1, 50) == pytest.approx(4.0)  # 2.0 → 3.0 over 10 → 30 tokens goes on
    falling = HoldTable({"embed": {10: {1: 2.0}, 30: {1: 1.0}}})
    assert falling.ms("embed", 1, 60) == 1.0  # a fall is not extrapolated: flat past the last length
    assert TABLE.ms("analytics", 16, 30) == TABLE.ms("embed", 16, 30)  # unknown roles read embed
    assert TABLE.ms("attention", 2, 10) == 7.0


def test_h100_table_loads_with_its_sources():
    t = HoldTable.load()
    assert set(t.roles) == {"embed", "attention"}
    assert t.roles["embed"][128][64] > 0 and "h100-ceiling.json" in t.about and "bench/results/" in t.about
    assert all(0.1 < t.ms(r, b, n) < 100 for r in t.roles for b in (1, 7, 64) for n in (8, 24, 128, 256))


# -- the backend ----------------------------------------------------------------------------
def test_standin_holds_for_the_table_time_and_counts_it():
    s = StandIn(package(), None, TABLE)
    assert (s.provider, s.precision, s.variants) == ("cuda", "fp16", {"embed": "fast.fp16", "attention": "attention"})
    t0 = time.perf_counter()
    out = s.run("embed", feeds(4, 10), ["sentence_embedding"])
    took = time.perf_counter() - t0
    want = TABLE.ms("embed", 4, 10) / 1000
    assert want <= took < want + 1.0
    c = s.counters.snapshot()
    assert (c["calls"], c["inputs"]) == (1, 4)
    assert c["hold_s"] == pytest.approx(want) and want <= c["run_s"] <= took
    assert out["sentence_embedding"].shape == (4, D_MODEL)


def test_outputs_have_the_graph_shapes():
    s = StandIn(package(fast=0), None, HoldTable({"embed": {8: {1: 0.01}}}))
    assert s.variants == {"embed": "fast"}  # no fp16 graph: the stand-in still serves
    names = ["sentence_embedding", "last_hidden_state", "attentions", "attentions_f16"]
    out = s.run("attention", feeds(300, 6), names)
    assert out["sentence_embedding"].shape == (300, D_MODEL)  # more rows than made at first
    assert out["last_hidden_state"].shape == (300, 6, D_MODEL)
    assert out["attentions"].shape == (300, N_LAYERS, N_HEADS, 6, 6)
    assert out["attentions_f16"].dtype == np.float16
    assert np.allclose(out["attentions"].sum(-1), 1.0)
    assert all(out[n].dtype == np.float32 for n in names[:3])
    assert list(Instant(package(), None).run("embed", feeds(2, 5), ["last_hidden_state"])) == ["last_hidden_state"]


def test_counters_add_up_across_threads():
    c = Counters()
    threads = [threading.Thread(target=lambda: [c.add(2, 0.5, 0.75) for _ in range(1000)]) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert c.snapshot() == {"calls": 4000, "inputs": 8000, "hold_s": 2000.0, "run_s": 3000.0}


# -- serving --------------------------------------------------------------------------------
def test_the_app_serves_the_standin_as_a_gpu(package):
    """Nothing in the service refuses provider "cuda" without a GPU: it warms up at its largest
    batches and pads to length buckets, as on one."""
    counters = Counters()
    fast = HoldTable({"embed": {8: {1: 0.01}}})
    with client_for(package, backend=lambda p, s: StandIn(p, s, fast, counters)) as c:
        wait_ready(c)
        warm = counters.snapshot()
        assert warm["inputs"] > warm["calls"]  # warm-up ran batches of more than one
        r = c.post("/v1/embed", json={"inputs": ["the cat sat", "a dog"]})
        assert r.status_code == 200, r.text
        assert [len(d["embedding"]) for d in r.json()["data"]] == [D_MODEL, D_MODEL]
        info = c.get(f"/v1/models/{r.json()['model']}").json()
        assert (info["provider"], info["precision"]) == ("cuda", "fp16")
    assert counters.snapshot()["inputs"] == warm["inputs"] + 2


def test_counters_route_answers_in_front_of_the_app():
    counters = Counters()
    counters.add(3, 0.25, 0.5)
    seen = []

    async def app(scope, receive, send):
        seen.append(scope["path"])

    sent = []

    async def send(message):
        sent.append(message)

    outer = standin.with_counters(app, counters)
    asyncio.run(outer({"type": "http", "path": standin.COUNTERS_PATH}, None, send))
    asyncio.run(outer({"type": "http", "path": "/v1/embed"}, None, send))
    assert seen == ["/v1/embed"] and sent[0]["status"] == 200
    assert json.loads(sent[1]["body"]) == {"calls": 1, "inputs": 3, "hold_s": 0.25, "run_s": 0.5}


# -- the harness's arithmetic ---------------------------------------------------------------
def test_figures_of_one_cell():
    res = {"requests": 110, "status": 10, "duration_us": 2_000_000, "p50": 1500, "p95": 2000, "p99": 3000,
           "connect": 0, "read": 0, "write": 0, "timeout": 0}
    before = {"calls": 10, "inputs": 100, "hold_s": 1.0, "run_s": 1.1, "ticks": {1: 100}}
    after = {"calls": 110, "inputs": 3300, "hold_s": 2.2, "run_s": 2.5, "ticks": {1: 100 + 32 * TICK}}
    f = standin_run.figures(res, before, after, 32)
    assert f["requests_per_s"] == 50 and f["inputs_per_s"] == 1600 and f["errors"] == 10
    assert f["mean_batch"] == 32 and f["device_busy"] == pytest.approx(0.6) and f["run_busy"] == pytest.approx(0.7)
    assert f["cpu_us_per_input"] == pytest.approx(32 / 3200 * 1e6) and f["p50_ms"] == 1.5


def test_the_busiest_front_ends_share():
    """Process mode's bench: how evenly the front-ends shared the work (one started in between
    counts from 0; other roles are not front-ends)."""
    fe, eng = "headwise.service.server.frontend", "bench.standin_engine"
    before = {1: (fe, 100), 2: (fe, 100), 3: (eng, 0)}
    assert process_mode.top_share(before, {1: (fe, 400), 2: (fe, 200), 3: (eng, 900)}, "server.frontend") == 0.75
    assert process_mode.top_share(before, {1: (fe, 100), 4: (fe, 50)}, "server.frontend") == 1.0
    assert np.isnan(process_mode.top_share({1: (fe, 0)}, {1: (fe, 10)}, "server.frontend"))  # one front-end


def test_the_target_is_read():
    cells = standin_run.plan([20], [1, 64], [1, 32])
    results = {c: {"device_busy": 0.7} for c in cells}
    assert "met" in standin_run.verdict(results) and "70%" in standin_run.verdict(results)
    assert "not measured" in standin_run.verdict({})
