"""How the engine writes values into an answer: the dtypes it sends, base64 or the array itself
(`encode_array`); and the one reading of a client's index text (`ascii_index`). What they take
in bytes is the writer's to say (service.api.sizes). The bottom of the engine's imports: it
imports none of its modules."""

from __future__ import annotations

import base64

import numpy as np

DTYPES = {"float32": np.dtype("<f4"), "float16": np.dtype("<f2")}
INDEX_DTYPE = np.dtype("<i4")


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


def encode_array(a: np.ndarray, encoding: str):
    """json: the array itself (orjson writes it); base64: little-endian C-order bytes."""
    a = np.ascontiguousarray(a)
    if encoding == "base64":
        return base64.b64encode(a.tobytes()).decode("ascii")
    return a
