"""KServe v2 / Open Inference Protocol tensors: JSON `data` (flat or nested, row-major) and
Triton's binary tensor data extension: the JSON header, then each binary tensor's raw
little-endian bytes in tensor order; the header's length travels in the
Inference-Header-Content-Length HTTP header. A BYTES element is a 4-byte little-endian
length and then its bytes.

Mistakes raise service.errors.InvalidRequest (400): they are the client's. The answers'
writers are in service.api.compat.kserve.
"""

from __future__ import annotations

import math
import struct

import numpy as np
import orjson

from headwise.service.errors import InvalidRequest

HEADER = "inference-header-content-length"
DTYPES = {
    "BOOL": np.dtype("?"), "UINT8": np.dtype("<u1"), "UINT16": np.dtype("<u2"),
    "UINT32": np.dtype("<u4"), "UINT64": np.dtype("<u8"), "INT8": np.dtype("<i1"),
    "INT16": np.dtype("<i2"), "INT32": np.dtype("<i4"), "INT64": np.dtype("<i8"),
    "FP16": np.dtype("<f2"), "FP32": np.dtype("<f4"), "FP64": np.dtype("<f8"),
}
DATATYPES = (*DTYPES, "BYTES")
_NAMES = {v: k for k, v in DTYPES.items()}
_LEN = struct.Struct("<I")
MAX_DEPTH = 32  # nested `data` deeper than any tensor we take is a mistake, not a tensor


def split_body(body: bytes, header_length: str | None) -> tuple[dict, memoryview]:
    """→ (JSON header, the binary part after it)."""
    n = len(body)
    if header_length is not None:
        digits = header_length.strip()
        if not (digits.isascii() and digits.isdigit()) or len(digits.lstrip("0")) > 19:
            raise InvalidRequest("Inference-Header-Content-Length must be an integer")
        n = int(digits)  # plain ASCII digits: not int()'s "+5", "1_0" or a 5,000-digit string's ValueError
        if n < 0 or n > len(body):
            raise InvalidRequest(f"Inference-Header-Content-Length is {n} but the body has {len(body)} bytes")
    try:
        header = orjson.loads(memoryview(body)[:n])
    except orjson.JSONDecodeError:
        raise InvalidRequest("malformed JSON in the inference request header") from None
    if not isinstance(header, dict):
        raise InvalidRequest("the inference request must be a JSON object")
    return header, memoryview(body)[n:]


def encode_bytes(items) -> bytes:
    """BYTES elements (bytes or str) → length-prefixed binary."""
    parts = []
    for s in items:
        b = s.encode() if isinstance(s, str) else bytes(s)
        parts += (_LEN.pack(len(b)), b)
    return b"".join(parts)


def decode_bytes(buf, count: int, what: str = "tensor") -> list[bytes]:
    """Exactly `count` length-prefixed elements filling `buf` → their bytes."""
    buf = memoryview(buf)
    out, at = [], 0
    for i in range(count):
        if at + 4 > len(buf):
            raise InvalidRequest(f"{what}: binary data ends before element {i} of {count}")
        (size,) = _LEN.unpack_from(buf, at)
        at += 4
        if at + size > len(buf):
            raise InvalidRequest(f"{what}: element {i} says {size} bytes but the data ends sooner")
        out.append(bytes(buf[at:at + size]))
        at += size
    if at != len(buf):
        raise InvalidRequest(f"{what}: {len(buf) - at} bytes left over after {count} elements")
    return out


def _flatten(data, depth: int = 0) -> list:
    if depth > MAX_DEPTH:
        raise InvalidRequest("'data' is nested too deeply")
    if not isinstance(data, list):
        return [data]
    if data and not any(isinstance(x, list) for x in data):
        return data
    out = []
    for x in data:
        out += _flatten(x, depth + 1)
    return out


def _shape(tensor: dict, what: str) -> list[int]:
    shape = tensor.get("shape")
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        raise InvalidRequest(f"{what}: 'shape' must be a list of non-negative integers")
    return shape


