"""The fp16 graph is the one served on CUDA: every operator in it must have a CUDA kernel in
onnxruntime for the element type it gets (else onnxruntime runs that node on the CPU, with a
copy each way), its inputs must be int64 and its outputs float32 (what the service feeds and
reads, whatever the precision inside).

The kernel list is onnxruntime's own docs/OperatorKernels.md, CUDAExecutionProvider section
(tests/unit/data/cuda_kernels.json names the commit). On the H100, bench/gpu_checks.py found
one node on the CPU: a shape-computing Gather, which onnxruntime places there on purpose."""

import json
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, shape_inference

KERNELS = json.loads((Path(__file__).resolve().parents[1] / "data" / "cuda_kernels.json").read_text())["kernels"]
TYPE_NAMES = {TensorProto.FLOAT: "tensor(float)", TensorProto.FLOAT16: "tensor(float16)",
              TensorProto.INT64: "tensor(int64)", TensorProto.INT32: "tensor(int32)",
              TensorProto.BOOL: "tensor(bool)", TensorProto.DOUBLE: "tensor(double)"}


@pytest.fixture(scope="module")
def fp16_graph(tiny_package) -> onnx.ModelProto:
    manifest = json.loads((tiny_package / "manifest.json").read_text())
    assert "fast.fp16" in manifest["variants"], "the tiny package was exported without --fp16"
    model = onnx.load(str(tiny_package / manifest["variants"]["fast.fp16"]["file"]))
    return shape_inference.infer_shapes(model)


def value_types(model: onnx.ModelProto) -> dict[str, int]:
    g = model.graph
    types = {i.name: i.data_type for i in g.initializer}
    for v in [*g.input, *g.output, *g.value_info]:
        if v.type.tensor_type.elem_type:
            types[v.name] = v.type.tensor_type.elem_type
    return types


def test_every_operator_has_a_cuda_kernel_for_its_element_type(fp16_graph):
    types = value_types(fp16_graph)
    missing, wrong_type = set(), set()
    for node in fp16_graph.graph.node:
        domain = node.domain or "ai.onnx"
        ops = KERNELS.get(domain, {})
        if node.op_type not in ops:
            missing.add(f"{domain}.{node.op_type}")
            continue
        # the element type the kernel is chosen by: its first floating-point input (integer
        # inputs such as token ids have fixed types in the operator's schema)
        floats = [types[i] for i in node.input if types.get(i) in (TensorProto.FLOAT, TensorProto.FLOAT16)]
        if floats and TYPE_NAMES[floats[0]] not in ops[node.op_type]:
            wrong_type.add(f"{domain}.{node.op_type}({TYPE_NAMES[floats[0]]})")
    assert not missing, f"no CUDA kernel in onnxruntime for: {sorted(missing)}"
    assert not wrong_type, f"CUDA kernel without this element type: {sorted(wrong_type)}"


def test_the_graph_is_float16_inside(fp16_graph):
    types = value_types(fp16_graph)
    weights = [i for i in fp16_graph.graph.initializer if i.data_type in (TensorProto.FLOAT, TensorProto.FLOAT16)
               and len(i.dims) == 2]
    assert weights and all(w.data_type == TensorProto.FLOAT16 for w in weights)
    assert TensorProto.FLOAT16 in types.values()


def test_inputs_are_int64_and_outputs_float32(fp16_graph):
    g = fp16_graph.graph
    assert {i.name: i.type.tensor_type.elem_type for i in g.input} == {
        n: TensorProto.INT64 for n in ("input_ids", "attention_mask", "token_type_ids")}
    assert {o.name: o.type.tensor_type.elem_type for o in g.output} == {
        "sentence_embedding": TensorProto.FLOAT, "last_hidden_state": TensorProto.FLOAT}
