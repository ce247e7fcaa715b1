"""What the engine (service.backends.core) does with what goes wrong around a run: a run whose
host-side work fails, rows that do not line up, a message it cannot decode, an answer address
it cannot reach, more answer addresses than it keeps sockets for. Each is told to the run's
sender, where one can be, and the engine goes on serving."""

from __future__ import annotations

import os

import numpy as np
import pytest
import zmq

from headwise.service.backends import core as core_module
from headwise.service.backends import wire
from tests.fixtures.engine_core import OUTPUTS, feeds


def healthy(link) -> bool:
    return bool(np.isfinite(link.run("tiny", "embed", feeds(2, 5), OUTPUTS)["sentence_embedding"]).all())


def test_a_run_that_fails_on_the_host_fails_its_group_alone(engine):
    failures = iter([RuntimeError("a bug after the run")])

    def on_run(*_):
        if (e := next(failures, None)) is not None:
            raise e

    _core, link, _backend = engine(on_run=on_run)
    with pytest.raises(RuntimeError, match="a bug after the run"):
        link.run("tiny", "embed", feeds(1, 4), OUTPUTS)
    assert healthy(link)


def test_a_stacked_run_whose_rows_do_not_line_up_is_refused(engine):
    _core, link, backend = engine()
    bad = {**feeds(2, 5), "attention_mask": np.ones((3, 5), np.int64)}
    with pytest.raises(RuntimeError, match="rows on their first axis"):
        link.run("tiny", "embed", bad, OUTPUTS)
    with pytest.raises(RuntimeError, match="rows on their first axis"):
        link.run("tiny", "embed", {**feeds(2, 5), "token_type_ids": np.int64(0)}, OUTPUTS)
    assert backend.order == [] and healthy(link)


@pytest.fixture
def raw(engine, tmp_path):
    """→ (core, link, send, answer_socket): `send(run, arrays, frames=None)` from a DEALER of
    its own, and PULL sockets bound at addresses of the test's choosing."""
    core, link, _backend = engine()
    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(core.address)

    def send(run: wire.Run, arrays: dict, frames: list | None = None):
        dealer.send_multipart(frames if frames is not None else wire.encode(run, arrays))

    def answer_socket(name: str) -> tuple[str, zmq.Socket]:
        sock = ctx.socket(zmq.PULL)
        address = f"ipc://{tmp_path}/{name}.sock"
        sock.bind(address)
        return address, sock

    yield core, link, send, answer_socket
    ctx.destroy(linger=0)


def answer(sock: zmq.Socket):
    assert sock.poll(10_000), "no answer"
    return wire.decode(sock.recv_multipart())


def run_of(seq: int, reply_to: str, f: dict) -> wire.Run:
    return wire.Run(seq, reply_to, "tiny", "embed", OUTPUTS, wire.specs(f))


def test_a_run_it_cannot_decode_is_answered_where_its_answer_is_awaited(raw):
    _core, link, send, answer_socket = raw
    address, sock = answer_socket("a")
    f = feeds(1, 4)
    frames = wire.encode(run_of(3, address, f), f)
    send(None, None, frames[:-1])  # an array announced and not sent
    msg, _ = answer(sock)
    assert isinstance(msg, wire.Failure) and msg.seq == 3 and "undecodable" in msg.message
    send(None, None, [b""])  # no header at all: nobody to tell
    send(None, None, [b"\x93\x01", b"junk"])
    assert healthy(link)


def test_an_answer_address_it_cannot_reach_is_dropped_and_the_engine_goes_on(raw):
    _core, link, send, _answer_socket = raw
    f = feeds(1, 4)
    send(run_of(1, "not-an-endpoint", f), f)
    assert healthy(link)


def test_answer_sockets_beyond_the_limit_are_closed_oldest_first(raw, monkeypatch):
    core, link, send, answer_socket = raw
    monkeypatch.setattr(core_module, "MAX_REPLY_SOCKETS", 2)
    for i in range(5):  # front-ends that came and went, each with an address of its own
        address, sock = answer_socket(f"gone-{os.getpid()}-{i}")
        f = feeds(1 + i, 4, seed=i)
        send(run_of(i, address, f), f)
        msg, arrays = answer(sock)
        assert isinstance(msg, wire.Result) and msg.seq == i and arrays["sentence_embedding"].shape[0] == 1 + i
    assert healthy(link)
    assert len(core._replies) == 2  # the link's socket and the last one
