"""headwise/export/quantize.py: per-token int8 keeps every row's answer to itself."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from headwise.export.quantize import quantize_int8


def matmul_model(path, w: np.ndarray, after_relu: bool) -> None:
    """y = x @ w, or relu(x) @ w (an input skewed to one side: quantised asymmetrically)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "t", w.shape[0]])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", "t", w.shape[1]])
    nodes = [helper.make_node("Relu", ["x"], ["xr"])] if after_relu else []
    nodes.append(helper.make_node("MatMul", ["xr" if after_relu else "x", "w"], ["y"]))
    graph = helper.make_graph(nodes, "g", [x], [y], [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # what onnxruntime reads, whatever the onnx package writes by default
    onnx.save(model, str(path))


@pytest.mark.parametrize("after_relu", [False, True], ids=["symmetric", "asymmetric"])
def test_a_loud_neighbour_does_not_change_a_row(tmp_path, after_relu):
    rng = np.random.default_rng(0)
    w = rng.normal(size=(64, 48)).astype(np.float32)
    matmul_model(tmp_path / "f.onnx", w, after_relu)
    assert quantize_int8(tmp_path / "f.onnx", tmp_path / "q.onnx") == 1
    onnx.checker.check_model(str(tmp_path / "q.onnx"))
    ops = [n.op_type for n in onnx.load(str(tmp_path / "q.onnx")).graph.node]
    assert "MatMul" not in ops and "DynamicQuantizeLinear" not in ops and "MatMulIntegerToFloat" in ops
    assert ("ReduceMin" in ops) == after_relu
    s = ort.InferenceSession(str(tmp_path / "q.onnx"), providers=["CPUExecutionProvider"])
    x = rng.normal(size=(1, 5, 64)).astype(np.float32)
    loud = 1000 * rng.normal(size=(3, 5, 64)).astype(np.float32)  # a per-tensor scale would crush x
    alone = s.run(["y"], {"x": x})[0]
    together = s.run(["y"], {"x": np.concatenate([loud, x])})[0][3:]
    np.testing.assert_array_equal(together, alone)
    exact = (np.maximum(x, 0) if after_relu else x) @ w
    rel = np.linalg.norm(alone - exact, axis=-1) / np.linalg.norm(exact, axis=-1)
    assert rel.max() < 0.02  # int8 with one scale per row and per output channel
    zeros = s.run(["y"], {"x": np.zeros((1, 2, 64), np.float32)})[0]
    assert not zeros.any() and np.isfinite(zeros).all()  # an all-zero row: no division by zero
