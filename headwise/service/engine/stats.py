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
ANSWERED = ("success", *PHASES)  # what an answered request adds to, each once


class ModelStats:
    """One model's statistics since start-up, as Triton's InferStatistics and batch statistics.
    Written by the model's inference threads (batches) and the event loop (requests), under a
    lock: a few additions per batch and per request, to plain integers (an answered request
    counts once in success and in each phase, so they share one count; issue 37 measured
    the method calls this used to make per request)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.fail = Duration()
        self.answered = 0  # requests answered: the count of success and of every phase
        self._answered_ns = [0] * len(ANSWERED)  # ns of each of ANSWERED
        self.batches: dict[int, list[int]] = {}  # size → [batches, ns of each of PHASES[1:]]
        self.inference_count = 0  # inputs answered
        self.execution_count = 0  # batches run
        self.last_inference_ms = 0

    def batch(self, size: int, compute_input: float, infer: float, output: float) -> None:
        """A batch of `size` inputs ran (inference thread)."""
        now_ms = int(time.time() * 1000)
        with self._lock:
            row = self.batches.get(size)
            if row is None:
                row = self.batches[size] = [0, 0, 0, 0]
            row[0] += 1
            row[1] += int(compute_input * NS)
            row[2] += int(infer * NS)
            row[3] += int(output * NS)
            self.execution_count += 1
            self.inference_count += size
            self.last_inference_ms = now_ms

    def request(self, timing: Timing | None, seconds: float) -> None:
        """A request was answered (`timing`) or failed (None), `seconds` after it was queued."""
        with self._lock:
            if timing is None:
                self.fail.add(seconds)
                return
            self.answered += 1
            ns = self._answered_ns
            ns[0] += int(seconds * NS)
            ns[1] += int(timing.queue * NS)
            ns[2] += int((timing.tokenize + timing.feeds) * NS)
            ns[3] += int(timing.infer * NS)
            ns[4] += int(timing.output * NS)

    def json(self, name: str, version: str) -> dict:
        """Triton's ModelStatistics for this model."""
        with self._lock:
            zero = Duration().json()
            answered = {p: {"count": self.answered, "ns": ns} for p, ns in zip(ANSWERED, self._answered_ns, strict=True)}
            return {
                "name": name, "version": version, "last_inference": self.last_inference_ms,
                "inference_count": self.inference_count, "execution_count": self.execution_count,
                "inference_stats": {"success": answered["success"], "fail": self.fail.json(),
                                    **{p: answered[p] for p in PHASES}, "cache_hit": zero, "cache_miss": zero},
                "response_stats": {},
                "batch_stats": [{"batch_size": size, **{p: {"count": row[0], "ns": ns}
                                                        for p, ns in zip(PHASES[1:], row[1:], strict=True)}}
                                for size, row in sorted(self.batches.items())],
                "memory_usage": [],
            }
