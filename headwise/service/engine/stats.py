"""Where requests' time goes, per request (`Timing`: TEI's timing headers) and summed per model
(`ModelStats`: Triton's statistics extension, GET /v2/models/stats).

The phases are Triton's: queue (enqueued → its batch starts, tokenising left out), compute
input (tokenising its inputs and building the batch's feeds), compute infer (onnxruntime's
run) and compute output (cutting each input's answer out of the batch's outputs). A request
whose inputs ran in several batches counts each batch it was in.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

NS = 1_000_000_000


@dataclass(slots=True)
class Timing:
    """One request's time, in seconds, by phase; `characters` and `tokens` it computed."""

    tokenize: float = 0.0
    queue: float = 0.0
    feeds: float = 0.0
    infer: float = 0.0
    output: float = 0.0
    started: bool = False  # its first batch has started (queue is set)

    @property
    def compute_input(self) -> float:
        return self.tokenize + self.feeds


class Duration:
    """Triton's {count, ns}."""

    __slots__ = ("count", "ns")

    def __init__(self) -> None:
        self.count = 0
        self.ns = 0

    def add(self, seconds: float) -> None:
        self.count += 1
        self.ns += int(seconds * NS)

    def json(self) -> dict:
        return {"count": self.count, "ns": self.ns}


PHASES = ("queue", "compute_input", "compute_infer", "compute_output")


class ModelStats:
    """One model's statistics since start-up, as Triton's InferStatistics and batch statistics.
    Written by the model's inference threads (batches) and the event loop (requests), under a
    lock: a few additions per batch and per request."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.success, self.fail = Duration(), Duration()
        self.phases = {p: Duration() for p in PHASES}
        self.batches: dict[int, dict[str, Duration]] = {}
        self.inference_count = 0  # inputs answered
        self.execution_count = 0  # batches run
        self.last_inference_ms = 0

    def batch(self, size: int, compute_input: float, infer: float, output: float) -> None:
        """A batch of `size` inputs ran (inference thread)."""
        with self._lock:
            row = self.batches.get(size)
            if row is None:
                row = self.batches[size] = {p: Duration() for p in PHASES[1:]}
            row["compute_input"].add(compute_input)
            row["compute_infer"].add(infer)
            row["compute_output"].add(output)
            self.execution_count += 1
            self.inference_count += size
            self.last_inference_ms = int(time.time() * 1000)

    def request(self, timing: Timing | None, seconds: float) -> None:
        """A request was answered (`timing`) or failed (None), `seconds` after it was queued."""
        with self._lock:
            if timing is None:
                self.fail.add(seconds)
                return
            self.success.add(seconds)
            p = self.phases
            p["queue"].add(timing.queue)
            p["compute_input"].add(timing.compute_input)
            p["compute_infer"].add(timing.infer)
            p["compute_output"].add(timing.output)

    def json(self, name: str, version: str) -> dict:
        """Triton's ModelStatistics for this model."""
        with self._lock:
            zero = Duration().json()
            return {
                "name": name, "version": version, "last_inference": self.last_inference_ms,
                "inference_count": self.inference_count, "execution_count": self.execution_count,
                "inference_stats": {"success": self.success.json(), "fail": self.fail.json(),
                                    **{p: d.json() for p, d in self.phases.items()},
                                    "cache_hit": zero, "cache_miss": zero},
                "response_stats": {},
                "batch_stats": [{"batch_size": size, **{p: d.json() for p, d in row.items()}}
                                for size, row in sorted(self.batches.items())],
                "memory_usage": [],
            }
