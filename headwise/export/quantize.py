"""Batch-invariant int8: per-token activation scales, per-output-channel weight scales.

onnxruntime's dynamic quantisation (`quantize_dynamic`) computes one activation scale for the
whole batch tensor, so an input's embedding moved with whatever shared its batch. Here every
MatMul whose weight W [K, N] is a constant becomes

    s, z = scale and zero point of each row (token) of x [..., K], from that row alone
    x_q  = QuantizeLinear(x, s, z)                       uint8, one scale per row
    y    = (MatMulIntegerToFloat(x_q, W_q, 1, w) − z ⊗ c) · s

with w = max(|W|, over K) / 127 per output channel, W_q = round(W / w) in int8 and
c = Σ_K W_q · w. No row's scale depends on another row, so an input's answer is the same alone
or in any batch.

- Most inputs are quantised symmetrically (z = 128, s = max|x| / 127), which needs no z ⊗ c
  term: the correction is folded into MatMulIntegerToFloat's zero point.
- Inputs that come out of a GELU are bounded below by −0.17 and skewed, so a symmetric scale
  would waste half the range: they get s = (max − min) / 255 and their own z (asymmetric).
  This is the FFN's second MatMul, whose output is narrow (d_model), so the extra term is cheap.

The fused Attention (Q/K/V projections and softmax) stays fp32. Figures for each choice:
bench/results/int8-schemes.md.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path

import numpy as np

SCHEME = ("int8 per-token dynamic activation scales (asymmetric after GELU, symmetric elsewhere), "
          "per-channel int8 weights; attention in fp32")
SKEWED_PRODUCERS = ("Gelu", "BiasGelu", "FastGelu", "Relu")


def _quantize_weight(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """W [K, N] → (W_q int8 [K, N], scale float32 [N]), symmetric per output channel."""
    scale = np.maximum(np.abs(w).max(axis=0), 1e-12) / 127.0
    q = np.clip(np.round(w / scale), -127, 127).astype(np.int8)
    return q, scale.astype(np.float32)


class _Rewriter:
    """Collects the new nodes and constants of one graph."""

    def __init__(self):
        from onnx import helper, numpy_helper

        self._helper, self._numpy_helper = helper, numpy_helper
        self.nodes: list = []
        self.constants: dict = {}

    def const(self, name: str, value) -> str:
        if name not in self.constants:
            self.constants[name] = self._numpy_helper.from_array(np.asarray(value), name)
        return name

    def node(self, prefix: str, op: str, inputs: list[str], outputs: list[str], **kw) -> None:
        self.nodes.append(self._helper.make_node(op, inputs, outputs, name=f"{prefix}/{op}_{len(self.nodes)}", **kw))


def _row_scales_symmetric(r: _Rewriter, p: str, x: str) -> tuple[str, str]:
    """(s [..., 1], z [rows] uint8 = 128): s = max|x| / 127 per row."""
    r.node(p, "Abs", [x], [f"{p}/abs"])
    r.node(p, "ReduceMax", [f"{p}/abs"], [f"{p}/amax"], axes=[-1], keepdims=1)
    r.node(p, "Max", [f"{p}/amax", r.const("q8/eps", np.float32(1e-12))], [f"{p}/amax_eps"])
    r.node(p, "Div", [f"{p}/amax_eps", r.const("q8/127", np.float32(127.0))], [f"{p}/s"])
    r.node(p, "Reshape", [f"{p}/s", r.const("q8/flat", np.array([-1], np.int64))], [f"{p}/s1"])
    r.node(p, "Shape", [f"{p}/s1"], [f"{p}/rows"])
    r.node(p, "Expand", [r.const("q8/128", np.uint8(128)), f"{p}/rows"], [f"{p}/z1"])
    return f"{p}/s", f"{p}/z1"


def _row_scales_asymmetric(r: _Rewriter, p: str, x: str) -> tuple[str, str, str]:
    """(s [..., 1], z [rows] uint8, z as float [..., 1]): the row's [min, max] ∪ {0} over 0..255."""
    zero = r.const("q8/zero", np.float32(0.0))
    r.node(p, "ReduceMax", [x], [f"{p}/max"], axes=[-1], keepdims=1)
    r.node(p, "ReduceMin", [x], [f"{p}/min"], axes=[-1], keepdims=1)
    r.node(p, "Max", [f"{p}/max", zero], [f"{p}/hi"])
    r.node(p, "Min", [f"{p}/min", zero], [f"{p}/lo"])
    r.node(p, "Sub", [f"{p}/hi", f"{p}/lo"], [f"{p}/range"])
    r.node(p, "Max", [f"{p}/range", r.const("q8/eps", np.float32(1e-12))], [f"{p}/range_eps"])
    r.node(p, "Div", [f"{p}/range_eps", r.const("q8/255", np.float32(255.0))], [f"{p}/s"])
    r.node(p, "Div", [f"{p}/lo", f"{p}/s"], [f"{p}/lo_q"])
    r.node(p, "Round", [f"{p}/lo_q"], [f"{p}/lo_r"])
    r.node(p, "Neg", [f"{p}/lo_r"], [f"{p}/zf"])                                     # in 0..255
    flat = r.const("q8/flat", np.array([-1], np.int64))
    r.node(p, "Reshape", [f"{p}/s", flat], [f"{p}/s1"])
    r.node(p, "Reshape", [f"{p}/zf", flat], [f"{p}/zf1"])
    r.node(p, "Cast", [f"{p}/zf1"], [f"{p}/z1"], to=2)  # TensorProto.UINT8
    return f"{p}/s", f"{p}/z1", f"{p}/zf"


