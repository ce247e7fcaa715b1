"""The supervisor's reading of its children's exit codes at a stop (process mode)."""

from __future__ import annotations

import signal
import subprocess
import sys

from headwise.service.server.supervisor import _stop, stopped_cleanly


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
