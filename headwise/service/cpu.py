"""How many cores this process may really use: affinity and the cgroup CPU quota, not the host."""

from __future__ import annotations

import math
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path


def _cgroup_quota(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    try:  # cgroup v2
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:  # cgroup v1
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return None if quota <= 0 else quota / period
    except (OSError, ValueError):
        return None


def usable_cores(cgroup_root: Path = Path("/sys/fs/cgroup")) -> int:
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    quota = _cgroup_quota(cgroup_root)
    if quota is not None:
        n = min(n, max(1, math.ceil(quota)))
    return max(1, n)


INFERENCE_NICENESS = 5
# Analytics rows (occlusion, similarity) run at the lowest priority there is: on a CPU their
# graph runs take whatever the plain batches, the event loop and the tokenizer leave, and the
# kernel's scheduler hands the cores back to plain work the moment it wakes, in the middle of
# a graph run (bench/results/analytics-priority.md).
ANALYTICS_NICENESS = 19


def lower_thread_priority(niceness: int = INFERENCE_NICENESS) -> None:
    """Run the calling thread, and the onnxruntime pool threads it goes on to create (Linux
    threads inherit their creator's nice value), below the event loop's priority.

    On a saturated machine inference still takes whatever CPU is left, but the event loop is
    scheduled first, so health checks, 429s and 413s are answered at once instead of queueing
    behind a batch. Raising one's own nice value needs no privilege.
    """
    try:
        tid = threading.get_native_id()
        current = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(current + niceness, 19))
    except (AttributeError, OSError):  # not Linux, or not allowed: run at normal priority
        pass


def lowered_thread(name: str = "", niceness: int = INFERENCE_NICENESS) -> ThreadPoolExecutor:
    """One worker thread `niceness` below its creator (lower_thread_priority), named `name`."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix=name,
                              initializer=partial(lower_thread_priority, niceness))


def hand_over_gil_within(ms: float) -> None:
    """The longest the event loop may keep the GIL from a thread that wants it back.

    onnxruntime releases the GIL while a graph runs; when the run ends, the inference thread
    needs it back before it can hand the batch on, and a busy event loop may keep it until the
    interpreter's switch interval is over. A shorter interval shortens that wait but makes every
    thread switch more often: on an H100 host 0.5 ms served single-input requests slower than
    Python's 5 ms (bench/results/gpu-h100.md), which stays the default."""
    sys.setswitchinterval(ms / 1000)
