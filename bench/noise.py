"""How busy the machine was with other people's work while a cell ran: CPU time used by every
process that is not this benchmark (this process, its servers, wrk), in cores. The machine is
shared; this number says which repetitions a neighbour disturbed. Linux /proc only; elsewhere
it reports nothing."""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _busy_ticks() -> int | None:
    try:
        first = Path("/proc/stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in first[1:9])
    return user + nice + system + irq + softirq + steal


def _proc_ticks(pid: int | str) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
    return int(fields[11]) + int(fields[12])  # utime, stime


def _children_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


class ForeignLoad:
    """`with ForeignLoad(pids) as f: ...` then `f.cores`: others' CPU use in cores (nan if unknown)."""

    def __init__(self, pids: list[int] = ()):
        self.pids = list(pids)
        self.cores = float("nan")

    def _snap(self):
        return (_busy_ticks(), _proc_ticks("self"), sum(_proc_ticks(p) for p in self.pids),
                _children_seconds(), time.perf_counter())

    def __enter__(self):
        self._start = self._snap()
        return self

    def __exit__(self, *exc):
        end = self._snap()
        start = self._start
        if start[0] is None or end[0] is None:
            return False
        wall = end[4] - start[4]
        if wall <= 0:
            return False
        total = (end[0] - start[0]) / TICK
        ours = (end[1] - start[1] + end[2] - start[2]) / TICK + (end[3] - start[3])
        self.cores = max(0.0, total - ours) / wall
        return False


def wait_for_calm(pids: list[int], max_wait: float, below: float = 0.25, window: float = 0.5) -> float:
    """Wait (at most max_wait seconds) until others use fewer than `below` cores over a window;
    → the seconds waited. Bounded in time; returns at once when max_wait ≤ 0."""
    start = time.perf_counter()
    while time.perf_counter() - start < max_wait:
        with ForeignLoad(pids) as f:
            time.sleep(window)
        if not f.cores >= below:  # nan (unknown) counts as calm
            break
    return time.perf_counter() - start
