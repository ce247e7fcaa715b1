"""onnxruntime's transformer optimiser (fusion) and fp16 conversion (int8: headwise/export/quantize.py)."""

from __future__ import annotations

import logging
from pathlib import Path

FUSED_OPS = ("Attention", "MultiHeadAttention", "SkipLayerNormalization", "EmbedLayerNormalization",
             "BiasGelu", "Gelu", "FastGelu", "LayerNormalization")


def _quiet() -> None:
    for name in ("onnxruntime.transformers", "fusion", "onnx_model", "onnx_model_bert", "root"):
        logging.getLogger(name).setLevel(logging.ERROR)


def scale_as_div(src: Path, dst: Path) -> int:
    """Rewrite softmax(QKᵀ · s + mask) as softmax(QKᵀ / (1/s) + mask).

    model/ multiplies by 1/√d_k as Hugging Face does (bit-identical weights), but the fuser's
    mask matcher takes the first Mul feeding the Add for the mask's Mul, so a Mul scale hides
    every Attention from it. Returns the number of nodes rewritten.
    """
    import numpy as np
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(src))
    g = model.graph
    producer = {o: n for n in g.node for o in n.output}
    consumers: dict[str, list] = {}
    for n in g.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    rewritten = 0
    for n in g.node:
        if n.op_type != "Mul" or len(n.input) != 2:
            continue
        src_node, const = producer.get(n.input[0]), producer.get(n.input[1])
        users = consumers.get(n.output[0], [])
        if not (src_node and src_node.op_type == "MatMul" and const and const.op_type == "Constant"
                and len(users) == 1 and users[0].op_type == "Add"
                and any(u.op_type == "Softmax" for u in consumers.get(users[0].output[0], []))):
            continue
        value = numpy_helper.to_array(const.attribute[0].t)
        if value.size != 1:
            continue
        inv = onnx.helper.make_node(
            "Constant", [], [n.input[1] + "_inv"],
            value=numpy_helper.from_array(np.asarray(1.0 / value, dtype=value.dtype)),
        )
        g.node.insert(list(g.node).index(n), inv)
        n.op_type = "Div"
        n.input[1] = inv.output[0]
        if len(consumers.get(const.output[0], [])) == 1:
            g.node.remove(const)
        rewritten += 1
    onnx.save(model, str(dst))
    return rewritten


# onnxruntime's CPU SkipLayerNormalization kernel (1.31) is much slower than its Add and
# LayerNormalization kernels together, and a large share of a small model's run time
# (bench/results/experiments-cpu.md, "The CPU graph"; python -m bench.experiments.layernorm measures it).
CPU_DISABLED_OPTIMIZERS = ("SkipLayerNormFusion",)  # so it does not fuse them back at load time


def unfuse_skip_layernorm(path: Path) -> int:
    """Rewrite each SkipLayerNormalization(x, skip, γ, β, bias) as Add(x, skip) [+ Add bias]
    → LayerNormalization(γ, β), in place; the same arithmetic, in onnxruntime's faster CPU
    kernels (CPU graphs only: the fp16 / CUDA graph keeps the fused kernel). Sessions on CPU
    pass `disabled_optimizers=CPU_DISABLED_OPTIMIZERS`. Returns the number rewritten."""
    import onnx
    from onnx import helper

    model = onnx.load(str(path))
    nodes, rewritten = [], 0
    for n in model.graph.node:
        if n.op_type != "SkipLayerNormalization" or any(n.output[1:]):  # mean / inv-std / sum used
            nodes.append(n)
            continue
        eps = next((a.f for a in n.attribute if a.name == "epsilon"), 1e-12)
        x, skip, gamma, *rest = n.input
        beta, bias = [*rest, "", ""][:2]
        total = f"{n.name}/sum"
        nodes.append(helper.make_node("Add", [x, skip], [total], name=f"{n.name}/add"))
        if bias:
            nodes.append(helper.make_node("Add", [total, bias], [f"{total}_bias"], name=f"{n.name}/add_bias"))
            total = f"{total}_bias"
        nodes.append(helper.make_node("LayerNormalization", [total, gamma, *([beta] if beta else [])],
                                      [n.output[0]], name=f"{n.name}/layernorm", axis=-1, epsilon=eps))
        rewritten += 1
    if rewritten:
        if max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) < 17:
            raise ValueError(f"{path}: LayerNormalization needs opset 17 or later")
        del model.graph.node[:]
        model.graph.node.extend(nodes)
        onnx.save(model, str(path))
    return rewritten


def optimize(src: Path, dst: Path, n_heads: int, d_model: int, fp16_dst: Path | None = None) -> dict[str, int]:
    """Fuse attention, SkipLayerNorm, EmbedLayerNorm and Gelu; write dst (fp32) and, when
    asked, an fp16 copy. Then dst, a CPU graph, gets its SkipLayerNorms back as Add +
    LayerNormalization (unfuse_skip_layernorm). Returns the non-zero operator counts of the
    fused kinds in dst (the fp16 copy keeps SkipLayerNormalization)."""
    from onnxruntime.transformers import optimizer

    _quiet()
    scale_as_div(src, src)
    opt = optimizer.optimize_model(
        str(src), model_type="bert", num_heads=n_heads, hidden_size=d_model
    )
    stats = {k: v for k, v in opt.get_fused_operator_statistics().items() if v}
    opt.save_model_to_file(str(dst))
    if fp16_dst is not None:
        # keep_io_types: callers feed and read float32; LayerNorm/Softmax run inside fused
        # kernels that accumulate in fp32.
        opt.convert_float_to_float16(keep_io_types=True)
        opt.save_model_to_file(str(fp16_dst))
    unfused = unfuse_skip_layernorm(dst)
    if unfused:
        stats.pop("SkipLayerNormalization", None)
        stats["LayerNormalization"] = stats.get("LayerNormalization", 0) + unfused
    return stats