def _json_elements(flat: list, datatype: str, what: str) -> list | np.ndarray:
    if datatype == "BYTES":
        if not all(isinstance(x, str) for x in flat):
            raise InvalidRequest(f"{what}: BYTES data in JSON must be strings")
        return [x.encode() for x in flat]
    if datatype == "BOOL":
        ok = all(type(x) is bool for x in flat)
    elif datatype.startswith(("INT", "UINT")):
        ok = all(type(x) is int for x in flat)
    else:
        ok = all(type(x) in (int, float) for x in flat)
    if not ok:
        raise InvalidRequest(f"{what}: data elements do not match datatype {datatype}")
    try:
        return np.array(flat, dtype=DTYPES[datatype])
    except OverflowError:
        raise InvalidRequest(f"{what}: a data element is out of range for {datatype}") from None


def read_input(tensor, binary: memoryview, offset: int) -> tuple[str, str, list[int], list | np.ndarray, int]:
    """One request input → (name, datatype, shape, elements, offset after its binary data).
    Elements: a list of bytes for BYTES, else a numpy array in `shape`."""
    if not isinstance(tensor, dict) or not isinstance(tensor.get("name"), str):
        raise InvalidRequest("each input must be an object with a 'name'")
    name = tensor["name"]
    what = f"input '{name}'"
    datatype = tensor.get("datatype")
    if datatype not in DATATYPES:
        raise InvalidRequest(f"{what}: unknown datatype; one of {', '.join(DATATYPES)}")
    shape = _shape(tensor, what)
    count = math.prod(shape)
    params = tensor.get("parameters") or {}
    if not isinstance(params, dict):
        raise InvalidRequest(f"{what}: 'parameters' must be an object")
    if "shared_memory_region" in params:
        raise InvalidRequest(f"{what}: the shared-memory extension is not supported")
    size = params.get("binary_data_size")
    if size is not None:
        if type(size) is not int or size < 0:
            raise InvalidRequest(f"{what}: binary_data_size must be a non-negative integer")
        if offset + size > len(binary):
            raise InvalidRequest(f"{what}: binary_data_size {size} runs past the end of the body")
        chunk = binary[offset:offset + size]
        offset += size
        if datatype == "BYTES":
            return name, datatype, shape, decode_bytes(chunk, count, what), offset
        dtype = DTYPES[datatype]
        if size != count * dtype.itemsize:
            raise InvalidRequest(f"{what}: shape {shape} of {datatype} needs {count * dtype.itemsize} "
                                 f"bytes, binary_data_size is {size}")
        return name, datatype, shape, np.frombuffer(chunk, dtype=dtype).reshape(shape), offset
    if "data" not in tensor:
        raise InvalidRequest(f"{what}: no 'data' and no binary_data_size")
    flat = _flatten(tensor["data"])
    if len(flat) != count:
        raise InvalidRequest(f"{what}: shape {shape} holds {count} elements, 'data' has {len(flat)}")
    elems = _json_elements(flat, datatype, what)
    if isinstance(elems, np.ndarray):
        elems = elems.reshape(shape)
    return name, datatype, shape, elems, offset


def text_inputs(header: dict, binary: memoryview, names: tuple[str, ...], takes: str) -> dict[str, list[str]]:
    """The request's BYTES text inputs, each `[N]` (or `[N, 1]`), by name: only `names`, each at
    most once, the first of them required; `takes` says what the model takes, for messages."""
    inputs = header.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        raise InvalidRequest("'inputs' must be a non-empty list")
    out: dict[str, list[str]] = {}
    offset = 0
    for tensor in inputs:
        name = _named(tensor, names, out, "unexpected input {name!r}; this model takes " + takes.replace("{", "{{")
                      .replace("}", "}}"), "input '{name}' is given more than once")
        if tensor.get("datatype") != "BYTES":
            raise InvalidRequest(f"input '{name}' must have datatype BYTES")
        _, _, shape, elems, offset = read_input(tensor, binary, offset)
        if len(shape) not in (1, 2) or (len(shape) == 2 and shape[1] != 1):
            raise InvalidRequest(f"input '{name}' must have shape [N] (or [N, 1]), not {shape}")
        try:
            out[name] = [b.decode() for b in elems]
        except UnicodeDecodeError:
            raise InvalidRequest(f"input '{name}' holds bytes that are not UTF-8") from None
    if offset != len(binary):
        raise InvalidRequest(f"{len(binary) - offset} bytes after the inputs' binary data")
    first = names[0]
    if not out.get(first):
        raise InvalidRequest(f"input '{first}' is empty" if first in out else f"input '{first}' is missing")
    return out


