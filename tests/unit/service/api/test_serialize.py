"""headwise/service/serialize.py: a large answer written in pieces is the same JSON as in one call."""

import numpy as np
import orjson

from headwise.service.api.serialize import CHUNK_BYTES, DUMPS, PIECE_BYTES, dumps_chunks


def dumps_in_pieces(payload) -> bytes:
    return b"".join(dumps_chunks(payload))


def test_pieces_make_the_same_bytes_as_one_call():
    rng = np.random.default_rng(0)
    payload = {
        "model": "m",
        "data": [{"index": 0, "embedding": rng.normal(size=(300, 384)).astype(np.float32),
                  "attention": {"data": rng.random((2, 3, 70, 70)).astype(np.float16), "shape": [2, 3, 70, 70]}},
                 {"index": 1, "embedding": rng.normal(size=384).astype(np.float32), "tokens": ["a", "b"]},
                 {"index": 2, "embedding": np.zeros((0, 384), np.float32)}],
        "usage": {"prompt_tokens": 3},
    }
    assert payload["data"][0]["embedding"].nbytes > PIECE_BYTES
    assert dumps_in_pieces(payload) == orjson.dumps(payload, option=DUMPS)
    sliced = rng.normal(size=(64, 400)).astype(np.float32)[:, :300]  # not contiguous
    assert dumps_in_pieces({"a": sliced}) == orjson.dumps({"a": np.ascontiguousarray(sliced)}, option=DUMPS)


def test_chunks_join_to_one_call_and_none_is_over_the_chunk_size():
    rng = np.random.default_rng(1)
    payload = {"model": "m\u0000x", "data": [{"index": i, "contributions": rng.random((256, 256)).astype(np.float32),
                                            "tokens": ["[CLS]", "a\u0000"]} for i in range(12)],
               "small": np.arange(3, dtype=np.float32), "text": "x" * (3 * CHUNK_BYTES)}
    chunks = dumps_chunks(payload)
    assert len(chunks) > 1 and max(map(len, chunks)) <= CHUNK_BYTES
    assert b"".join(chunks) == orjson.dumps(payload, option=DUMPS)
    assert dumps_chunks({"a": 1}) == [b'{"a":1}'] and dumps_chunks([]) == [b"[]"]
