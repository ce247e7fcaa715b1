"""Head drift (service.engine.analytics.drift, HEADWISE_ATTENTION_SAMPLE): the entropy and special-share
math against numpy written out, no sampler and no metric when off, the bound on samples in
flight, and a request's answer never waiting for its sample. The fake backend stands in for
the model (its attention: tests/unit/fakes.fake_attention)."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

from headwise.service.api.sizes import JSON
from headwise.service.engine import Engine
from headwise.service.engine.analytics.drift import (
    DriftSampler,
    after_plain_work,
    chunks,
    head_entropy,
    special_positions,
    special_share,
)
from headwise.service.engine.params import AttentionSpec, EmbedParams
from headwise.service.engine.tokenizer import Encoded
from headwise.service.engine.work import Entry, Job, Limits
from headwise.service.metrics import Metrics
from headwise.service.settings import Settings, SettingsError, load_settings
from tests.unit.fakes import (
    N_HEADS,
    N_LAYERS,
    DrivenBatcher,
    FakeBackend,
    client_for,
    fake_attention,
    wait_ready,
)

DRIFT_NAMES = ("headwise_head_attention_entropy", "headwise_head_special_share", "headwise_head_samples")


def softmax_rows(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    x = rng.normal(size=shape) * 3
    w = np.exp(x - x.max(-1, keepdims=True))
    return (w / w.sum(-1, keepdims=True)).astype(np.float32)


def entropy_by_hand(w: np.ndarray) -> float:
    """One head's [T, T]: the mean over rows of −Σ p ln p, over ln T, a row at a time."""
    t = w.shape[-1]
    rows = [-sum(float(p) * np.log(float(p)) for p in row if p > 0) / np.log(t) for row in w]
    return float(np.mean(rows))


# ------------------------------------------------------------------ the math


def test_entropy_of_uniform_and_one_hot_rows():
    t = 7
    np.testing.assert_allclose(head_entropy(np.full((t, t), 1 / t, np.float32)), 1.0, atol=1e-6)
    np.testing.assert_allclose(head_entropy(np.eye(t, dtype=np.float32)), 0.0, atol=1e-12)
    half = np.zeros((4, 4), np.float32)
    half[:, :2] = 0.5  # every row: two keys at 1/2 → ln 2 / ln 4 = 1/2
    np.testing.assert_allclose(head_entropy(half), 0.5, atol=1e-6)


def test_entropy_and_share_per_head_match_numpy():
    rng = np.random.default_rng(0)
    w = softmax_rows(rng, (3, 4, 9, 9))  # [L, H, T, T]
    ent, share = head_entropy(w), special_share(w, [0, 8])
    assert ent.shape == share.shape == (3, 4)
    for layer in range(3):
        for head in range(4):
            a = w[layer, head].astype(np.float64)
            assert ent[layer, head] == pytest.approx(entropy_by_hand(a), abs=1e-9)
            assert share[layer, head] == pytest.approx(np.mean(a[:, 0] + a[:, 8]), abs=1e-9)
    assert ent.min() >= 0 and ent.max() <= 1 and share.min() >= 0 and share.max() <= 1


def test_share_of_uniform_rows_and_no_special_token():
    w = np.full((2, 5, 5), 0.2, np.float32)
    np.testing.assert_allclose(special_share(w, [0, 4]), [0.4, 0.4], atol=1e-6)
    np.testing.assert_array_equal(special_share(w, []), [0.0, 0.0])


def test_special_positions_are_the_added_tokens():
    def enc(ids, segments=None):
        ids = np.asarray(ids, np.int64)
        return Encoded(ids, np.zeros_like(ids), ["x"] * len(ids), [(0, 0)] * len(ids), segments)

    special = frozenset({101, 102})
    assert special_positions(enc([101, 5, 102, 6, 102]), special) == [0, 4]  # a [SEP] typed in the text is not
    assert special_positions(enc([5, 6, 7]), special) == []  # token ids sent as they are: none added
    assert special_positions(enc([101, 102]), special) == [0, 1]
    pair = enc([101, 5, 102, 6, 102], np.array([-1, 0, -1, 1, -1], np.int8))
    assert special_positions(pair, special) == [0, 2, 4]


def test_chunks_stay_within_the_attention_batchers_limits():
    encs = [Encoded(np.ones(n, np.int64), np.zeros(n, np.int64), ["x"] * n, [(0, 0)] * n) for n in (5, 30, 12, 30, 3)]
    limits = Limits(64, 64, 0.0, 100, cell_bytes=4, budget_bytes=4 * 30 * 30 * 2)  # two rows of 30 at most
    got = list(chunks([(e, i) for i, e in enumerate(encs)], limits, lambda n: n))
    assert [([e.length for e, _ in c], p) for c, p in got] == [([30, 30], 30), ([12, 5, 3], 12)]
    assert [[tag for _, tag in c] for c, _ in got] == [[1, 3], [2, 0, 4]]  # each input keeps its tag


