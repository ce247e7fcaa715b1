"""The supervisor's reading of its children's exit codes at a stop, its listening sockets, and
its verdict on a silent front-end (process mode)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys

import pytest

from headwise.service.server.supervisor import (
    _hung,
    _listen,
    _soon,
    _stop,
    _stuck_starting,
    stopped_cleanly,
)
from headwise.service.settings import Settings


def _child(code: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout.readline() == b"up\n"  # its handlers, if any, are installed
    return proc


def test_a_child_killed_by_the_sigterm_before_its_handlers_counts_as_stopped_cleanly():
    starting = _child("import time; print('up', flush=True); time.sleep(60)")
    drained = _child("import signal, sys, time\n"
                     "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0)); print('up', flush=True); time.sleep(60)")
    failed = _child("import signal, sys, time\n"
                    "signal.signal(signal.SIGTERM, lambda *_: sys.exit(3)); print('up', flush=True); time.sleep(60)")
    codes = _stop([starting, drained, failed], timeout=30)
    assert codes == [-signal.SIGTERM, 0, 3]
    assert [stopped_cleanly(c) for c in codes] == [True, True, False]


def test_a_child_killed_past_the_grace_period_did_not_stop_cleanly():
    stuck = _child("import signal, time\n"
                   "signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)")
    (code,) = _stop([stuck], timeout=0.2)
    assert code == -signal.SIGKILL and not stopped_cleanly(code)


def test_a_front_end_silent_over_the_stall_limit_is_killed_and_one_within_it_is_not():
    quiet = _child("import time; print('up', flush=True); time.sleep(60)")
    try:
        assert not _hung(quiet, silent_s=0.0, stall_s=10.0)  # not watched (starting or draining)
        assert not _hung(quiet, silent_s=9.0, stall_s=10.0)
        assert not _hung(quiet, silent_s=600.0, stall_s=0.0)  # 0: never
        assert quiet.poll() is None
        assert _hung(quiet, silent_s=11.0, stall_s=10.0)  # SIGKILL; the supervisor's loop does not wait
        assert quiet.wait(30) == -signal.SIGKILL
    finally:
        if quiet.poll() is None:
            quiet.kill()


def test_a_front_end_not_serving_past_the_start_limit_is_killed_and_one_within_it_is_not():
    starting = _child("import time; print('up', flush=True); time.sleep(60)")
    try:
        assert not _stuck_starting(starting, starting_s=59.0, start_s=60.0)
        assert not _stuck_starting(starting, starting_s=3600.0, start_s=0.0)  # 0: never
        assert starting.poll() is None
        assert _stuck_starting(starting, starting_s=61.0, start_s=60.0)
        assert starting.wait(30) == -signal.SIGKILL
    finally:
        if starting.poll() is None:
            starting.kill()


def test_a_crash_soon_after_its_start_or_a_hang_soon_after_it_served_counts_toward_the_stop():
    stall = 10.0
    assert _soon(now=105.0, started=100.0, serving=None, hung=False, stall_s=stall)
    assert not _soon(now=115.0, started=100.0, serving=102.0, hung=False, stall_s=stall)
    # a hang is seen stall_s after the loop fell silent: counted from its first beat
    assert _soon(now=118.0, started=100.0, serving=103.0, hung=True, stall_s=stall)
    assert not _soon(now=3600.0, started=100.0, serving=103.0, hung=True, stall_s=stall)
    # stuck starting (killed before it ever served): however long the start limit was
    assert _soon(now=3600.0, started=100.0, serving=None, hung=True, stall_s=stall)


SPREADS = sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")


@pytest.mark.skipif(not SPREADS, reason="SO_REUSEPORT spreads TCP connections on Linux only")
def test_each_front_end_gets_its_own_socket_on_the_one_port():
    """With port 0 the others join the port the first was given; each reuses the port and
    listens from the start, so the kernel spreads connections over them, a front-end still
    starting included (its share waits in its queue)."""
    socks = _listen(Settings(host="127.0.0.1", port=0), 3)
    clients = []
    try:
        assert len({s.fileno() for s in socks}) == 3
        assert len({s.getsockname() for s in socks}) == 1
        assert all(s.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) for s in socks)
        assert all(s.get_inheritable() for s in socks)
        assert all(s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) for s in socks)
        clients = [socket.create_connection(socks[0].getsockname(), timeout=5) for _ in range(30)]
        queued = []
        for s in socks:
            s.setblocking(False)
            while True:
                try:
                    queued.append(s.accept()[0])
                except BlockingIOError:
                    break
            assert queued, "a socket got none of 30 connections"  # 3 × (2/3)^30 ≈ 1e-5
        assert len(queued) == 30
        for c in queued:
            c.close()
    finally:
        for c in clients:
            c.close()
        for s in socks:
            s.close()


def test_one_front_end_listens_on_a_plain_socket():
    (sock,) = _listen(Settings(host="127.0.0.1", port=0), 1)
    try:
        assert sock.getsockname()[1] != 0
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)  # connections queue while it starts
        if hasattr(socket, "SO_REUSEPORT"):
            assert not sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT)
    finally:
        sock.close()


@pytest.mark.parametrize("reuse", [False, True])
def test_a_port_something_listens_on_is_refused_and_nothing_is_left_open(reuse):
    """Another program's socket on the port, or another server's group (the same user: it could
    join with SO_REUSEPORT and take a share of the connections): refused, OSError, which the
    supervisor reports as exit 2; no socket of ours stays bound."""
    other = socket.socket()
    if reuse:
        if not SPREADS:
            pytest.skip("SO_REUSEPORT spreads TCP connections on Linux only")
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    other.bind(("127.0.0.1", 0))
    other.listen()
    port = other.getsockname()[1]
    try:
        with pytest.raises(OSError):
            _listen(Settings(host="127.0.0.1", port=port), 2)
    finally:
        other.close()
    for s in _listen(Settings(host="127.0.0.1", port=port), 2):  # free again: nothing of ours held it
        s.close()
