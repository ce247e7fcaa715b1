"""Issue 39, item 5's question, before any change: what would serving attention from the
analysis graph cost against today's attention graph?

    python -m bench.experiments.analysis_attention --package /tmp/pm-models/all-minilm-l6-v2 \
        --threads 2 --reps 15 --out bench/results/analysis-attention.md

For each shape (inputs × tokens), in one sitting, alternating call by call, the same feeds through:

- **attention**: `attention.onnx`, fetching `sentence_embedding` and `attentions`, as an
  attention request does today;
- **analysis**: `analysis.onnx`, fetching the same two outputs, with `head_mask` all ones (no head
  removed). `hidden_states` is not fetched.

Both sessions use the service's own CPU session options (`OrtBackend`: `--threads` intra-op
threads). The report gives the medians and the ratio (issue 39's bar: at most 1.1×).
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from bench.alternate import turn
from bench.facts import machine_facts
from bench.report import emit, facts_table

SHAPES = ((1, 20), (1, 128), (16, 128))
OUTPUTS = ["sentence_embedding", "attentions"]
BAR = 1.1


def measure(package: Path, threads: int, reps: int, log) -> list[dict]:
    from headwise.service.backends.onnxruntime import OrtBackend
    from headwise.service.package import load_package
    from headwise.service.settings import Settings

    pkg = load_package(package)
    if "attention" not in pkg.variants or "analysis" not in pkg.variants:
        raise SystemExit(f"{package}: needs both the attention and the analysis variants")
    backend = OrtBackend(pkg, Settings(models_dir=package.parent, provider="cpu", precision="fp32", threads=threads,
                                       analytics_threads=0))
    rng = np.random.default_rng(0)
    rows = []
    for n, t in SHAPES:
        ids = rng.integers(1000, 2000, (n, t), dtype=np.int64)
        base = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
        feeds = {"attention": base,
                 "analysis": {**base, "head_mask": np.ones((n, pkg.n_layers, pkg.n_heads), np.float32)}}
        calls = {role: (lambda r=role, f=feeds[role]: backend.run(r, f, OUTPUTS)) for role in feeds}
        same = [calls[r]()["attentions"] for r in calls]
        diff = float(np.max(np.abs(same[0] - same[1])))
        times: dict[str, list[float]] = {r: [] for r in calls}
        for rep in range(reps):
            for role in turn(list(calls), rep):
                t0 = time.perf_counter()
                calls[role]()
                times[role].append((time.perf_counter() - t0) * 1e3)
        row = {"shape": (n, t), "diff": diff, **{r: statistics.median(v) for r, v in times.items()}}
        row["ratio"] = row["analysis"] / row["attention"]
        log(f"{n} × {t}: attention {row['attention']:.2f} ms, analysis {row['analysis']:.2f} ms, "
            f"{row['ratio']:.2f}×, largest difference {diff:.1e}")
        rows.append(row)
    return rows


def report(rows: list[dict], command: str, package: Path, threads: int, reps: int) -> str:
    facts = machine_facts("cpu") | {"package": str(package), "threads": threads}
    lines = ["# Attention from the analysis graph against the attention graph (issue 39, item 5)", "",
             f"Command: `{command}`", "", facts_table(facts), "",
             f"Medians of {reps} calls per graph, alternating; both fetch `sentence_embedding` and `attentions` "
             f"(issue 39's bar: analysis / attention ≤ {BAR}).", "",
             "| inputs × tokens | attention.onnx ms | analysis.onnx ms | ratio | largest difference in the weights |",
             "|---|---:|---:|---:|---:|"]
    for r in rows:
        n, t = r["shape"]
        lines.append(f"| {n} × {t} | {r['attention']:.2f} | {r['analysis']:.2f} | {r['ratio']:.2f}× | {r['diff']:.1e} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.experiments.analysis_attention",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--package", type=Path, required=True, help="an exported package with both variants")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    rows = measure(a.package, a.threads, a.reps, lambda m: print(m, file=sys.stderr, flush=True))
    command = "python -m bench.experiments.analysis_attention " + shlex.join(argv if argv is not None else sys.argv[1:])
    text = report(rows, command, a.package, a.threads, a.reps)
    emit(text, a.out)


if __name__ == "__main__":
    main()