def _named(tensor, names, seen: dict, unknown: str, twice: str) -> str:
    """A requested tensor's name: one of `names`, not in `seen` yet (else the message, given
    the name)."""
    name = tensor.get("name") if isinstance(tensor, dict) else None
    if name not in names:  # shown as a short string: repr() of a deeply nested list raised RecursionError
        raise InvalidRequest(unknown.format(name=_Shown(name)))
    if name in seen:
        raise InvalidRequest(twice.format(name=_Shown(name)))
    return name


class _Shown:
    """A client's tensor name in a message: a string's repr, cut to 40 characters; another
    value by its type alone."""

    def __init__(self, value):
        self.value = value

    def __repr__(self) -> str:
        v = self.value
        if isinstance(v, str):
            return repr(v if len(v) <= 40 else v[:40] + "…")
        return "None" if v is None else f"(a {type(v).__name__})"


def requested_outputs(header: dict, names: list[str] | tuple[str, ...], default: str) -> dict[str, dict]:
    """The request's `outputs` → {name: its parameters}, in the requested order: each a name
    of `names`, at most once, its parameters an object without shared memory; `default`
    alone when the request names none."""
    asked = header.get("outputs")
    if asked is None:
        return {default: {}}
    if not isinstance(asked, list) or not asked:
        raise InvalidRequest("'outputs' must be a non-empty list when given")
    out: dict[str, dict] = {}
    for o in asked:
        name = _named(o, names, out, "unknown output {name!r}; this model has " + ", ".join(names),
                      "output {name!r} is asked for more than once")
        params = o.get("parameters") or {}
        if not isinstance(params, dict):
            raise InvalidRequest(f"output {name!r}: 'parameters' must be an object")
        if "shared_memory_region" in params:
            raise InvalidRequest("the shared-memory extension is not supported")
        out[name] = params
    return out


def plain_outputs(header: dict, names: list[str] | tuple[str, ...], defaults: tuple[str, ...],
                  binary_default: bool) -> dict[str, bool]:
    """The request's outputs of a model without the classification extension → {name: as
    binary?}, in the requested order; `defaults` when the request names none."""
    if header.get("outputs") is None:
        return dict.fromkeys(defaults, binary_default)
    out = {}
    for name, params in requested_outputs(header, names, defaults[0]).items():
        if params.get("classification"):
            raise InvalidRequest(f"output {name!r}: the classification extension is for classification models' "
                                 "outputs (logits, scores)")
        out[name] = flag(params, "binary_data", binary_default)
    return out


def flag(params: dict, key: str, default: bool) -> bool:
    """A boolean request or output parameter; anything but a JSON boolean is a mistake."""
    v = params.get(key, default)
    if type(v) is not bool:
        raise InvalidRequest(f"parameter {key} must be a boolean")
    return v


def datatype_of(array: np.ndarray) -> str:
    return _NAMES[array.dtype.newbyteorder("<") if array.dtype.byteorder == ">" else array.dtype]


def output(name: str, datatype: str, array: np.ndarray, binary: bool) -> tuple[dict, bytes | None]:
    """One response output → (its JSON object, its raw bytes when binary)."""
    out = {"name": name, "datatype": datatype, "shape": list(array.shape)}
    if binary:
        raw = np.ascontiguousarray(array, dtype=DTYPES[datatype]).tobytes()
        out["parameters"] = {"binary_data_size": len(raw)}
        return out, raw
    out["data"] = np.ascontiguousarray(array, dtype=DTYPES[datatype]).reshape(-1)
    return out, None


def bytes_output(name: str, shape: list[int], items: list[str], binary: bool) -> tuple[dict, bytes | None]:
    """A BYTES response output of strings (row-major in `shape`) → (its JSON object, its raw
    length-prefixed bytes when binary)."""
    out = {"name": name, "datatype": "BYTES", "shape": list(shape)}
    if binary:
        raw = encode_bytes(items)
        out["parameters"] = {"binary_data_size": len(raw)}
        return out, raw
    out["data"] = items
    return out, None


def encode_response(header: dict, buffers: list[bytes]) -> tuple[bytes, int | None]:
    """→ (body, JSON header length when binary buffers follow it, else None)."""
    head = orjson.dumps(header, option=orjson.OPT_SERIALIZE_NUMPY)
    if not buffers:
        return head, None
    return b"".join((head, *buffers)), len(head)
