"""ExitSignals: a SIGTERM that comes before uvicorn's own handlers are in place (while a
front-end or the in-process server makes its app) is kept, and the server never starts: a
no-op handler there lost it, and the process went on to serve until the supervisor killed it.
One that comes after uvicorn has drained (its re-raise) is a quiet no-op."""

from __future__ import annotations

import os
import signal

import pytest

from headwise.service.server.serve import ExitSignals


class FakeServer:
    def __init__(self, signal_while_starting: bool = False):
        self.should_exit, self.ran, self.signal_while_starting = False, False, signal_while_starting

    def run(self, sockets=None):
        self.ran = True
        if self.signal_while_starting:  # before uvicorn's capture_signals: ours still see it
            os.kill(os.getpid(), signal.SIGTERM)


@pytest.fixture
def handlers():
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    yield
    for s, h in saved.items():
        signal.signal(s, h)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_while_the_app_is_made_keeps_the_server_from_starting(handlers, sig):
    signals = ExitSignals()
    os.kill(os.getpid(), sig)  # the process goes on: the handler only keeps it
    server = FakeServer()
    signals.run(server)
    assert signals.got and not server.ran


def test_a_signal_just_before_uvicorns_handlers_stops_the_started_server(handlers):
    signals = ExitSignals()
    server = FakeServer(signal_while_starting=True)
    signals.run(server)
    assert server.ran and server.should_exit


def test_without_a_signal_the_server_runs_and_a_late_one_is_quiet(handlers):
    signals = ExitSignals()
    server = FakeServer()
    signals.run(server)
    assert server.ran and not server.should_exit and not signals.got
    os.kill(os.getpid(), signal.SIGTERM)  # uvicorn's re-raise after draining: no exit, no traceback
    assert signals.got
