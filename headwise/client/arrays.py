"""Arrays as the server writes them (docs/api.md): JSON numbers, or `base64` of the array's
little-endian bytes in C order, in `shape` order; top-k as `{"indices", "values"}`. Every
array-valued field of every route goes through `decode_array`."""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from headwise.client.types import AttentionBlock, HiddenState

# The wire's dtype names → little-endian numpy dtypes; arrays come back in native byte order.
WIRE_DTYPES = {"float32": "<f4", "float16": "<f2", "float64": "<f8", "int32": "<i4", "int64": "<i8"}


def _dtype(name: str) -> np.dtype:
    try:
        return np.dtype(WIRE_DTYPES[name])
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; expected one of {sorted(WIRE_DTYPES)}") from None


def decode_array(data: Any, shape: Sequence[int], dtype: str = "float32", encoding: str = "json") -> np.ndarray:
    """One array of `shape` from JSON numbers (`encoding="json"`) or a base64 string of its
    little-endian C-order bytes (`"base64"`), as `dtype` (`float16` stays float16)."""
    want = _dtype(dtype)
    native = want.newbyteorder("=")
    shape = tuple(int(s) for s in shape)
    if encoding == "base64":
        if not isinstance(data, str):
            raise ValueError(f"base64 data must be a string, got {type(data).__name__}")
        try:
            raw = base64.b64decode(data, validate=True)
        except binascii.Error as e:
            raise ValueError(f"bad base64 data: {e}") from None
        if len(raw) != math.prod(shape) * want.itemsize:
            raise ValueError(f"{len(raw)} bytes of base64 data do not make a {dtype} array of shape {list(shape)}")
        # bytearray: a writable copy (np.frombuffer over bytes is read-only).
        return np.frombuffer(bytearray(raw), dtype=want).reshape(shape).astype(native, copy=False)
    if encoding != "json":
        raise ValueError(f"unknown encoding {encoding!r}; expected 'json' or 'base64'")
    a = np.asarray(data, dtype=native)
    if a.shape != shape:
        if a.size != math.prod(shape) or a.size:  # only empty arrays lose their shape in JSON
            raise ValueError(f"JSON array of shape {list(a.shape)} where {list(shape)} was announced")
        a = a.reshape(shape)
    return a


def decode_block(obj: Mapping[str, Any], dtype: str, encoding: str, fmt: str = "dense") -> AttentionBlock:
    """`{"shape", "data"}` (dense) or `{"shape", "index_dtype", "data": {"indices", "values"}}`
    (top-k) → an AttentionBlock."""
    shape = tuple(int(s) for s in obj["shape"])
    data = obj["data"]
    if fmt == "topk":
        return AttentionBlock(
            shape=shape, format="topk",
            values=decode_array(data["values"], shape, dtype, encoding),
            indices=decode_array(data["indices"], shape, obj.get("index_dtype") or "int32", encoding))
    if fmt != "dense":
        raise ValueError(f"unknown attention format {fmt!r}")
    return AttentionBlock(shape=shape, format="dense", values=decode_array(data, shape, dtype, encoding), indices=None)


def decode_hidden_states(value: Any) -> list[HiddenState]:
    """An item's `hidden_states` as /v1/embed writes it, `{layers, pooling, dtype, encoding,
    shape, data}` with shape [L', T, d_model] (or [L', d_model] pooled), split into one
    HiddenState per layer, in the order the layers were asked for."""
    if not isinstance(value, Mapping) or "layers" not in value or "data" not in value:
        raise ValueError("hidden_states: expected {layers, pooling, dtype, encoding, shape, data}")
    dtype, encoding = value.get("dtype", "float32"), value.get("encoding", "json")
    shape = value.get("shape")
    if shape is None:  # JSON numbers carry their own shape
        shape = np.shape(value["data"]) if encoding == "json" else ()
    array = decode_array(value["data"], shape, dtype, encoding)
    layers = [int(i) for i in value["layers"]]
    if array.ndim == 0 or array.shape[0] != len(layers):
        raise ValueError(f"hidden_states: shape {list(array.shape)} does not start with the {len(layers)} layers")
    return [HiddenState(layer=layer, array=array[j], pooling=value.get("pooling"), dtype=dtype)
            for j, layer in enumerate(layers)]
