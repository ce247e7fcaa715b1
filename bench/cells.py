"""Result rows: a cell (a system, a variant, an input length, a batch or a concurrency) is a
`Row` of repetitions, each a `Sample`; which repetitions count (`DISTURBED_CORES`); the
ceiling row a result is held against; `time_calls`, the timer of an in-process cell."""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field

from bench.stats import latency_summary, median, spread

# package variant name for each benchmark variant ("attention": the graph the server answers
# attention from, the analysis graph; bench.workload falls back to an older package's attention graph)
VARIANT_FILES = {"fp32": "fast", "int8": "fast.int8", "fp16": "fast.fp16", "attention": "analysis"}


# A repetition during which other processes used more than this many cores is "disturbed": a
# row's medians leave it out when at least two undisturbed repetitions remain (the same rule for
# every system; the measure is independent of the result). None: keep every repetition.
DISTURBED_CORES: float | None = 0.5


def quiet(sample) -> bool:
    c = sample.extra.get("foreign_cores", math.nan)
    return DISTURBED_CORES is None or not c > DISTURBED_CORES  # unknown (nan) counts as quiet


def kept(flags: list[bool]) -> list[bool]:
    """Which repetitions count: the quiet ones when there are at least two, else all."""
    return flags if sum(flags) >= min(2, len(flags)) else [True] * len(flags)


@dataclass
class Sample:
    """One repetition of one cell."""

    throughput: float  # inputs per second
    p50: float  # ms
    p95: float
    p99: float
    requests: int = 0  # calls (in-process) or HTTP requests completed
    errors: int = 0
    extra: dict = field(default_factory=dict)  # e.g. the server's mean batch size


MAX_CALLS = 100_000


def time_calls(run, batch: int, seconds: float = 1.0, min_calls: int = 3, warmup: int = 1) -> Sample:
    """An in-process cell: `run()` (one call of `batch` inputs) back to back for `seconds`,
    at least `min_calls` times, after `warmup` calls."""
    for _ in range(warmup):
        run()
    lat: list[float] = []
    start = time.perf_counter()
    deadline = start + seconds
    while len(lat) < MAX_CALLS:
        t0 = time.perf_counter()
        run()
        t1 = time.perf_counter()
        lat.append(t1 - t0)
        if t1 >= deadline and len(lat) >= min_calls:
            break
    elapsed = time.perf_counter() - start
    s = latency_summary(lat)
    return Sample(throughput=batch * len(lat) / elapsed, p50=s["p50"], p95=s["p95"], p99=s["p99"],
                  requests=len(lat))


@dataclass
class Row:
    """One cell: a system, a variant, an input length, a batch or concurrency; its repetitions."""

    suite: str  # ceiling | headwise | sentence-transformers | naive-server
    variant: str  # fp32 | int8 | fp16 | attention
    tokens: int  # tokens per input, as asked (specials included)
    effective_tokens: int  # after the model's max_len
    batch: int | None = None  # in-process batch size
    concurrency: int | None = None  # HTTP clients
    samples: list[Sample] = field(default_factory=list)
    note: str = ""

    @property
    def key(self) -> tuple:
        return (self.suite, self.variant, self.tokens, self.batch, self.concurrency)

    @property
    def used(self) -> list[Sample]:
        """The repetitions the medians use (see DISTURBED_CORES)."""
        keep = kept([quiet(s) for s in self.samples])
        return [s for s, k in zip(self.samples, keep, strict=True) if k]

    def med(self, what: str) -> float:
        return median(getattr(s, what) for s in self.used)

    def med_extra(self, what: str) -> float:
        return median(s.extra.get(what, math.nan) for s in self.used)

    @property
    def errors(self) -> int:
        return sum(s.errors for s in self.samples)

    def to_json(self) -> dict:
        d = asdict(self)
        d["median"] = {k: self.med(k) for k in ("throughput", "p50", "p95", "p99")}
        if any("server_cpu_us_per_input" in s.extra for s in self.samples):  # HTTP cells
            d["median"]["server_cpu_us_per_input"] = self.med_extra("server_cpu_us_per_input")
        d["spread"] = spread([s.throughput for s in self.used])
        return d


def find_row(rows: Iterable[Row], suite: str, variant: str, tokens: int,
             batch: int | None = None, concurrency: int | None = None) -> Row | None:
    for r in rows:
        if r.key == (suite, variant, tokens, batch, concurrency) and r.samples:
            return r
    return None


def ceiling_variant(variant: str) -> str:
    """The graph a row is held against: peers run fp32 weights."""
    return variant if variant in VARIANT_FILES else "fp32"


def ceiling_for(rows: Sequence[Row], row: Row) -> Row | None:
    """The ceiling row a result is compared with: the same graph and length, at the row's batch
    (in-process) or at the largest measured batch ≤ its concurrency (HTTP)."""
    if row.suite == "ceiling":
        return None
    variant = ceiling_variant(row.variant)
    want = row.batch if row.batch is not None else row.concurrency
    batches = sorted({r.batch for r in rows if r.suite == "ceiling" and r.variant == variant
                      and r.tokens == row.tokens and r.samples and r.batch is not None})
    fitting = [b for b in batches if b <= (want or 1)]
    if not fitting:
        return None
    return find_row(rows, "ceiling", variant, row.tokens, batch=fitting[-1])
