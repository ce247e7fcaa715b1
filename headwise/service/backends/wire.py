"""The messages between front-end processes and the engine process (process mode,
docs/architecture.md#process-mode): a msgpack header (msgspec) and then each array as a frame
of its own, its bytes as numpy holds them, so no float passes through Python one by one
(vLLM's `serial_utils.py` does the same).

A front-end sends `Hello` once (the engine answers `Welcome`: what it serves) and then `Run`s,
each answered by a `Result` or a `Failure` sent to the run's `reply_to`; `Ping` is answered
`Pong`. `Abort` names rows of a run whose clients have gone: a run not started yet runs without
them (their rows come back as zeros), and one with no row left is dropped unanswered.
"""

from __future__ import annotations

import functools
import os
import re

import msgspec
import numpy as np


class Array(msgspec.Struct, array_like=True):
    name: str
    dtype: str
    shape: tuple[int, ...]


class Hello(msgspec.Struct, tag="hello"):
    pass


class Ping(msgspec.Struct, tag="ping"):
    pass


class Run(msgspec.Struct, tag="run"):
    """One backend run: `role` of `model` on the arrays that follow, fetching `outputs`; its
    `Result` or `Failure` goes to `reply_to`, the sending thread's own socket."""

    seq: int
    reply_to: str
    model: str
    role: str
    outputs: list[str]
    arrays: list[Array]
    trace: list[str] = []  # traceparents of the batch spans the device run goes under (tracing on)


class Abort(msgspec.Struct, tag="abort"):
    """The clients of `rows` of run `seq` (sent by `reply_to`) have gone; None: all of them."""

    seq: int
    reply_to: str
    rows: list[int] | None = None


class ModelFacts(msgspec.Struct):
    provider: str
    precision: str
    variants: dict[str, str]  # role → package variant, as the engine's backend serves them


class Welcome(msgspec.Struct, tag="welcome"):
    """What the engine serves; `queue_table`: the file of the server's queue depths
    (backends.queues), each queue's row in `queues` ("model/role")."""

    pid: int
    models: dict[str, ModelFacts]
    queue_table: str = ""
    queues: dict[str, int] = {}


class Pong(msgspec.Struct, tag="pong"):
    pass


class Result(msgspec.Struct, tag="result"):
    seq: int
    arrays: list[Array]


class Failure(msgspec.Struct, tag="failure"):
    """A run that failed: `kind` "error" (the backend raised), "not_ready" (the engine is
    stopping) or "unknown" (no such model or role)."""

    seq: int
    kind: str
    message: str


Message = Hello | Ping | Run | Abort | Welcome | Pong | Result | Failure

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Message)


def encode(msg: Message, arrays: dict[str, np.ndarray] | None = None) -> list:
    """The frames of `msg`: its header, then each array's bytes (made C-contiguous)."""
    return [_encoder.encode(msg), *(np.ascontiguousarray(a).data for a in (arrays or {}).values())]


def specs(arrays: dict[str, np.ndarray]) -> list[Array]:
    return [Array(name, a.dtype.str, a.shape) for name, a in arrays.items()]


def decode(frames: list) -> tuple[Message, dict[str, np.ndarray]]:
    """The message and its arrays. Frames are bytes or zmq frames; arrays share their memory
    (read-only): a consumer that writes copies first."""
    msg = _decoder.decode(_buffer(frames[0]))
    listed = getattr(msg, "arrays", None) or []
    if len(listed) != len(frames) - 1:
        raise ValueError(f"{len(listed)} arrays announced, {len(frames) - 1} frames sent")
    return msg, {spec.name: np.frombuffer(_buffer(frame), dtype=_dtype(spec.dtype)).reshape(spec.shape)
                 for spec, frame in zip(listed, frames[1:], strict=True)}


_OWNER = re.compile(r"/[ra]-(\d+)-\d+\.sock$")


def answer_address(directory: str, kind: str, n: int) -> str:
    """Where a front-end thread (`kind` "r") or event loop ("a") binds the PULL its answers
    come to: its pid is in it, so that the engine can close the sockets of a front-end gone."""
    return f"ipc://{directory}/{kind}-{os.getpid()}-{n}.sock"


def owner(address: str) -> int | None:
    """The pid of the process an `answer_address` is of (None for another address)."""
    m = _OWNER.search(address)
    return int(m.group(1)) if m else None


def salvage(header) -> tuple[int, str] | None:
    """A `Run` header that `decode` refused (a front-end of another version, frames that do not
    match it): its seq and reply_to when they can be read, so that its sender is told."""
    try:
        raw = msgspec.msgpack.decode(_buffer(header))
    except Exception:
        return None
    if isinstance(raw, dict) and raw.get("type") == "run":
        seq, reply_to = raw.get("seq"), raw.get("reply_to")
        if isinstance(seq, int) and isinstance(reply_to, str):
            return seq, reply_to
    return None


@functools.cache
def _dtype(name: str) -> np.dtype:
    return np.dtype(name)


_PLAIN = (bytes, bytearray, memoryview)


def _buffer(frame):
    return frame if isinstance(frame, _PLAIN) else frame.buffer
