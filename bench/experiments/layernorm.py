"""Why the CPU graphs carry Add + LayerNormalization: onnxruntime's SkipLayerNormalization
against the two ops it fuses, alone on one tensor, then the package's own int8 graph with both.

    python -m bench.experiments.layernorm                          # one node, [16, 20, 384]
    python -m bench.experiments.layernorm --models /tmp/bench-models   # also the package's fast.int8.onnx
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from headwise.export.optimize import CPU_DISABLED_OPTIMIZERS


def _model(nodes, inputs, inits) -> bytes:
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, [out], inits),
                          opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    return m.SerializeToString()


def time_it(sess, feeds, outputs=None, seconds: float = 1.0) -> float:
    for _ in range(3):
        sess.run(outputs, feeds)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        sess.run(outputs, feeds)
        n += 1
    return (time.perf_counter() - t0) / n


def one_node(shape=(16, 20, 384), threads: int = 1) -> None:
    d = shape[-1]
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.random(d, dtype=np.float32), n) for n in ("g", "b")]
    xs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(shape)) for n in ("x", "skip")]
    feeds = {n: rng.random(shape, dtype=np.float32) for n in ("x", "skip")}
    graphs = {
        "SkipLayerNormalization": _model([helper.make_node("SkipLayerNormalization", ["x", "skip", "g", "b"], ["y"],
                                                           domain="com.microsoft", epsilon=1e-12)], xs, inits),
        "Add + LayerNormalization": _model([helper.make_node("Add", ["x", "skip"], ["s"]),
                                            helper.make_node("LayerNormalization", ["s", "g", "b"], ["y"],
                                                             axis=-1, epsilon=1e-12)], xs, inits),
    }
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    for name, g in graphs.items():
        s = ort.InferenceSession(g, so, providers=["CPUExecutionProvider"], disabled_optimizers=CPU_DISABLED_OPTIMIZERS)
        dt = time_it(s, feeds)
        print(f"{name:26s} {list(shape)}, {threads} thread(s): {dt * 1e6:8.1f} µs "
              f"({dt / np.prod(shape) * 1e9:.2f} ns per element)")


def refuse(path: Path) -> int:
    """The inverse of export.optimize.unfuse_skip_layernorm, by the names it gives its nodes."""
    import onnx

    model = onnx.load(str(path))
    by_name = {n.name: n for n in model.graph.node}
    keep, fused = [], 0
    for n in model.graph.node:
        if n.op_type == "LayerNormalization" and n.name.endswith("/layernorm"):
            base = n.name[: -len("/layernorm")]
            add, bias = by_name[f"{base}/add"], by_name.get(f"{base}/add_bias")
            ins = [*add.input, *n.input[1:3]]
            if bias is not None:
                ins = [*ins, *([""] if len(n.input) < 3 else []), bias.input[1]]
            eps = next(a.f for a in n.attribute if a.name == "epsilon")
            keep.append(helper.make_node("SkipLayerNormalization", ins, [n.output[0]], name=base,
                                         domain="com.microsoft", epsilon=eps))
            fused += 1
        elif not (n.name.endswith("/add") or n.name.endswith("/add_bias")) or n.op_type != "Add":
            keep.append(n)
    del model.graph.node[:]
    model.graph.node.extend(keep)
    onnx.save(model, str(path))
    return fused


def package_graph(models: str, batch: int = 16, tokens=(20, 128)) -> None:
    from bench.workload import Workload, find_package

    w = Workload(find_package(models))
    with tempfile.TemporaryDirectory() as tmp:
        fused = Path(tmp) / "fused.onnx"
        shutil.copy(w.variant_file("int8"), fused)
        n = refuse(fused)
        graphs = {f"SkipLayerNormalization ×{n}": fused, "Add + LayerNormalization (as shipped)": w.variant_file("int8")}
        for t in tokens:
            for name, f in graphs.items():
                so = ort.SessionOptions()
                so.intra_op_num_threads = 0
                s = ort.InferenceSession(str(f), so, providers=["CPUExecutionProvider"],
                                         disabled_optimizers=CPU_DISABLED_OPTIMIZERS)
                feeds = w.feeds(t, batch, [i.name for i in s.get_inputs()])
                dt = time_it(s, feeds, ["sentence_embedding"], seconds=3)
                print(f"fast.int8, batch {batch} × {t} tokens, {name}: {dt * 1e3:.2f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", help="also time the package's int8 graph, fused and not")
    a = ap.parse_args()
    from headwise.export import cpu as cpu_info

    print(f"bench.experiments.layernorm on {cpu_info.label()}")
    one_node(threads=1)
    one_node(threads=2)
    if a.models:
        package_graph(a.models)


if __name__ == "__main__":
    main()
