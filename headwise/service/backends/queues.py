"""The server's queue bound in process mode (docs/architecture.md#process-mode): the engine
process owns a table in shared memory, one row per queue it serves (a model's role, its
analytics lane) and one column per front-end slot, and each front-end writes its own queue's
depth into its column as it changes. A front-end admits a request only when the inputs queued
for that queue in every front-end, plus the request's, stay within HEADWISE_MAX_QUEUE: the one
bound `inproc` has, over the whole server, not one per front-end.

Each front-end writes only its own cells, so no lock is taken; two front-ends admitting at the
same moment can pass the bound by at most one request each.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

SLOTS = 1024  # front-ends: HEADWISE_FRONTENDS is at most 256, restarts take their slot again


class QueueTable:
    """The table: `queues` rows × SLOTS columns of int64, in a file both sides map."""

    def __init__(self, path: str | Path, queues: int, mode: str):
        self.path = str(path)
        self.cells = np.memmap(path, dtype=np.int64, mode=mode, shape=(max(queues, 1), SLOTS))

    @classmethod
    def create(cls, path: str | Path, queues: int) -> QueueTable:
        """The engine's: every queue empty."""
        table = cls(path, queues, "w+")
        table.cells[:] = 0
        return table

    def front_end(self, slot: int) -> FrontEndQueues:
        if not 0 <= slot < SLOTS:
            raise ValueError(f"front-end slot {slot} is outside 0..{SLOTS - 1}")
        return FrontEndQueues(self, slot)


class FrontEndQueues:
    """One front-end's column: it starts empty (a front-end started again takes the slot of
    the one that died, whose queue died with it)."""

    def __init__(self, table: QueueTable, slot: int):
        self.table, self.slot = table, slot
        table.cells[:, slot] = 0

    def queue(self, row: int) -> SharedQueue:
        return SharedQueue(self.table.cells[row], self.slot)


class SharedQueue:
    """One queue as a front-end's batcher sees it: its own depth to write, the others' to read."""

    __slots__ = ("row", "slot")

    def __init__(self, row: np.ndarray, slot: int):
        self.row, self.slot = row, slot

    def set(self, depth: int) -> None:
        self.row[self.slot] = depth

    def elsewhere(self) -> int:
        """Inputs queued for this queue in the other front-ends."""
        return int(self.row.sum()) - int(self.row[self.slot])
