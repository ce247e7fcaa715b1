"""What an answer takes in JSON, the format every route but KServe's binary outputs writes: the
price of each thing the engine counts (service.engine.size.Size), and the one refusal of an
answer over HEADWISE_MAX_RESPONSE_BYTES. The engine is given `JSON` at start-up and asks it
before any inference is spent; routers price what they add around the engine's answer."""

from __future__ import annotations

from headwise.service.engine.size import Block, Size
from headwise.service.engine.values import DTYPES, INDEX_DTYPE
from headwise.service.errors import TooLarge

# The most one value takes in the JSON orjson writes, its comma included ("-1.2345678e-5,"), so
# that a check holds for the bytes really built. orjson writes a float16 with its float32
# digits ("-0.000011980534,"): no shorter than a float32.
JSON_VALUE_BYTES = {"float32": 16, "float16": 16}
VALUE_BYTES = JSON_VALUE_BYTES["float32"]  # a score's or an embedding's value
JSON_INDEX_BYTES = 6  # an int32 below 100,000 and its comma
TOKEN_BYTES = 48  # one token's string and [start, end] offsets, generously
CHAR_BYTES = 6  # the most one character of a text takes (a \u00XX escape)
LABEL_BYTES = 32  # one {"label": ..., "score": ...} beyond its label's characters and its score
RECORD_BYTES = 64  # one small keyed object's keys and separators, generously
TEXT_ITEM_BYTES = 16  # an echoed text's key, quotes and separators
ENVELOPE_BYTES = 64  # a native answer's own keys around what the engine counted


def written_bytes(values: int, dtype: str, encoding: str, indices: int = 0) -> int:
    """Bytes `values` of `dtype` (and top-k's int32 `indices`) take: JSON numbers, or base64 of
    the raw bytes."""
    if encoding == "base64":
        return -(-(values * DTYPES[dtype].itemsize + indices * INDEX_DTYPE.itemsize) * 4 // 3)
    return values * JSON_VALUE_BYTES[dtype] + indices * JSON_INDEX_BYTES


def block_bytes(b: Block) -> int:
    """A block's values, and for a framed one its `{"shape": [..], "data": ..}` and brackets."""
    frame = 32 + 2 * (b.rows + 1) if b.rows else 0
    return written_bytes(b.values, b.dtype, b.encoding, b.indices) + frame


def echoed_bytes(texts: list[str], n: int | None = None) -> int:
    """A bound of the JSON bytes of echoing back `n` of `texts` (all when None), whichever n they
    turn out to be (the n longest), every character escaped at worst. Known before inference."""
    sizes = sorted((len(t) for t in texts), reverse=True)[:n]
    return sum(CHAR_BYTES * k + TEXT_ITEM_BYTES for k in sizes)


def check_response_bytes(size: int, cap: int, advice: str) -> None:
    """The one refusal of an answer whose bound, `size` bytes as written, is over
    HEADWISE_MAX_RESPONSE_BYTES (`cap`); `advice`: what the client may ask for instead."""
    if size > cap:
        raise TooLarge(f"the response asked for takes up to {size} bytes, over HEADWISE_MAX_RESPONSE_BYTES "
                       f"({cap}); {advice}")


def json_bytes(size: Size, cap: int | None = None, advice: str = "") -> int:
    """What an answer of `size` takes in JSON, at most; with `cap`, refused over it (one
    function for both: the engine asks once per request, before inference)."""
    n = (size.values * VALUE_BYTES + size.indices * JSON_INDEX_BYTES + size.tokens * TOKEN_BYTES
         + size.chars * CHAR_BYTES + size.labels * LABEL_BYTES + size.records * RECORD_BYTES)
    for b in size.blocks:
        n += block_bytes(b)
    if cap is not None and n > cap:
        check_response_bytes(n, cap, advice)
    return n


class JsonMeasure:
    """service.engine.size.Measure for JSON answers."""

    bytes = staticmethod(json_bytes)
    check = staticmethod(json_bytes)


JSON = JsonMeasure()
