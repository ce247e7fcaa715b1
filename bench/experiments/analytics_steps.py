"""What each analytics step costs at its size cap, in-process, and how long it keeps another
thread (the event loop's) from running: the explain split of 120 targets of 256 tokens, the
response building of that answer (service.api.serialize), occlusion's cosines over 256 rows,
and a rollout of 256 tokens (6 layers, 12 heads).

    python -m bench.experiments.analytics_steps [--reps 5]

Each step runs on a worker thread while the main thread ticks every millisecond; the table
gives the step's median time and the worst lateness of a tick while it ran (a stall of the
event loop, had the step run beside it), medians of `--reps` runs. Machine facts from
bench/facts.py. Data are random: the costs depend on the sizes only.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

import numpy as np

from bench.facts import load_average, machine_facts
from headwise.service.api.serialize import dumps_chunks
from headwise.service.engine.aggregate import rollout
from headwise.service.engine.analytics.explain import _effects, _split
from headwise.service.engine.params import Embedded

D_MODEL, T, TARGETS, ROWS, LAYERS, HEADS = 384, 256, 120, 256, 6, 12


def embedded(rng, tokens: bool) -> Embedded:
    s = rng.standard_normal(D_MODEL).astype(np.float32)
    return Embedded(None, s / np.linalg.norm(s), rng.standard_normal((T, D_MODEL)).astype(np.float32) if tokens
                    else None, None)


def steps(rng) -> dict:
    explain = [embedded(rng, True) for _ in range(TARGETS + 1)]
    rows = [embedded(rng, False) for _ in range(ROWS)]
    att = rng.random((LAYERS, HEADS, T, T), dtype=np.float32)
    att /= att.sum(-1, keepdims=True)
    _, split = _split(explain, True, 10)
    tokens = ["tok"] * T
    offsets = [[0, 3]] * T
    answer = {"model": "all-minilm-l6-v2", "data": [
        {"index": i, "score": 0.5, "tokens": tokens, "offsets": offsets, "contributions": ex.contributions,
         "top_pairs": [{"source": s, "target": t, "value": v} for s, t, v in ex.pairs]}
        for i, ex in enumerate(split)], "source": {"tokens": tokens, "offsets": offsets}}
    return {
        f"explain split: 1 source + {TARGETS} targets of {T} tokens": lambda: _split(explain, True, 10),
        f"explain response building (JSON, {TARGETS} × {T}×{T} contributions)": lambda: dumps_chunks(answer),
        f"occlusion cosines: {ROWS} rows": lambda: _effects(rows),
        f"rollout: {LAYERS} layers × {HEADS} heads, {T} tokens": lambda: rollout(att),
    }


def measure(fn) -> tuple[float, float]:
    """(seconds fn took on a worker thread, the worst lateness of a 1 ms tick meanwhile)."""
    done = threading.Event()
    took = []

    def work():
        t0 = time.perf_counter()
        fn()
        took.append(time.perf_counter() - t0)
        done.set()

    worst = 0.0
    th = threading.Thread(target=work)
    th.start()
    while not done.is_set():
        t0 = time.perf_counter()
        time.sleep(0.001)
        worst = max(worst, time.perf_counter() - t0 - 0.001)
    th.join()
    return took[0], worst


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.experiments.analytics_steps")
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args(argv)
    load = load_average()
    rows = []
    for name, fn in steps(np.random.default_rng(0)).items():
        fn()  # warm
        runs = [measure(fn) for _ in range(args.reps)]
        rows.append((name, statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)))
    print("# analytics steps at their size caps, in-process\n")
    for k, v in machine_facts("cpu").items():
        print(f"- {k}: {v}")
    print(f"- load average before: {load}; after: {load_average()}")
    print(f"- command: python -m bench.experiments.analytics_steps --reps {args.reps} (medians)\n")
    print("| step | ms | worst stall of a 1 ms tick on another thread, ms |\n|---|---|---|")
    for name, took, stall in rows:
        print(f"| {name} | {1000 * took:.1f} | {1000 * stall:.1f} |")


if __name__ == "__main__":
    main()
