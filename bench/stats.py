"""Statistics of the benchmark's repetitions and latencies: percentile, median, spread.
Pure: nothing here times anything."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default 'linear' method), q in [0, 100]."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"q must be in [0, 100], got {q}")
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def median(values: Iterable[float]) -> float:
    xs = [v for v in values if v is not None and not math.isnan(v)]
    if not xs:
        return math.nan
    return statistics.median(xs)


def spread(values: Sequence[float]) -> float:
    """(max - min) / median: how much the repetitions disagree."""
    xs = [v for v in values if v is not None and not math.isnan(v)]
    if len(xs) < 2:
        return 0.0
    m = statistics.median(xs)
    return (max(xs) - min(xs)) / m if m else math.nan


def latency_summary(latencies_s: Sequence[float]) -> dict[str, float]:
    """Seconds in, milliseconds out: p50/p95/p99 and mean."""
    ms = [x * 1000 for x in latencies_s]
    return {"p50": percentile(ms, 50), "p95": percentile(ms, 95), "p99": percentile(ms, 99),
            "mean": sum(ms) / len(ms)}
