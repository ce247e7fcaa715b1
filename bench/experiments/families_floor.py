"""Issue 38's speed target at 16 × 128 against the matrix products' floor, per family:

    python -m bench.experiments.families_floor --threads 2 --reps 9 --out bench/results/families-floor.md

For each family of bench.families (the same random checkpoints, exported the same way), in one
sitting, alternating call by call:

- **graph**: the served fast graph's run alone (onnxruntime, the service's session options);
- **sentence-transformers**: `SentenceTransformer.encode` of the same 16 texts of 128 tokens;
- **floor**: a graph of nothing but the fast graph's weight products (every MatMul with a 2-D
  initializer, as onnxruntime optimised the graph), each at 16 × 128 = 2,048 rows, on the same
  session options. No fusion can make the graph cheaper than these products, so
  sentence-transformers' time / the floor is the best ratio any fp32 graph can reach here.

Then one profiled run of the fast graph gives each operator type's share of kernel time.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

from bench.alternate import turn
from bench.facts import machine_facts
from bench.families import FAMILIES, Served, build, texts_of
from bench.report import emit, facts_table

N, T = 16, 128
TARGET = 1.5


def _options(threads: int, profile_prefix: str | None = None):
    import onnxruntime as ort

    so = ort.SessionOptions()  # as service.backends.onnxruntime's CPU sessions
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    so.enable_mem_pattern = False
    so.add_session_config_entry("session.force_spinning_stop", "1")
    if profile_prefix:
        so.enable_profiling, so.profile_file_prefix = True, profile_prefix
    return so


def weight_shapes(optimized: Path) -> list[tuple[int, int]]:
    """(K, N) of every product of the optimised graph whose second input is a 2-D weight."""
    import onnx

    m = onnx.load(str(optimized))
    inits = {i.name: tuple(i.dims) for i in m.graph.initializer}
    return [inits[n.input[1]] for n in m.graph.node
            if n.op_type in ("MatMul", "Gemm", "FusedMatMul", "Attention") and len(inits.get(n.input[1], ())) == 2]


def floor_session(shapes: list[tuple[int, int]], rows: int, threads: int, work: Path):
    """A session running only those products, at `rows` rows each → (session, feeds)."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    xs = {k: helper.make_tensor_value_info(f"x{k}", TensorProto.FLOAT, [rows, k]) for k, _ in shapes}
    nodes, inits, outs = [], [], []
    for i, (k, n) in enumerate(shapes):
        inits.append(numpy_helper.from_array(rng.random((k, n), np.float32), f"w{i}"))
        nodes.append(helper.make_node("MatMul", [f"x{k}", f"w{i}"], [f"y{i}"]))
        outs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [rows, n]))
    model = helper.make_model(helper.make_graph(nodes, "floor", list(xs.values()), outs, inits),
                              opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    path = work / "floor.onnx"
    onnx.save(model, str(path))
    session = ort.InferenceSession(str(path), _options(threads), providers=["CPUExecutionProvider"])
    return session, {f"x{k}": rng.random((rows, k), np.float32) for k in xs}


def op_shares(graph: Path, feeds: dict, threads: int, work: Path, runs: int = 5) -> dict[str, float]:
    """Each operator type's share of the kernel time over `runs` profiled runs."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(graph), _options(threads, str(work / "profile")),
                                   providers=["CPUExecutionProvider"])
    for _ in range(runs):
        session.run(None, feeds)
    path = session.end_profiling()
    by: Counter = Counter()
    for e in json.loads(Path(path).read_text()):
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            by[e["args"]["op_name"]] += e["dur"]
    os.remove(path)
    total = sum(by.values()) or 1
    return {op: us / total for op, us in by.most_common()}


def measure(family: str, work: Path, threads: int, reps: int, log) -> dict:
    import onnxruntime as ort
    import torch

    from headwise.export.package import build_package

    torch.set_num_threads(threads)
    ckpt, st = build(family, work / family)
    pkg = build_package(ckpt, work / "models", family, int8=False, fp16=False, quality=False, progress=lambda m: None)
    served = Served(pkg, threads)
    texts = texts_of(served.pkg.path / "tokenizer.json", N, T)
    encs = served.tokenizer.encode(texts)
    ids = np.array([e.ids for e in encs], np.int64)
    fast = served.pkg.variants[served.backend.variants["embed"]].file
    so = _options(threads)
    so.optimized_model_filepath = str(work / f"{family}-optimized.onnx")
    graph = ort.InferenceSession(str(fast), so, providers=["CPUExecutionProvider"])
    names = {i.name for i in graph.get_inputs()}
    feeds = {k: v for k, v in {"input_ids": ids, "attention_mask": np.ones_like(ids),
                               "token_type_ids": np.zeros_like(ids)}.items() if k in names}
    shapes = weight_shapes(work / f"{family}-optimized.onnx")
    floor, floor_feeds = floor_session(shapes, N * T, threads, work)
    sides = {"graph": lambda: graph.run(None, feeds), "st": lambda: st.encode(texts, batch_size=N),
             "floor": lambda: floor.run(None, floor_feeds)}
    times: dict[str, list[float]] = {k: [] for k in sides}
    for call in sides.values():
        call()  # once unmeasured
    for rep in range(reps):
        for name in turn(list(sides), rep):
            t0 = time.perf_counter()
            sides[name]()
            times[name].append((time.perf_counter() - t0) * 1e3)
    row = {k: statistics.median(v) for k, v in times.items()}
    flops = 2 * N * T * sum(k * n for k, n in shapes)
    row |= {"family": family, "products": len(shapes), "gflops": flops / row["floor"] / 1e6,
            "ops": op_shares(Path(fast), feeds, threads, work)}
    log(f"{family}: graph {row['graph']:.1f} ms, sentence-transformers {row['st']:.1f} ms, "
        f"floor {row['floor']:.1f} ms ({len(shapes)} products, {row['gflops']:.0f} GFLOP/s)")
    return row


def report(rows: list[dict], command: str, threads: int, reps: int) -> str:
    facts = machine_facts("cpu") | {"threads (torch and onnxruntime)": threads}
    lines = ["# Encoder families at 16 × 128: the fast graph against its matrix products' floor", "",
             f"Command: `{command}`", "", facts_table(facts), "",
             f"Medians of {reps} calls per side, the order alternating. fp32. The floor runs only the fast "
             "graph's weight products (2-D initializers, after onnxruntime's optimisation) at 2,048 rows; "
             "the best ratio is sentence-transformers' time over the floor: what a graph with nothing "
             "but those products would reach.", "",
             "| family | graph ms | sentence-transformers ms | ratio now | floor ms | products | GFLOP/s in the floor "
             "| graph / floor | best ratio | operators' share of the graph's kernel time |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        ops = ", ".join(f"{op} {s:.0%}" for op, s in list(r["ops"].items())[:5])
        best = r["st"] / r["floor"]
        lines.append(f"| {r['family']} | {r['graph']:.1f} | {r['st']:.1f} | {r['st'] / r['graph']:.2f}× | "
                     f"{r['floor']:.1f} | {r['products']} | {r['gflops']:.0f} | {r['graph'] / r['floor']:.2f} | "
                     f"{best:.2f}×{'' if best >= TARGET else ' (below 1.5)'} | {ops} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.experiments.families_floor",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="headwise-floor-") as tmp:
        for family in a.families.split(","):
            rows.append(measure(family, Path(tmp), a.threads, a.reps, lambda m: print(m, file=sys.stderr, flush=True)))
    command = "python -m bench.experiments.families_floor " + shlex.join(argv if argv is not None else sys.argv[1:])
    text = report(rows, command, a.threads, a.reps)
    emit(text, a.out)


if __name__ == "__main__":
    main()
