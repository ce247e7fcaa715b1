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


def proc_ticks(pid: int | str) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
    return int(fields[11]) + int(fields[12])  # utime, stime


def _children_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _group_members(pgids: list[int]) -> list[int]:
    """Every process in these process groups: a server started in its own session and the
    workers it forks (uvicorn --workers) all count as ours."""
    if not pgids:
        return []
    want, out = set(pgids), []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[2]) in want:  # pgrp
            out.append(int(d.name))
    return out


def group_ticks(pgids: list[int]) -> dict[int, int]:
    """CPU ticks (user + system) of every process in these process groups, by pid."""
    return {p: proc_ticks(p) for p in _group_members(pgids)}


def ticks_since(before: dict[int, int], after: dict[int, int]) -> int:
    """Ticks used between two `group_ticks` snapshots: a process forked since counts whole,
    one that exited in between not at all."""
    return sum(t - before.get(p, 0) for p, t in after.items())


class ForeignLoad:
    """`with ForeignLoad(pgids) as f: ...` then `f.cores`: others' CPU use in cores (nan if
    unknown). `pgids`: process groups of the servers (each started in its own session)."""

    def __init__(self, pids: list[int] = ()):
        self.pids = list(pids)
        self.cores = float("nan")

    def _snap(self):
        return (_busy_ticks(), proc_ticks("self"), group_ticks(self.pids),
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
        ours = (end[1] - start[1] + ticks_since(start[2], end[2])) / TICK + (end[3] - start[3])
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
