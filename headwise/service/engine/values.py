"""How the engine writes values into an answer: the dtypes it sends, base64 or JSON numbers
(`encode_array`), and the bytes that takes (`written_bytes`, the JSON measures the response
budgets count); and the one reading of a client's index text (`ascii_index`). The bottom of
the engine's imports: it imports none of its modules."""

from __future__ import annotations

import base64

import numpy as np

DTYPES = {"float32": np.dtype("<f4"), "float16": np.dtype("<f2")}
INDEX_DTYPE = np.dtype("<i4")
# The most one value takes in the JSON orjson writes, its comma included ("-1.2345678e-5,"):
# what the response budgets count, so that a check holds for the bytes really built.
# orjson writes a float16 with its float32 digits ("-0.000011980534,"): no shorter than a float32.
JSON_VALUE_BYTES = {"float32": 16, "float16": 16}
JSON_INDEX_BYTES = 6  # an int32 key index below 100,000 and its comma
TOKEN_BYTES = 48  # one token's string and [start, end] offsets in the JSON, generously


def ascii_index(text: str, n: int) -> int | None:
    """A client's text as an index in 0..n-1, or None: plain ASCII digits only ("02" is 2).
    Not `str.isdigit()` then `int()`: isdigit accepts "²" and "①", which int() refuses (a 500),
    int() accepts "٣", "３", " 3", "+3" and "1_0", and a 5,000-digit string hits Python's
    integer-string limit. Never converts more digits than n has."""
    if not (text.isascii() and text.isdigit()):
        return None
    digits = text.lstrip("0") or "0"
    if len(digits) > len(str(n)):
        return None
    i = int(digits)
    return i if i < n else None


def written_bytes(values: int, dtype: str, encoding: str, indices: int = 0) -> int:
    """Bytes `values` attention weights of `dtype` (and top-k's int32 `indices`) take in a
    response body: JSON numbers, or base64 of the raw bytes."""
    if encoding == "base64":
        return -(-(values * DTYPES[dtype].itemsize + indices * INDEX_DTYPE.itemsize) * 4 // 3)
    return values * JSON_VALUE_BYTES[dtype] + indices * JSON_INDEX_BYTES


def encode_array(a: np.ndarray, encoding: str):
    """json: the array itself (orjson writes it); base64: little-endian C-order bytes."""
    a = np.ascontiguousarray(a)
    if encoding == "base64":
        return base64.b64encode(a.tobytes()).decode("ascii")
    return a
