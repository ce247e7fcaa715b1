"""service/serialize.py: a large answer written in pieces is the same JSON as in one call."""

import numpy as np
import orjson

from service.api.serialize import DUMPS, PIECE_BYTES, dumps_in_pieces


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
