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


def test_the_answer_sockets_of_front_ends_that_have_gone_are_closed(raw, monkeypatch, tmp_path):
    """A restarted front-end binds new answer addresses (its pid is in them): the engine closes
    the sockets of pids that no longer run, once SWEEP_EVERY more are open than after its last
    look, where it kept them all and ran out of ZMQ's 1023 sockets."""
    import subprocess

    core, link, send, answer_socket = raw
    gone = subprocess.Popen(["true"])
    gone.wait()
    monkeypatch.setattr(core_module, "SWEEP_EVERY", 2)
    core._sweep_at = 2
    addresses = [answer_socket(f"r-{os.getpid()}-90")] + [answer_socket(f"r-{gone.pid}-{i}") for i in range(4)]
    for seq, (address, sock) in enumerate(addresses):
        f = feeds(1 + seq, 4, seed=seq)
        send(run_of(seq, address, f), f)
        msg, arrays = answer(sock)  # every answer comes, the sweeps notwithstanding
        assert isinstance(msg, wire.Result) and msg.seq == seq and arrays["sentence_embedding"].shape[0] == 1 + seq
    assert set(core._replies) == {addresses[0][0], addresses[-1][0]}  # the live one, and the last one made
    assert wire.owner(addresses[1][0]) == gone.pid and wire.owner(core.address) is None
    assert healthy(link)
