"""The explain split of POST /v1/similarity at its size cap: how long it would hold the event
loop if it ran there, against how long the loop is held while it runs on AnalyticsLane's
thread (where it runs: `explain.similarity` → `lane.run(_split, ...)`).

    .venv/bin/python -m bench.experiments.explain_split [--max-len 256] [--d-model 384] [--reps 5]

The largest request the caps admit (HEADWISE_MAX_CLIENT_BATCH inputs, HEADWISE_ANALYTICS_MAX_
REQUEST_TOKENS, HEADWISE_MAX_RESPONSE_BYTES at their defaults): the source and every target at
max_len tokens, as many targets as all three allow.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import numpy as np

from headwise.service.api.sizes import JSON
from headwise.service.engine.analytics.explain import _split, similarity_size
from headwise.service.engine.analytics.lane import AnalyticsLane
from headwise.service.engine.budget import ResponseBudget, ShareOf, TokenBudget
from headwise.service.engine.params import Embedded
from headwise.service.settings import Settings


def largest(s: Settings, t: int, top_k: int) -> int:
    """The most targets of t tokens one explained similarity may have."""
    n = s.max_client_batch - 1
    while n > 1 and ((n + 1) * t > s.analytics_max_request_tokens
                     or JSON.bytes(similarity_size("all-minilm-l6-v2", t, [t] * n, True, top_k)) > s.max_response_bytes):
        n -= 1
    return n


async def loop_held(fn) -> float:
    """The longest the event loop went without running a 0.1 ms ticker while `fn()` ran."""
    worst, stop = 0.0, False

    async def ticker():
        nonlocal worst
        last = time.perf_counter()
        while not stop:
            await asyncio.sleep(0.0001)
            now = time.perf_counter()
            worst, last = max(worst, now - last), now

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)
    await fn()
    stop = True
    await task
    return worst


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--max-len", type=int, default=256)
    p.add_argument("--d-model", type=int, default=384)
    p.add_argument("--top-k", type=int, default=10)
    p.add_argument("--reps", type=int, default=5)
    a = p.parse_args()
    s = Settings(models_dir=".")
    n = largest(s, a.max_len, a.top_k)
    rng = np.random.default_rng(0)
    data = [Embedded(None, rng.standard_normal(a.d_model, dtype=np.float32),
                     rng.standard_normal((a.max_len, a.d_model), dtype=np.float32), None) for _ in range(n + 1)]
    lane = AnalyticsLane(TokenBudget(1, 1), ShareOf(ResponseBudget(1), 1, "x"))

    async def inline():
        _split(data, True, a.top_k)

    async def off_loop():
        await lane.run(_split, data, True, a.top_k)

    before = sorted([await loop_held(inline) for _ in range(a.reps)])
    after = sorted([await loop_held(off_loop) for _ in range(a.reps)])
    lane.close()
    print(f"explain split of 1 source + {n} targets × {a.max_len} tokens, d_model {a.d_model}, top_k {a.top_k}")
    print(f"event loop held, split on the loop:          median {before[len(before) // 2] * 1e3:8.2f} ms")
    print(f"event loop held, split on AnalyticsLane.pool: median {after[len(after) // 2] * 1e3:8.2f} ms")


if __name__ == "__main__":
    asyncio.run(main())
