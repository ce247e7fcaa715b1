"""KServe v2 tensor (de)serialisation helpers: JSON data, Triton's binary tensor extension,
and the OpenAPI/`dimensions` helpers of the compatible routes."""

from __future__ import annotations

import struct

import numpy as np
import orjson
import pytest
from tritonclient.utils import deserialize_bytes_tensor, serialize_byte_tensor

from headwise.service.api.compat import v2tensors as v2
from headwise.service.api.compat.kserve import V2InferRequest
from headwise.service.api.compat.openai import EmbeddingsRequest, shorten
from headwise.service.api.compat.openapi import inline_schema, request_body
from headwise.service.errors import InvalidRequest

ITEMS = [b"hello", b"", "naïve 東京 🙂".encode(), b"\x00\xffraw"]


def test_bytes_round_trip_and_match_tritonclient():
    raw = v2.encode_bytes(ITEMS)
    assert raw == serialize_byte_tensor(np.array(ITEMS, dtype=np.object_)).item()
    assert v2.decode_bytes(raw, len(ITEMS)) == ITEMS
    assert list(deserialize_bytes_tensor(raw)) == ITEMS
    assert v2.encode_bytes(["é"]) == struct.pack("<I", 2) + "é".encode()
    assert v2.decode_bytes(b"", 0) == []


@pytest.mark.parametrize("raw,count,msg", [
    (struct.pack("<I", 5) + b"abc", 1, "data ends sooner"),
    (struct.pack("<I", 1) + b"a", 2, "ends before element 1"),
    (struct.pack("<I", 1) + b"ab", 1, "1 bytes left over"),
    (b"\x01\x00", 1, "ends before element 0"),
])
def test_bytes_decode_errors(raw, count, msg):
    with pytest.raises(InvalidRequest, match=msg):
        v2.decode_bytes(raw, count)


def test_split_body():
    head = orjson.dumps({"inputs": []})
    h, rest = v2.split_body(head, None)
    assert h == {"inputs": []} and len(rest) == 0
    h, rest = v2.split_body(head + b"\x01\x02", str(len(head)))
    assert h == {"inputs": []} and bytes(rest) == b"\x01\x02"
    for length, msg in ((str(len(head) + 3), "but the body has"), ("-1", "must be an integer"),
                        ("12abc", "must be an integer"), ("+5", "must be an integer"), ("1_0", "must be an integer"),
                        ("²", "must be an integer"), ("٣", "must be an integer"), ("9" * 5000, "must be an integer")):
        with pytest.raises(InvalidRequest, match=msg):
            v2.split_body(head + b"\x01\x02", length)
    with pytest.raises(InvalidRequest, match="malformed JSON"):
        v2.split_body(b'{"inputs": [', None)
    with pytest.raises(InvalidRequest, match="must be a JSON object"):
        v2.split_body(b"[1, 2]", None)


def test_read_json_inputs_flat_and_nested():
    t = {"name": "x", "datatype": "FP32", "shape": [2, 2], "data": [[1, 2.5], [3, 4]]}
    name, dt, shape, a, off = v2.read_input(t, memoryview(b""), 0)
    assert (name, dt, shape, off) == ("x", "FP32", [2, 2], 0)
    assert a.dtype == np.float32 and a.tolist() == [[1, 2.5], [3, 4]]
    flat = v2.read_input({**t, "data": [1, 2.5, 3, 4]}, memoryview(b""), 0)[3]
    assert np.array_equal(flat, a)
    s = v2.read_input({"name": "t", "datatype": "BYTES", "shape": [1, 2], "data": [["a", "é"]]}, memoryview(b""), 0)
    assert s[3] == [b"a", "é".encode()]
    b = v2.read_input({"name": "b", "datatype": "BOOL", "shape": [2], "data": [True, False]}, memoryview(b""), 0)
    assert b[3].tolist() == [True, False]