# ------------------------------------------------------------------ off: nothing at all


def test_the_setting_is_a_share_between_0_and_1(monkeypatch):
    assert Settings().attention_sample == 0
    monkeypatch.setenv("HEADWISE_ATTENTION_SAMPLE", "0.01")
    assert load_settings().attention_sample == 0.01
    for bad in ("-0.1", "1.5", "nan", "often"):
        monkeypatch.setenv("HEADWISE_ATTENTION_SAMPLE", bad)
        with pytest.raises(SettingsError, match="HEADWISE_ATTENTION_SAMPLE"):
            load_settings()


def test_sampling_off_no_sampler_and_no_metric(package):
    metrics = Metrics(gpu=None)
    engine = Engine(Settings(models_dir=package.parent), metrics, FakeBackend, measure=JSON)
    assert engine.drift is None
    names = {f.name for f in metrics.registry.collect()}
    assert not any(n.startswith(DRIFT_NAMES) for n in names)
    with client_for(package) as c:
        wait_ready(c)
        assert c.post("/v1/embed", json={"inputs": "the cat sat"}).status_code == 200
        assert "headwise_head_" not in c.get("/metrics").text


def test_sampling_on_registers_the_metrics_once(package):
    metrics = Metrics(gpu=None)
    Engine(Settings(models_dir=package.parent, attention_sample=0.5), metrics, FakeBackend, measure=JSON)
    metrics.enable_head_drift()  # a second engine on the same metrics registers nothing twice
    names = {f.name for f in metrics.registry.collect()}
    assert set(DRIFT_NAMES) <= names


# ------------------------------------------------------------------ on: off the request's path


class Threads(FakeBackend):
    """Records the thread of every graph run, by role."""

    def __init__(self, package, settings):
        super().__init__(package, settings)
        self.threads: list[tuple[str, int]] = []

    def run(self, role, feeds, outputs):
        self.threads.append((role, threading.get_ident()))
        return super().run(role, feeds, outputs)


def started_engine(package, **sampler) -> tuple[Engine, threading.Event]:
    """A ready engine sampling every plain request, with a sampler of its own (`sampler`:
    DriftSampler's bounds) whose histograms wait for the event returned: samples pile up while
    it is clear."""
    engine = Engine(Settings(models_dir=package.parent, attention_sample=1.0), Metrics(gpu=None), Threads, measure=JSON)
    engine.load_packages()
    engine._prepare()
    engine.drift = DriftSampler(1.0, engine.metrics, engine.analytics.pool, **sampler)
    gate, observe = threading.Event(), engine.drift.observe

    def gated(*args):
        gate.wait(10)
        observe(*args)

    engine.drift.observe = gated
    return engine, gate


def count(engine: Engine, outcome: str) -> float:
    return engine.metrics.registry.get_sample_value("headwise_head_samples_total",
                                                    {"model": "tiny", "outcome": outcome}) or 0.0


async def settled(engine: Engine, within: float = 10) -> None:
    deadline = time.monotonic() + within
    while (engine.drift.pending or engine.drift.running) and time.monotonic() < deadline:
        await asyncio.sleep(0.005)
    assert engine.drift.pending == engine.drift.running == 0


def test_answers_do_not_wait_for_samples_which_are_bounded_and_batched(package):
    async def main():
        engine, gate = started_engine(package, max_pending=2, batch=2, flush_after=30)
        engine.start()
        rt = engine.models["tiny"]
        rt.backend.threads.clear()
        rt.backend.calls.clear()
        try:
            for i in range(6):  # every answer comes while no sample can finish
                result = await asyncio.wait_for(engine.embed(rt, [f"the cat sat {i}"], EmbedParams()), 5)
                assert result.data[0].sentence is not None
            # two run (the histograms wait), two wait in the full buffer, two were dropped
            assert (engine.drift.running, engine.drift.pending) == (2, 2)
            assert count(engine, "dropped") == 2 and count(engine, "measured") == 0
            gate.set()
            await settled(engine)
            assert count(engine, "measured") == 4 and count(engine, "failed") == 0
            entropy = engine.metrics.registry.get_sample_value(
                "headwise_head_attention_entropy_count", {"model": "tiny", "layer": "1", "head": "2"})
            assert entropy == 4
            # two graph runs of two inputs each, on the embed batcher's thread, between its batches
            assert [shape[0] for role, shape in rt.backend.calls if role == "attention"] == [2, 2]
            runs = rt.backend.threads
            assert {t for r, t in runs if r == "attention"} == {t for r, t in runs if r == "embed"}
        finally:
            gate.set()
            await engine.close(1)

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_lone_drawn_request_runs_once_its_wait_is_over(package):
    async def main():
        engine, gate = started_engine(package, batch=8, flush_after=0.05)
        gate.set()
        engine.start()
        rt = engine.models["tiny"]
        try:
            await engine.embed(rt, ["the dog ran", "a cat"], EmbedParams())
            assert engine.drift.pending == 2
            await settled(engine, within=5)
            assert count(engine, "measured") == 1  # one request, its two inputs observed
            assert engine.metrics.registry.get_sample_value(
                "headwise_head_special_share_count", {"model": "tiny", "layer": "0", "head": "0"}) == 2
        finally:
            await engine.close(1)

    asyncio.run(asyncio.wait_for(main(), 30))


