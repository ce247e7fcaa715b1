"""Issue 8, traffic against a real server: nothing lost (5,000 requests from 32 clients, each
checked against onnxruntime run in this process on the package's own graphs), overload (429 +
Retry-After, fast, no 5xx, admitted throughput holds), disconnects dropped before inference,
and a stable thread count."""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import socket
import threading
import time
from collections import defaultdict

import httpx
import numpy as np
import pytest

from bench.limits import hammer, start_probe
from headwise.service.cpu import usable_cores
from tests.fixtures.metrics import total
from tests.fixtures.procfs import proc_status

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

WORDS = ["the", "cat", "dog", "fox", "owl", "sat", "ran", "on", "under", "a", "mat", "tree", "river", "quick", "brown", "lazy", "jumps", "over", "attention", "head", "layer", "token", "model", "vector", "sentence", "meaning", "of", "in", "and", "with"]
LAYERS, HEADS = [1, 4], [0, 7, 11]


def make_texts(n: int, seed: int) -> list[str]:
    """n distinct texts of mixed lengths (mostly short, some up to ~250 tokens)."""
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        k = rnd.choice([rnd.randint(1, 12)] * 6 + [rnd.randint(12, 60)] * 3 + [rnd.randint(60, 240)])
        out.append(f"{i} " + " ".join(rnd.choice(WORDS) for _ in range(k)))
    return out