@pytest.mark.parametrize("tensor,msg", [
    ({"name": "x", "datatype": "FP32", "shape": [3], "data": [1, 2]}, "holds 3 elements, 'data' has 2"),
    ({"name": "x", "datatype": "FP33", "shape": [1], "data": [1]}, "unknown datatype"),
    ({"name": "x", "datatype": "INT32", "shape": [1], "data": [1.5]}, "do not match datatype INT32"),
    ({"name": "x", "datatype": "FP32", "shape": [1], "data": [True]}, "do not match datatype FP32"),
    ({"name": "x", "datatype": "INT8", "shape": [1], "data": [1000]}, "out of range"),
    ({"name": "x", "datatype": "BYTES", "shape": [1], "data": [1]}, "must be strings"),
    ({"name": "x", "datatype": "FP32", "shape": [-1], "data": [1]}, "non-negative integers"),
    ({"name": "x", "datatype": "FP32", "shape": "1", "data": [1]}, "non-negative integers"),
    ({"name": "x", "datatype": "FP32", "shape": [1]}, "no 'data'"),
    ({"datatype": "FP32", "shape": [1], "data": [1]}, "with a 'name'"),
    ({"name": "x", "datatype": "FP32", "shape": [1], "data": [1],
      "parameters": {"shared_memory_region": "r"}}, "shared-memory"),
    ({"name": "x", "datatype": "FP32", "shape": [1], "parameters": {"binary_data_size": 8}}, "past the end"),
    ({"name": "x", "datatype": "FP32", "shape": [1], "parameters": {"binary_data_size": -1}}, "non-negative"),
])
def test_read_input_errors(tensor, msg):
    with pytest.raises(InvalidRequest, match=msg):
        v2.read_input(tensor, memoryview(b"\x00" * 4), 0)


def test_nesting_is_bounded():
    deep = [1]
    for _ in range(100):
        deep = [deep]
    with pytest.raises(InvalidRequest, match="nested too deeply"):
        v2.read_input({"name": "x", "datatype": "FP32", "shape": [1], "data": deep}, memoryview(b""), 0)


def test_read_binary_inputs_in_order():
    floats = np.arange(6, dtype="<f4").reshape(2, 3)
    text = v2.encode_bytes([b"ab", b"c"])
    binary = memoryview(floats.tobytes() + text)
    f = {"name": "f", "datatype": "FP32", "shape": [2, 3], "parameters": {"binary_data_size": 24}}
    t = {"name": "t", "datatype": "BYTES", "shape": [2], "parameters": {"binary_data_size": len(text)}}
    _, _, _, a, off = v2.read_input(f, binary, 0)
    assert np.array_equal(a, floats) and off == 24
    _, _, _, s, off = v2.read_input(t, binary, off)
    assert s == [b"ab", b"c"] and off == len(binary)
    with pytest.raises(InvalidRequest, match="needs 24 bytes"):
        v2.read_input({**f, "parameters": {"binary_data_size": 20}}, binary, 0)
    with pytest.raises(InvalidRequest, match="left over"):
        v2.read_input({**t, "shape": [1]}, binary, 24)


def test_outputs_json_and_binary():
    a = np.array([[0.1, 0.2], [0.3, 0.4]], dtype=np.float32)
    o, raw = v2.output("e", "FP32", a, binary=False)
    assert raw is None and o["shape"] == [2, 2] and o["data"].shape == (4,)
    o2, raw2 = v2.output("m", "INT64", np.array([[1, 0]]), binary=True)
    assert o2["parameters"] == {"binary_data_size": 16} and np.frombuffer(raw2, "<i8").tolist() == [1, 0]
    body, n = v2.encode_response({"outputs": [o, o2]}, [raw2])
    head = orjson.loads(body[:n])
    assert np.array_equal(np.array(head["outputs"][0]["data"], dtype=np.float32), a.ravel())
    assert body[n:] == raw2
    body, n = v2.encode_response({"outputs": [o]}, [])
    assert n is None and orjson.loads(body)["outputs"][0]["name"] == "e"
    h = v2.output("h", "FP16", np.array([0.5, 0.25], dtype=np.float16), binary=True)[1]
    assert np.frombuffer(h, "<f2").tolist() == [0.5, 0.25]
    assert [v2.datatype_of(np.zeros(1, d)) for d in ("<f4", "<f2", "<i8", "?")] == ["FP32", "FP16", "INT64", "BOOL"]


def test_openapi_bodies_need_no_components():
    for model in (EmbeddingsRequest, V2InferRequest):
        s = inline_schema(model)
        assert "$ref" not in orjson.dumps(s).decode() and "$defs" not in s
    body = request_body(V2InferRequest, **{"application/octet-stream": {"schema": {"type": "string"}}})
    assert set(body["requestBody"]["content"]) == {"application/json", "application/octet-stream"}


def test_dimensions_truncate_then_renormalise():
    v = np.array([3.0, 4.0, 12.0], dtype=np.float32) / 13
    assert np.allclose(shorten(v, 2), [0.6, 0.8]) and shorten(v, 2).dtype == np.float32
    assert shorten(v, 3) is v