def test_offer_returns_at_once_and_skips_what_is_not_plain(package):
    async def main():
        engine, gate = started_engine(package, batch=1)
        engine.start()
        rt = engine.models["tiny"]
        try:
            data = (await engine.embed(rt, ["a dog"], EmbedParams(attention=rt.attention_spec(None, None)))).data
            assert engine.drift.pending == engine.drift.running == 0  # asked for attention: not plain
            spec = AttentionSpec.select(N_LAYERS, N_HEADS, None, None)
            engine.drift.offer(rt, [[2, 5, 3]], EmbedParams(), data)  # token ids: no special tokens added
            engine.drift.offer(rt, ["a dog"], EmbedParams(attention=spec), data)
            engine.drift.offer(rt, ["a dog"], EmbedParams(special_tokens=False), data)  # no [CLS] nor [SEP]
            assert engine.drift.pending == 0
            engine.drift.offer(rt, ["a dog"], EmbedParams(), data)
            assert engine.drift.pending == 1 and engine.drift.running == 0  # buffered, not run
            gate.set()
            await settled(engine)
            assert count(engine, "measured") == 1
        finally:
            gate.set()
            await engine.close(1)

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_sample_waits_until_every_plain_batcher_is_idle():
    async def main():
        release = threading.Event()

        def slow(entries, padded):
            release.wait(10)
            return [None] * len(entries)

        plain = [DrivenBatcher(slow, Limits(1024, 64, 0.0, 100), [8, 16]) for _ in range(2)]
        for b in plain:
            b.start()
        job = Job(1)
        running = plain[1].submit(job, [Entry(job, 0, np.ones(8, np.int64), np.zeros(8, np.int64))])
        waiting = asyncio.create_task(after_plain_work(plain))
        await asyncio.sleep(0.05)
        assert not waiting.done()  # the second batcher is running a batch
        release.set()
        await running
        await asyncio.wait_for(waiting, 5)
        for b in plain:
            await b.close()

    asyncio.run(asyncio.wait_for(main(), 20))


def test_a_fraction_is_sampled(package):
    sampler = DriftSampler(0.25, Metrics(gpu=None), pool=None, seed=7)
    draws = [sampler._draw() < sampler.rate for _ in range(4000)]
    assert 0.2 < np.mean(draws) < 0.3


# ------------------------------------------------------------------ through the app


def sample_values(text: str, name: str) -> dict[tuple[str, str], float]:
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{"):
            labels = dict(kv.split("=") for kv in line[len(name) + 1:line.index("}")].split(","))
            out[(labels["layer"].strip('"'), labels["head"].strip('"'))] = float(line.rsplit(" ", 1)[1])
    return out


def test_the_observed_values_are_those_of_the_inputs_attention(package):
    with client_for(package, attention_sample=1.0) as c:
        wait_ready(c)
        c.app.state.engine.drift.flush_after = 0  # run a lone drawn request at once
        text = "the quick brown fox jumps over the lazy dog"
        assert c.post("/v1/embed", json={"inputs": text}).status_code == 200
        for _ in range(1000):
            metrics = c.get("/metrics").text
            if 'headwise_head_samples_total{model="tiny",outcome="measured"} 1.0' in metrics:
                break
            time.sleep(0.01)
        else:
            raise AssertionError("the sample never ran")
        ids = np.asarray([c.post("/v1/tokenize", json={"inputs": text}).json()["data"][0]["ids"]])
        w = fake_attention(ids, np.ones_like(ids))[0]  # [L, H, T, T]
    entropy = sample_values(metrics, "headwise_head_attention_entropy_sum")
    share = sample_values(metrics, "headwise_head_special_share_sum")
    assert len(entropy) == len(share) == N_LAYERS * N_HEADS
    t = w.shape[-1]
    for layer in range(N_LAYERS):
        for head in range(N_HEADS):
            a = w[layer, head].astype(np.float64)
            assert entropy[(str(layer), str(head))] == pytest.approx(entropy_by_hand(a), abs=1e-6)
            assert share[(str(layer), str(head))] == pytest.approx(np.mean(a[:, 0] + a[:, t - 1]), abs=1e-6)