def reference(package, texts: list[str], attention: bool) -> tuple[dict, dict]:
    """text → (tokens, sentence embedding) and text → attention[LAYERS][:, HEADS], from the
    package's graph in this process; inputs of one length per run, so no padding at all."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(package / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(max_length=256)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    sess = ort.InferenceSession(str(package / ("analysis.onnx" if attention else "fast.onnx")), so,
                                providers=["CPUExecutionProvider"])
    head_mask = next((i for i in sess.get_inputs() if i.name == "head_mask"), None)  # analysis: every head kept
    encs = tok.encode_batch(texts)
    by_len = defaultdict(list)
    for text, e in zip(texts, encs, strict=True):
        by_len[len(e.ids)].append((text, e))
    emb, att = {}, {}
    for _, group in by_len.items():
        for at in range(0, len(group), 64):
            part = group[at:at + 64]
            ids = np.array([e.ids for _, e in part], dtype=np.int64)
            feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
            if head_mask is not None:
                feeds["head_mask"] = np.ones((len(ids), *head_mask.shape[1:]), np.float32)
            names = ["sentence_embedding", "attentions"] if attention else ["sentence_embedding"]
            out = sess.run(names, feeds)
            for j, (text, e) in enumerate(part):
                emb[text] = (e.tokens, out[0][j])
                if attention:
                    att[text] = out[1][j][LAYERS][:, HEADS]
    return emb, att


def test_nothing_lost_5000_requests_32_clients(server, default_package):
    texts = make_texts(5000, seed=8)
    rnd = random.Random(88)
    with_att = {t for t in texts if rnd.random() < 0.04}
    emb_ref, _ = reference(default_package, [t for t in texts if t not in with_att], attention=False)
    att_emb_ref, att_ref = reference(default_package, sorted(with_att), attention=True)
    emb_ref.update(att_emb_ref)
    before = server.metrics()

    async def run() -> dict:
        queue = list(reversed(texts))
        got: dict[str, httpx.Response | Exception] = {}

        async def client(c: httpx.AsyncClient):
            while queue:
                text = queue.pop()
                body = {"inputs": text}
                if text in with_att:
                    body["attention"] = {"layers": LAYERS, "heads": HEADS}
                try:
                    got[text] = await c.post("/v1/embed", json=body)
                except httpx.HTTPError as e:
                    got[text] = e

        async with httpx.AsyncClient(base_url=server.url, timeout=300,
                                     limits=httpx.Limits(max_connections=32)) as c:
            await asyncio.wait_for(asyncio.gather(*(client(c) for _ in range(32))), 600)
        return got

    t0 = time.perf_counter()
    got = asyncio.run(run())
    wall = time.perf_counter() - t0
    lost = [t for t in texts if not isinstance(got.get(t), httpx.Response) or got[t].status_code != 200]
    assert not lost, f"{len(lost)} lost, e.g. {got.get(lost[0])!r}"
    mismatched = []
    for text in texts:
        item = got[text].json()["data"][0]
        tokens, vec = emb_ref[text]
        ok = item["tokens"] == tokens and np.allclose(item["embedding"], vec, atol=2e-4)
        if text in with_att:
            a = item["attention"]
            ok = ok and a["shape"] == [len(LAYERS), len(HEADS), len(tokens), len(tokens)] and np.allclose(
                np.array(a["data"], dtype=np.float32), att_ref[text], atol=2e-4)
        if not ok:
            mismatched.append(text)
    assert not mismatched, f"{len(mismatched)} mismatched, e.g. {mismatched[0][:80]!r}"
    after = server.metrics()
    assert total(after, "headwise_requests_total", route="/v1/embed", code="200") - total(
        before, "headwise_requests_total", route="/v1/embed", code="200") == 5000
    batches = total(after, "headwise_batch_size_count") - total(before, "headwise_batch_size_count")
    print(f"\nnothing lost: 5000 requests ({len(with_att)} with attention), 32 clients, {wall:.1f} s "
          f"({5000 / wall:.0f} req/s), {batches:.0f} batches, 0 lost, 0 mismatched")


def _raw_post_and_close(port: int, body: dict) -> None:
    data = json.dumps(body).encode()
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"POST /v1/embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)


def test_50_disconnected_clients_are_dropped_before_inference(server):
    before = server.metrics()
    log_before = len(server.log_tail(10_000_000))
    busy_body = {"inputs": [("word " * 300) + str(i) for i in range(64)]}  # full 64 x 256 batches
    busy = [threading.Thread(target=server.post, args=("/v1/embed", busy_body)) for _ in range(2)]
    for t in busy:
        t.start()
    time.sleep(0.3)
    for i in range(50):
        _raw_post_and_close(server.port, {"inputs": f"nobody waits for answer {i}"})
    for t in busy:
        t.join(300)
    assert server.post("/v1/embed", {"inputs": "after"}).status_code == 200
    after = server.metrics()
    dropped = total(after, "headwise_request_failures_total", reason="disconnected") - total(
        before, "headwise_request_failures_total", reason="disconnected")
    ran = total(after, "headwise_batch_size_sum") - total(before, "headwise_batch_size_sum") - 128 - 1
    print(f"\ndisconnects: {dropped:.0f} of 50 dropped before inference, {ran:.0f} ran")
    assert dropped >= 45 and dropped + ran == 50, (dropped, ran)
    assert "Traceback" not in server.log_tail(10_000_000)[log_before:]


def test_threads_bounded_and_stable_over_1000_requests(server):
    m = re.search(r"provider cpu, (\d+) threads", server.log_tail(10_000_000))
    assert m and 1 <= int(m.group(1)) <= usable_cores(), m
    pid = server.proc.pid
    with httpx.Client(base_url=server.url, timeout=60) as c:
        for i in range(50):
            assert c.post("/v1/embed", json={"inputs": f"warm {i}"}).status_code == 200
        start = proc_status(pid, "Threads")
        counts = []
        for i in range(1000):
            body = {"inputs": f"thread check {i}" if i % 7 else [f"thread check {i}", "and another"]}
            if i % 10 == 0:
                body["attention"] = {"layers": [0], "heads": [0]}
            path = "/v1/embed" if i % 5 else "/v1/tokenize"
            assert c.post(path, json=body if path == "/v1/embed" else {"inputs": body["inputs"]}).status_code == 200
            if i % 100 == 99:
                counts.append(proc_status(pid, "Threads"))
    print(f"\nthreads: {start} after warm-up, {counts} every 100 requests; ORT intra-op {m.group(1)}")
    assert max(counts) <= start + 2 and counts[-1] <= start + 1, (start, counts)


@pytest.fixture(scope="module")
def small_queue(start_server):
    s = start_server(env={"HEADWISE_PRECISION": "fp32", "HEADWISE_MAX_QUEUE": "16",
                          "HEADWISE_MAX_CLIENT_BATCH": "16"})
    yield s
    s.stop()


def test_overload_sheds_with_429_and_keeps_serving(small_queue):
    text = "overload check " + "word " * 60
    base = hammer(small_queue.port, 12, 6, text)  # under the queue's 16
    probe = start_probe(small_queue.port, 8, text, n=16)  # the server's MAX_QUEUE: turned away whenever anything is queued
    try:
        over = hammer(small_queue.port, 64, 8, text)  # 4x what it admits
    finally:
        out, _ = probe.communicate(timeout=60)
    probe429 = json.loads(out)
    base_rate = base["codes"][200] / base["wall"]
    over_rate = over["codes"][200] / over["wall"]
    t429 = sorted(over["t429"])
    probe429.sort()
    timed = probe429 if len(probe429) >= 5 else t429
    p99 = timed[int(len(timed) * 0.99)]
    print(f"\noverload: baseline 12 clients {base_rate:.0f} req/s; 64 clients: {dict(over['codes'])}, "
          f"admitted {over_rate:.0f} req/s, 429 p50 {t429[len(t429) // 2] * 1000:.1f} ms p99 {p99 * 1000:.1f} ms "
          f"max {t429[-1] * 1000:.1f} ms; lone probe's 429s: {len(probe429)}, p99 used {p99 * 1000:.1f} ms; load {os.getloadavg()[0]:.1f}; "
          f"errors {len(over['errors'])}")
    assert not base["errors"] and not over["errors"], over["errors"][:3]
    assert set(base["codes"]) == {200}
    assert set(over["codes"]) == {200, 429}
    assert over["retry_after"] == {"1"} and over["types_429"] == {"overloaded"}
    m = small_queue.metrics()
    assert total(m, "headwise_request_failures_total", reason="overloaded") == over["codes"][429] + len(probe429)
    server_errors = {c: total(m, "headwise_requests_total", route="/v1/embed", code=str(c)) for c in range(500, 600)}
    assert sum(server_errors.values()) == 0, [line for line in m.splitlines() if 'code="5' in line]
    # The 50 ms target is a timing: bench/limits.py measures it (rule 3: speed is measured in
    # benchmarks). Here, on 2 cores shared with 64 clients, only "it answers at once rather than
    # queueing": far under the seconds an admitted request can wait.
    p50 = timed[len(timed) // 2]
    assert p50 < 1.0 and p99 < 3.0, f"429 p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms"
    # "Does not collapse": the 64 Python clients share the server's 2 cores and, at nice 0, win
    # them from inference (nice 5), so admitted throughput is well under the 12-client baseline
    # here (bench/results/reliability-cpu.md); a tenth is the floor (a collapse would be near 0).
    assert over_rate >= 0.1 * base_rate, (over_rate, base_rate)
