"""JSON bodies of large answers, written in pieces so that the event loop keeps running.

orjson holds the GIL for the whole of one call, so one large array written in one call stalls
every other request, the event loop's included, even from a worker thread; so does putting a
large body together into one bytes object. Here arrays over PIECE_BYTES are written one
leading row at a time, the rest of the payload in one call with a marker where each such
array goes, and the body is kept as a list of chunks of at most CHUNK_BYTES that are sent one
after another: no call copies more than a chunk. Joined, the chunks are the bytes of one
orjson call.
"""

from __future__ import annotations

import numpy as np
import orjson

DUMPS = orjson.OPT_SERIALIZE_NUMPY
PIECE_BYTES = 1 << 16  # of array data per orjson call: well under a millisecond of writing
CHUNK_BYTES = 1 << 20  # the most one chunk of a body holds (one copy of it under the GIL)
MARK = b"\x00"  # orjson never writes a raw NUL: around an index, where a large array goes


def dumps_chunks(payload) -> list[bytes]:
    """The JSON of `payload` as chunks of at most CHUNK_BYTES (one, when it is small)."""
    arrays: list[np.ndarray] = []
    skeleton = orjson.dumps(_marked(payload, arrays), option=DUMPS)
    if not arrays:
        return _coalesce([skeleton])
    parts = skeleton.split(MARK)  # text, index, text, index, ..., text
    pieces: list[bytes] = []
    for i, part in enumerate(parts):
        if i % 2:
            pieces.extend(_array(arrays[int(part)]))
        elif part:
            pieces.append(part)
    return _coalesce(pieces)


def _marked(obj, arrays: list):
    if isinstance(obj, np.ndarray) and obj.nbytes > PIECE_BYTES:
        arrays.append(obj)
        return orjson.Fragment(MARK + str(len(arrays) - 1).encode() + MARK)
    if isinstance(obj, dict):
        return {k: _marked(v, arrays) for k, v in obj.items()}
    if isinstance(obj, list):
        if not any(isinstance(v, (dict, list, np.ndarray)) for v in obj):  # e.g. token strings: as they are
            return obj
        return [_marked(v, arrays) for v in obj]
    return obj


def _array(a: np.ndarray) -> list[bytes]:
    """`a` as JSON pieces, each one orjson call over at most about PIECE_BYTES of data."""
    if a.nbytes <= PIECE_BYTES or a.ndim == 1:
        return [orjson.dumps(np.ascontiguousarray(a), option=DUMPS)]
    out = [b"["]
    for i, row in enumerate(a):
        if i:
            out.append(b",")
        out.extend(_array(row))
    out.append(b"]")
    return out


def _coalesce(pieces: list[bytes]) -> list[bytes]:
    """Runs of small pieces joined, and large ones cut, into chunks of at most CHUNK_BYTES."""
    chunks: list[bytes] = []
    run: list[bytes] = []
    size = 0
    for p in pieces:
        if size + len(p) > CHUNK_BYTES and run:
            chunks.append(b"".join(run))
            run, size = [], 0
        if len(p) > CHUNK_BYTES:
            chunks.extend(p[at:at + CHUNK_BYTES] for at in range(0, len(p), CHUNK_BYTES))
            continue
        run.append(p)
        size += len(p)
    if run or not chunks:
        chunks.append(b"".join(run))
    return chunks
