"""Triton's statistics and TEI's timing headers from the engine's own timings
(service.engine.stats, service.api.timing): what a request and a batch add, in Triton's shape."""

from __future__ import annotations

import time
from types import SimpleNamespace

from headwise.service.api.timing import characters, tei_headers
from headwise.service.engine.stats import NS, ModelStats, Timing


def test_requests_and_batches_add_up_in_tritons_shape():
    s = ModelStats()
    s.batch(2, compute_input=0.001, infer=0.010, output=0.0005)
    s.batch(2, compute_input=0.002, infer=0.020, output=0.0005)
    s.batch(1, compute_input=0.001, infer=0.005, output=0.0001)
    s.request(Timing(tokenize=0.0005, queue=0.003, feeds=0.0005, infer=0.010, output=0.0005), 0.015)
    s.request(None, 0.002)
    out = s.json("m", "1")
    assert (out["name"], out["version"], out["inference_count"], out["execution_count"]) == ("m", "1", 5, 3)
    st = out["inference_stats"]
    assert st["success"] == {"count": 1, "ns": int(0.015 * NS)} and st["fail"] == {"count": 1, "ns": int(0.002 * NS)}
    assert st["queue"] == {"count": 1, "ns": int(0.003 * NS)}
    assert st["compute_input"]["ns"] == int(0.001 * NS)  # tokenising and feeds
    assert st["compute_infer"]["ns"] == int(0.010 * NS) and st["cache_hit"] == {"count": 0, "ns": 0}
    assert [b["batch_size"] for b in out["batch_stats"]] == [1, 2]
    two = out["batch_stats"][1]
    assert two["compute_infer"] == {"count": 2, "ns": int(0.010 * NS) + int(0.020 * NS)}
    assert abs(out["last_inference"] - time.time() * 1000) < 60_000


def test_a_model_without_traffic_reports_zeros():
    out = ModelStats().json("m", "1")
    assert out["inference_count"] == 0 and out["batch_stats"] == [] and out["last_inference"] == 0
    assert all(v == {"count": 0, "ns": 0} for v in out["inference_stats"].values())


def test_tei_headers_in_whole_milliseconds():
    rt = SimpleNamespace(backend=SimpleNamespace(provider="cuda"))
    result = SimpleNamespace(timing=Timing(tokenize=0.0021, queue=0.0459, infer=0.0123), n_tokens=17)
    h = {k.decode(): v.decode() for k, v in tei_headers(rt, result, time.perf_counter() - 0.25, 42)}
    assert h["x-compute-type"] == "gpu" and h["x-compute-characters"] == "42" and h["x-compute-tokens"] == "17"
    assert (h["x-tokenization-time"], h["x-queue-time"], h["x-inference-time"]) == ("2", "45", "12")
    assert 250 <= int(h["x-total-time"]) < 5000 and h["x-compute-time"] == h["x-total-time"]
    untimed = dict(tei_headers(SimpleNamespace(), SimpleNamespace(timing=None, n_tokens=0), time.perf_counter(), 0))
    assert untimed[b"x-compute-type"] == b"cpu" and untimed[b"x-queue-time"] == b"0"


def test_characters_count_texts_and_pairs_not_ids():
    assert characters(["ab", ("cde", "f"), [101, 102]]) == 6
