"""What each CPU precision buys: inputs per second of every CPU variant of a package, measured
side by side on this machine and written into manifest["speed"] with the CPU that measured it.

A quick figure (0.4 s a cell, about 5 s in all), for `/v1/models` and `headwise verify`; the full
comparison under HTTP load is `headwise bench` (bench/results)."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy as np

from headwise.export import cpu, runner

# (batch, tokens): short queries and passage-length inputs.
WORKLOADS = ((16, 20), (16, 128))
CPU_PRECISIONS = ("fp32", "int8")


def _feeds(sess, batch: int, tokens: int, vocab: int) -> dict[str, np.ndarray]:
    ids = np.random.default_rng(0).integers(1000, max(1001, vocab - 1), (batch, tokens), dtype=np.int64)
    full = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
    wanted = {i.name for i in sess.get_inputs()}
    return {k: v for k, v in full.items() if k in wanted}


def alternated_rates(sessions: dict, batch: int, tokens: int, reps: int, seconds: float,
                     vocab: int = 30522) -> dict[str, float]:
    """Median inputs/s of each session at batch × tokens, the sessions alternated within each
    of `reps` repetitions (each a median over `seconds` of runs), so drift hits all alike."""
    feeds = {k: _feeds(s, batch, tokens, vocab) for k, s in sessions.items()}
    samples: dict[str, list[float]] = {k: [] for k in sessions}
    for k, s in sessions.items():  # warm-up
        s.run(["sentence_embedding"], feeds[k])
    for _ in range(reps):
        for k, s in sessions.items():
            runs, t0 = [], time.perf_counter()
            while time.perf_counter() - t0 < seconds or len(runs) < 3:
                t = time.perf_counter()
                s.run(["sentence_embedding"], feeds[k])
                runs.append(time.perf_counter() - t)
            samples[k].append(batch / statistics.median(runs))
    return {k: statistics.median(x) for k, x in samples.items()}


def measure(pkg: Path, manifest: dict, seconds: float = 0.4, reps: int = 3) -> dict:
    """Median inputs/s per CPU variant and workload, variants alternated within each
    repetition; `vs_fp32` is the ratio of medians to the fp32 variant's."""
    names = [v for v, spec in manifest["variants"].items() if spec["precision"] in CPU_PRECISIONS
             and v not in ("attention", "analysis")]
    sessions = {v: runner.session(pkg / manifest["variants"][v]["file"]) for v in names}
    out: dict = {"cpu": cpu.describe(), "seconds_per_cell": seconds, "repetitions": reps, "workloads": []}
    for batch, tokens in WORKLOADS:
        tokens = min(tokens, manifest.get("max_len", 512))
        rates = alternated_rates(sessions, batch, tokens, reps, seconds, manifest.get("vocab_size", 30522))
        base = rates.get("fast")
        out["workloads"].append({
            "batch": batch, "tokens": tokens,
            "inputs_per_s": {v: round(r, 1) for v, r in rates.items()},
            "vs_fp32": {v: round(r / base, 2) for v, r in rates.items()} if base else {},
        })
    return out


def speed_lines(speed: dict) -> list[str]:
    lines = [f"speed on {cpu.label(speed['cpu'])}, inputs/s (x fp32), median of {speed['repetitions']}:"]
    for w in speed["workloads"]:
        cells = ", ".join(f"{v} {r:.0f}" + (f" ({w['vs_fp32'][v]:.2f}x)" if v in w["vs_fp32"] and v != "fast" else "")
                          for v, r in w["inputs_per_s"].items())
        lines.append(f"  batch {w['batch']} x {w['tokens']} tokens: {cells}")
    return lines
