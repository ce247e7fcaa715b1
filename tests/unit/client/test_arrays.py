"""headwise.client.arrays: the server's arrays (JSON numbers or base64 of little-endian C-order
bytes, docs/api.md) decoded to numpy with the announced shape and dtype."""

from __future__ import annotations

import base64
import re

import numpy as np
import pytest

from headwise.client.arrays import decode_array, decode_block, decode_hidden_states


def b64(a: np.ndarray, dtype: str) -> str:
    return base64.b64encode(np.ascontiguousarray(a, dtype=dtype).tobytes()).decode("ascii")


@pytest.mark.parametrize(("dtype", "wire"), [("float16", "<f2"), ("float32", "<f4"), ("int32", "<i4")])
def test_base64_decodes_to_the_shape_and_dtype(dtype, wire):
    rng = np.random.default_rng(0)
    want = (rng.random((2, 3, 5, 5)) * 100).astype(wire)  # [L, H, T, T]
    got = decode_array(b64(want, wire), [2, 3, 5, 5], dtype, "base64")
    assert got.shape == (2, 3, 5, 5) and got.dtype == np.dtype(wire).newbyteorder("=")
    assert np.array_equal(got, want)
    got[0, 0, 0, 0] = 1  # writable, not a view of the bytes


def test_float16_base64_is_bit_exact():
    want = np.array([0.0, 6e-8, 2.0 ** -14, 0.33325, 1.0, 65504.0], dtype="<f2")
    got = decode_array(b64(want, "<f2"), [6], "float16", "base64")
    assert got.view(np.uint16).tolist() == want.view(np.uint16).tolist()


def test_json_numbers_take_the_announced_dtype():
    got = decode_array([[[0.5, 0.25], [1.0, 0.0]]], [1, 2, 2], "float16", "json")
    assert got.dtype == np.float16 and got.shape == (1, 2, 2) and got[0, 0, 1] == 0.25
    assert decode_array([[1, 2]], [1, 2], "float32").dtype == np.float32


@pytest.mark.parametrize(("data", "shape"), [([[[]]], [1, 1, 0, 4]), ([], [0, 3]), ([[[], []]], [1, 2, 0])])
def test_empty_arrays_keep_their_shape(data, shape):
    assert decode_array(data, shape).shape == tuple(shape)
    assert decode_array("", shape, "float16", "base64").shape == tuple(shape)


@pytest.mark.parametrize(("data", "shape", "dtype", "encoding", "words"), [
    (b64(np.zeros(5, "<f4"), "<f4"), [2, 3], "float32", "base64", "20 bytes"),
    (b64(np.zeros(6, "<f4"), "<f4"), [2, 3], "float16", "base64", "24 bytes"),
    ("not base64!", [1], "float32", "base64", "bad base64"),
    ([1.0, 2.0], [2], "float32", "base64", "must be a string"),
    ([[1.0, 2.0]], [2, 1], "float32", "json", "shape [1, 2]"),
    ([1.0], [1], "bfloat16", "json", "unknown dtype"),
    ([1.0], [1], "float32", "msgpack", "unknown encoding"),
])
def test_inconsistent_arrays_are_refused(data, shape, dtype, encoding, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        decode_array(data, shape, dtype, encoding)


def test_topk_block_and_its_dense_form():
    dense = np.array([[[[0.7, 0.2, 0.1], [0.1, 0.3, 0.6], [0.5, 0.0, 0.5]]]], dtype=np.float32)
    idx = np.argsort(-dense, axis=-1, kind="stable")[..., :2].astype(np.int32)
    vals = np.take_along_axis(dense, idx, axis=-1)
    obj = {"shape": [1, 1, 3, 2], "index_dtype": "int32", "data": {"indices": b64(idx, "<i4"), "values": b64(vals, "<f4")}}
    block = decode_block(obj, "float32", "base64", "topk")
    assert block.shape == (1, 1, 3, 2) and block.indices.dtype == np.int32
    assert np.array_equal(block.indices, idx) and np.array_equal(block.values, vals)
    got = block.to_dense()
    assert got.shape == (1, 1, 3, 3)
    assert np.array_equal(got, np.array([[[[0.7, 0.2, 0.0], [0.0, 0.3, 0.6], [0.5, 0.0, 0.5]]]], dtype=np.float32))
    assert block.to_dense(n_keys=5).shape == (1, 1, 3, 5)
    as_json = decode_block({**obj, "data": {"indices": idx.tolist(), "values": vals.tolist()}}, "float32", "json", "topk")
    assert np.array_equal(as_json.values, vals) and np.array_equal(as_json.indices, idx)


def test_dense_block_is_its_own_dense_form():
    block = decode_block({"shape": [2, 2], "data": [[1, 0], [0.5, 0.5]]}, "float32", "json")
    assert block.indices is None and block.to_dense() is block.values
    with pytest.raises(ValueError, match="format"):
        decode_block({"shape": [1], "data": [1]}, "float32", "json", "sparse")


def test_hidden_states_split_per_layer():
    h = np.arange(24, dtype="<f2").reshape(2, 3, 4)  # [L', T, D]
    got = decode_hidden_states({"layers": [6, 0], "pooling": "none", "dtype": "float16", "encoding": "base64",
                                "shape": [2, 3, 4], "data": b64(h, "<f2")})
    assert [g.layer for g in got] == [6, 0] and all(g.pooling == "none" for g in got)
    assert got[0].array.dtype == np.float16 and np.array_equal(got[1].array, h[1])
    pooled = decode_hidden_states({"layers": [3], "pooling": "mean", "dtype": "float32", "encoding": "json",
                                   "shape": [1, 2], "data": [[1.0, 2.0]]})
    assert pooled[0].array.shape == (2,) and pooled[0].pooling == "mean"
    with pytest.raises(ValueError, match="hidden_states"):
        decode_hidden_states({"layers": [1, 2], "encoding": "json", "data": [[1.0, 2.0]]})
    with pytest.raises(ValueError, match="hidden_states"):
        decode_hidden_states("nope")
