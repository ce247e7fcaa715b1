"""What the processes of process mode share in memory (docs/architecture.md#process-mode), in
files beside the engine's socket: the engine's queue table and run clock, and the front-ends'
heartbeats, which the supervisor watches.

The queue bound: the engine process owns a table in shared memory, one row per queue it serves (a model's role, its
analytics lane) and one column per front-end slot, and each front-end writes its own queue's
depth into its column as it changes. A front-end admits a request only when the inputs queued
for that queue in every front-end, plus the request's, stay within HEADWISE_MAX_QUEUE: the one
bound `inproc` has, over the whole server, not one per front-end.

Each front-end writes only its own cells, so no lock is taken; two front-ends admitting at the
same moment can pass the bound by at most one request each.
"""

from __future__ import annotations

import mmap
import os
import time
from pathlib import Path

QUEUES_FILE, RUN_CLOCK_FILE, HEARTBEATS_FILE = "queues", "run-clock", "heartbeats"
SLOTS = 1024  # front-ends: HEADWISE_FRONTENDS is at most 256, restarts take their slot again
CELL = 8  # bytes: a signed 64-bit depth


def beside(address: str, name: str) -> str | None:
    """The path of file `name` beside the engine's IPC socket (None for another transport)."""
    if not address.startswith("ipc://"):
        return None
    return os.path.join(os.path.dirname(address[len("ipc://"):]), name)


def _create(path: str | Path, cells: int) -> None:
    """A file of `cells` cells, each 0."""
    with open(path, "wb") as f:
        f.truncate(cells * CELL)


def _since(stamp: int) -> float:
    """Seconds since a CLOCK_MONOTONIC stamp in ns (0.0 for none)."""
    return (time.monotonic_ns() - stamp) / 1e9 if stamp else 0.0


def _map(path: str, cells: int) -> memoryview:
    fd = os.open(path, os.O_RDWR)
    try:
        return memoryview(mmap.mmap(fd, cells * CELL)).cast("q")
    finally:
        os.close(fd)


class RunClock:
    """When the engine's device run now running began (CLOCK_MONOTONIC, the same in every
    process; 0: none runs), so that the supervisor can tell a stuck device from a busy one."""

    def __init__(self, path: str | Path):
        self.path = str(path)
        self._cell = _map(self.path, 1)

    @classmethod
    def create(cls, path: str | Path) -> RunClock:
        _create(path, 1)
        return cls(path)

    def started(self) -> None:
        self._cell[0] = time.monotonic_ns()

    def ended(self) -> None:
        self._cell[0] = 0

    def running_for(self) -> float:
        """Seconds the current run has lasted (0.0 when none runs)."""
        return _since(self._cell[0])


class Heartbeats:
    """When each front-end's event loop last turned (CLOCK_MONOTONIC ns, one cell per slot; 0:
    not watched, while it starts or drains), so that the supervisor can tell a hung front-end
    (alive, its socket still given new connections, none served) from a busy one."""

    def __init__(self, path: str | Path):
        self.path = str(path)
        self._cells = _map(self.path, SLOTS)

    @classmethod
    def create(cls, path: str | Path) -> Heartbeats:
        _create(path, SLOTS)
        return cls(path)

    def beat(self, slot: int) -> None:
        self._cells[slot] = time.monotonic_ns()

    def rest(self, slot: int) -> None:
        self._cells[slot] = 0

    def silent_for(self, slot: int) -> float:
        """Seconds since front-end `slot` last beat (0.0 while it is not watched)."""
        return _since(self._cells[slot])


class QueueTable:
    """The table: `queues` rows × SLOTS cells, in a file both sides map (plain memoryview
    cells: a depth written or summed costs no numpy call on the request path)."""

    def __init__(self, path: str | Path, queues: int):
        self.path, self.queues = str(path), max(queues, 1)
        self.cells = _map(self.path, self.queues * SLOTS)

    @classmethod
    def create(cls, path: str | Path, queues: int) -> QueueTable:
        """The engine's: every queue empty."""
        _create(path, max(queues, 1) * SLOTS)
        return cls(path, queues)

    def front_end(self, slot: int, slots: int) -> FrontEndQueues:
        """Front-end `slot` of `slots` (the supervisor's numbering)."""
        if not 0 <= slot < slots <= SLOTS:
            raise ValueError(f"front-end slot {slot} of {slots} is outside the table's {SLOTS}")
        return FrontEndQueues(self, slot, slots)


class FrontEndQueues:
    """One front-end's column: it starts empty (a front-end started again takes the slot of
    the one that died, whose queue died with it)."""

    def __init__(self, table: QueueTable, slot: int, slots: int):
        self.table, self.slot, self.slots = table, slot, slots
        for row in range(table.queues):
            table.cells[row * SLOTS + slot] = 0

    def queue(self, row: int) -> SharedQueue:
        if not 0 <= row < self.table.queues:
            raise ValueError(f"queue {row} is outside the table's {self.table.queues}")
        return SharedQueue(self.table.cells[row * SLOTS:row * SLOTS + self.slots], self.slot)


class SharedQueue:
    """One queue as a front-end's batcher sees it: its own depth to write, the others' to read."""

    __slots__ = ("row", "slot")

    def __init__(self, row: memoryview, slot: int):
        self.row, self.slot = row, slot

    def set(self, depth: int) -> None:
        self.row[self.slot] = depth

    def elsewhere(self) -> int:
        """Inputs queued for this queue in the other front-ends."""
        return sum(self.row) - self.row[self.slot]
