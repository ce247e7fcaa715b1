"""Metric values with several processes (process mode, several workers): changes kept in memory
and written to this process's multiprocess files together, at most FLUSH_S after a change, at
every scrape this process answers, and at exit.

prometheus-client's multiprocess value writes its file at every change, under a lock: a front-end
makes about a dozen changes per request (in-flight requests, queue depth, response bytes, the
request's counter and histograms), each a lock, a struct pack and an mmap write. Here a change
is a float in memory; the writes follow, one per value that changed, from a thread of their own.
What a scrape of another process sees is at most FLUSH_S old, as if scraped FLUSH_S earlier;
a process killed at once (SIGKILL) loses at most FLUSH_S of its changes.

Only the public methods of the class `prometheus_client.values.MultiProcessValue` returns are
used (`inc`, `set`, `get`), so the files, their names and the fork handling stay prometheus-client's.
"""

from __future__ import annotations

import atexit
import os
import threading
import time

FLUSH_S = 0.05

_lock = threading.Lock()  # the values in memory and the list of those to write
_flushing = threading.Lock()  # one flush at a time, so that an older value never follows a newer one
_pending: list = []
_values: list = []  # every deferred value, to reset in a forked child
_wake = threading.Event()
_thread: threading.Thread | None = None


def deferred(base: type) -> type:
    """`base` (a MultiProcessValue class), its changes written by `flush`."""

    class DeferredValue(base):
        _multiprocess = True

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._now = super().get()  # what the file holds (a value of a process before a restart)
            self._dirty, self._stamp = False, None
            with _lock:
                _values.append(self)

        def inc(self, amount):
            with _lock:
                self._now += amount
                if not self._dirty:
                    _mark(self)

        def set(self, value, timestamp=None):
            with _lock:
                self._now, self._stamp = value, timestamp
                if not self._dirty:
                    _mark(self)

        def get(self):
            return self._now

        def _write(self, value, stamp) -> None:
            base.set(self, value, stamp)  # the time a `mostrecent` gauge keeps

    return DeferredValue


def _mark(value) -> None:
    """Under _lock: `value` changed since it was last written."""
    value._dirty = True
    _pending.append(value)
    if len(_pending) == 1:
        _start()
        _wake.set()


def flush() -> None:
    """Write every value changed since the last flush."""
    global _pending
    with _flushing:
        with _lock:
            todo, _pending = _pending, []
            now = [(v, v._now, v._stamp) for v in todo]
            for v in todo:
                v._dirty = False
        for v, x, stamp in now:
            v._write(x, stamp)


def _start() -> None:
    global _thread
    if _thread is None:
        _thread = threading.Thread(target=_run, name="headwise-metric-writes", daemon=True)
        _thread.start()


def _run() -> None:
    while True:
        _wake.wait()
        _wake.clear()
        time.sleep(FLUSH_S)  # the changes of the next FLUSH_S go out together
        flush()


def _forked() -> None:
    """In a forked child: the parent's changes are the parent's to write; the child's values
    start from its own files (prometheus-client's own reset on its next write), i.e. from 0."""
    global _lock, _flushing, _pending, _thread, _wake
    _lock, _flushing, _wake, _thread = threading.Lock(), threading.Lock(), threading.Event(), None
    _pending = []
    for v in _values:
        v._now, v._dirty = 0.0, False


def _before_fork() -> None:
    """No fork while a flush writes: prometheus-client's own lock would stay held in the child."""
    _flushing.acquire()
    _lock.acquire()


def _after_fork_in_parent() -> None:
    _lock.release()
    _flushing.release()


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_forked)
atexit.register(flush)