def _quantized_matmul(r: _Rewriter, p: str, x: str, y: str, w: np.ndarray, asymmetric: bool) -> None:
    k, n = w.shape
    wq, ws = _quantize_weight(w)
    wq_name, ws_name = r.const(f"{p}/w_q", wq), r.const(f"{p}/w_scale", ws)
    one = r.const("q8/one", np.float32(1.0))
    col = r.const("q8/col", np.array([-1, 1], np.int64))
    if asymmetric:
        s, z1, zf = _row_scales_asymmetric(r, p, x)
    else:
        s, z1 = _row_scales_symmetric(r, p, x)
    r.node(p, "Reshape", [x, r.const(f"q8/k{k}", np.array([-1, k], np.int64))], [f"{p}/x2"])  # [rows, K]
    r.node(p, "QuantizeLinear", [f"{p}/x2", f"{p}/s1", z1], [f"{p}/x_q"], axis=0)
    if asymmetric:
        r.node(p, "MatMulIntegerToFloat", [f"{p}/x_q", wq_name, one, ws_name], [f"{p}/acc0"], domain="com.microsoft")
        c = r.const(f"{p}/c", (wq.astype(np.float32).sum(axis=0) * ws).astype(np.float32))
        r.node(p, "Reshape", [zf, col], [f"{p}/z_col"])                                 # [rows, 1]
        r.node(p, "Mul", [f"{p}/z_col", c], [f"{p}/z_c"])                                 # [rows, N]
        r.node(p, "Sub", [f"{p}/acc0", f"{p}/z_c"], [f"{p}/acc"])
    else:
        r.node(p, "MatMulIntegerToFloat", [f"{p}/x_q", wq_name, one, ws_name, r.const("q8/128", np.uint8(128))],
               [f"{p}/acc"], domain="com.microsoft")                                     # [rows, N]
    r.node(p, "Reshape", [s, col], [f"{p}/s_col"])                                       # [rows, 1]
    r.node(p, "Mul", [f"{p}/acc", f"{p}/s_col"], [f"{p}/y2"])
    r.node(p, "Shape", [x], [f"{p}/x_shape"])
    r.node(p, "Slice", [f"{p}/x_shape", r.const("q8/0", np.array([0], np.int64)),
                        r.const("q8/-1", np.array([-1], np.int64))], [f"{p}/lead"])
    r.node(p, "Concat", [f"{p}/lead", r.const(f"q8/n{n}", np.array([n], np.int64))], [f"{p}/y_shape"], axis=0)
    r.node(p, "Reshape", [f"{p}/y2", f"{p}/y_shape"], [y])                               # [..., N]


def quantize_int8(src: Path, dst: Path, keep_fp32: Collection[str] = (),
                  asymmetric: Callable[[object], bool] | None = None) -> int:
    """Write dst: src with every constant-weight MatMul as per-token int8, except the nodes
    named in keep_fp32. `asymmetric(producer_node)` picks the scheme of an input (default:
    asymmetric after SKEWED_PRODUCERS). Returns how many MatMuls were quantised."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(src))
    g = model.graph
    inits = {i.name: i for i in g.initializer}
    producer = {o: n for n in g.node for o in n.output}
    skewed = asymmetric or (lambda node: node is not None and node.op_type in SKEWED_PRODUCERS)
    r, done = _Rewriter(), 0
    for n in g.node:
        w = numpy_helper.to_array(inits[n.input[1]]) if n.op_type == "MatMul" and n.input[1] in inits else None
        if w is None or w.ndim != 2 or n.name in keep_fp32:
            r.nodes.append(n)
            continue
        _quantized_matmul(r, f"q8/{done}", n.input[0], n.output[0], w.astype(np.float32),
                          skewed(producer.get(n.input[0])))
        done += 1
    del g.node[:]
    g.node.extend(r.nodes)
    g.initializer.extend(r.constants.values())
    used = {i for n in g.node for i in n.input}
    kept = [i for i in g.initializer if i.name in used]
    del g.initializer[:]
    g.initializer.extend(kept)
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    onnx.save(model, str(dst))
    return done
