"""JSON bodies of large answers, written in pieces so that the event loop keeps running.

orjson holds the GIL for the whole of one call, so one large array written in one call stalls
every other request, the event loop's included, even from a worker thread. Here arrays over
PIECE_BYTES are written one leading row at a time and put back together with
`orjson.Fragment`; between two pieces the thread lets the others run. Same bytes as one call.
"""

from __future__ import annotations

import numpy as np
import orjson

DUMPS = orjson.OPT_SERIALIZE_NUMPY
PIECE_BYTES = 1 << 16  # of array data per orjson call: well under a millisecond of writing


def dumps_in_pieces(payload) -> bytes:
    return orjson.dumps(_pieces(payload), option=DUMPS)


def _pieces(obj):
    if isinstance(obj, np.ndarray) and obj.nbytes > PIECE_BYTES:
        return orjson.Fragment(_array(obj))
    if isinstance(obj, dict):
        return {k: _pieces(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_pieces(v) for v in obj]
    return obj


def _array(a: np.ndarray) -> bytes:
    if a.nbytes <= PIECE_BYTES or a.ndim == 1:
        return orjson.dumps(np.ascontiguousarray(a), option=DUMPS)
    return b"[" + b",".join(_array(row) for row in a) + b"]"
