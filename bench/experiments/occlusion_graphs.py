"""What moving occlusion's rows from the fused fast graph to the analysis graph costs, in
process: one occlusion job's rows (the input whole, then one per token with that position's
attention_mask 0) run on each graph with onnxruntime, in batches of at most
HEADWISE_ANALYTICS_BATCH_TOKENS padded tokens as the analytics batcher cuts them, alternating,
median of the repetitions. (The fast graph reads the mask as lengths, so its effects are not
the formula's: docs/analytics.md; this measures only the time.)

    python -m bench.experiments.occlusion_graphs /tmp/models-hs/all-minilm-l6-v2 --tokens 20 128 --reps 7
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

from bench.facts import load_average
from headwise.export import cpu as cpu_info


def rows(t: int, n_layers: int, n_heads: int) -> dict[str, np.ndarray]:
    m = np.ones((t + 1, t), np.int64)
    m[np.arange(1, t + 1), np.arange(t)] = 0
    ids = np.random.default_rng(0).integers(1000, 2000, (t + 1, t)).astype(np.int64)
    return {"input_ids": ids, "attention_mask": m, "token_type_ids": np.zeros_like(ids),
            "head_mask": np.ones((t + 1, n_layers, n_heads), np.float32)}


def run_job(sess: ort.InferenceSession, feeds: dict, batch_tokens: int) -> float:
    names = {i.name for i in sess.get_inputs()}
    per = max(1, batch_tokens // feeds["input_ids"].shape[1])
    t0 = time.perf_counter()
    for s in range(0, len(feeds["input_ids"]), per):
        sess.run(["sentence_embedding"], {k: v[s:s + per] for k, v in feeds.items() if k in names})
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("package", type=Path)
    ap.add_argument("--tokens", type=int, nargs="+", default=[20, 128])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--batch-tokens", type=int, default=1024)
    a = ap.parse_args()
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    sessions = {g: ort.InferenceSession(str(a.package / f"{g}.onnx"), so, providers=["CPUExecutionProvider"])
                for g in ("fast", "analysis")}
    hm = next(i for i in sessions["analysis"].get_inputs() if i.name == "head_mask").shape
    print(f"bench.experiments.occlusion_graphs on {cpu_info.label()}, load average {load_average()}, {a.reps} reps\n")
    print("| tokens | rows | fast graph: ms (median) | analysis graph: ms (median) | analysis / fast |")
    print("|---:|---:|---:|---:|---:|")
    for t in a.tokens:
        feeds = rows(t, hm[1], hm[2])
        times: dict[str, list[float]] = {g: [] for g in sessions}
        for s in sessions.values():
            run_job(s, feeds, a.batch_tokens)  # warm
        for _ in range(a.reps):
            for g, s in sessions.items():
                times[g].append(run_job(s, feeds, a.batch_tokens))
        f, an = statistics.median(times["fast"]), statistics.median(times["analysis"])
        print(f"| {t} | {t + 1} | {f * 1e3:.1f} | {an * 1e3:.1f} | {an / f:.2f} |")


if __name__ == "__main__":
    main()
