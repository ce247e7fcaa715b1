"""Pure helpers shared by the suites: statistics, length-exact texts, result rows, the
markdown report, machine facts. Nothing here times anything or starts a process."""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

# Words that BERT-style WordPiece vocabularies keep whole, so a text grows by about one token
# per word; the builder checks the count with the real tokenizer either way.
PROSE = ("the quick brown fox jumps over the lazy dog while a small cat sat on the red mat "
         "and two men are playing chess in the park near the old river as the weather is "
         "lovely in the spring and she sells sea shells by the shore")
WORDS = tuple(PROSE.split())
FILLERS = ("the", "a", "is", "on", "at", "one", "two")

# package variant name for each benchmark variant ("attention" = the attention graph)
VARIANT_FILES = {"fp32": "fast", "int8": "fast.int8", "fp16": "fast.fp16", "attention": "attention"}


# -- statistics ---------------------------------------------------------------------------
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


# -- inputs of an exact token length -----------------------------------------------------------
def count_tokens(tokenizer, text: str) -> int:
    """Tokens the model sees for `text`, specials included, without truncation."""
    return len(tokenizer.encode(text).ids)


def text_of_length(tokenizer, n: int, words: Sequence[str] = WORDS) -> str:
    """A text that the tokenizer (no padding, no truncation) turns into exactly n tokens,
    special tokens ([CLS], [SEP]) included. Raises ValueError when it cannot."""
    tokenizer.no_padding()
    tokenizer.no_truncation()
    base = count_tokens(tokenizer, "")
    if n < base:
        raise ValueError(f"{n} tokens is fewer than the {base} special tokens alone")
    fillers = [f for f in FILLERS if count_tokens(tokenizer, f) == base + 1]
    if not fillers:
        raise ValueError("no single-token filler word in this vocabulary")
    parts: list[str] = []
    count = base
    for i in range(4 * n + 8):  # bounded: every accepted word adds ≥ 1 token
        if count >= n:
            break
        word = words[i % len(words)]
        trial = count_tokens(tokenizer, " ".join([*parts, word]))
        if trial <= n:
            parts.append(word)
            count = trial
        else:  # a multi-token word overshoots: top up with single-token fillers
            parts.append(fillers[i % len(fillers)])
            count = count_tokens(tokenizer, " ".join(parts))
    text = " ".join(parts)
    got = count_tokens(tokenizer, text)
    if got != n:
        raise ValueError(f"built a text of {got} tokens, wanted {n}")
    return text


# -- result rows ---------------------------------------------------------------------------------
# A repetition during which other processes used more than this many cores is "disturbed": a
# row's medians leave it out when at least two undisturbed repetitions remain (the same rule for
# every system; the measure is independent of the result). None: keep every repetition.
DISTURBED_CORES: float | None = 0.5


def quiet(sample) -> bool:
    c = sample.extra.get("foreign_cores", math.nan)
    return DISTURBED_CORES is None or not c > DISTURBED_CORES  # unknown (nan) counts as quiet


def _kept(flags: list[bool]) -> list[bool]:
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
        keep = _kept([quiet(s) for s in self.samples])
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


# -- the markdown report --------------------------------------------------------------------------
def _fmt(x: float, digits: int = 1) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:,.{digits}f}"


def tokens_label(row: Row) -> str:
    return str(row.tokens) if row.tokens == row.effective_tokens else f"{row.tokens}→{row.effective_tokens}"


SUITE_ORDER = {"ceiling": 0, "headwise": 1, "sentence-transformers": 2, "naive-server": 3}
VARIANT_ORDER = {"fp32": 0, "int8": 1, "fp16": 2, "attention": 3}


def sort_rows(rows: Iterable[Row]) -> list[Row]:
    return sorted(rows, key=lambda r: (SUITE_ORDER.get(r.suite, 9), r.tokens,
                                       VARIANT_ORDER.get(r.variant, 9), r.batch or 0, r.concurrency or 0))


def markdown_table(rows: Sequence[Row]) -> str:
    """One line per cell: medians over repetitions, and the ratio to the ceiling's throughput."""
    head = ("| system | variant | tokens | batch | clients | inputs/s | p50 ms | p95 ms | p99 ms "
            "| vs ceiling | ceiling ref | reps | spread | server batch | ORT busy | others' cores | errors |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in sort_rows(rows):
        if not r.samples:
            continue
        ref = ceiling_for(rows, r)
        ratio = r.med("throughput") / ref.med("throughput") if ref else math.nan
        ref_label = f"{ref.variant} b{ref.batch}" if ref else "–"
        lines.append("| " + " | ".join([
            r.suite, r.variant, tokens_label(r),
            str(r.batch) if r.batch is not None else "–",
            str(r.concurrency) if r.concurrency is not None else "–",
            _fmt(r.med("throughput")), _fmt(r.med("p50"), 2), _fmt(r.med("p95"), 2),
            _fmt(r.med("p99"), 2),
            f"{ratio:.0%}" if not math.isnan(ratio) else "–", ref_label,
            f"{len(r.used)}/{len(r.samples)}", f"{spread([s.throughput for s in r.used]):.0%}",
            _fmt(r.med_extra("mean_batch"), 1),
            f"{r.med_extra('ort_busy'):.0%}" if not math.isnan(r.med_extra("ort_busy")) else "–",
            _fmt(r.med_extra("foreign_cores"), 2),
            str(r.errors),
        ]) + " |")
    return "\n".join(lines) + "\n"


@dataclass
class Target:
    name: str
    issue4: str  # the bar in issue 4 (service)
    issue9: str  # the bar in issue 9 (benchmarks)
    measured: str
    value: float  # the measured figure the bars apply to
    ok4: bool | None
    ok9: bool | None


def _verdict(ok: bool | None) -> str:
    return "–" if ok is None else ("met" if ok else "**missed**")


def paired(a: Row, b: Row, what: str, op) -> list[float]:
    """op(a_i, b_i) for the repetitions measured side by side (same repetition index: the cells
    ran back to back), so drift on a shared machine cancels out of the ratio; pairs where either
    side was disturbed are left out when at least two undisturbed pairs remain."""
    pairs = list(zip(a.samples, b.samples, strict=False))
    keep = _kept([quiet(x) and quiet(y) for x, y in pairs])
    return [op(getattr(x, what), getattr(y, what)) for (x, y), k in zip(pairs, keep, strict=True) if k]


def targets(rows: Sequence[Row], short: int = 20) -> list[Target]:
    """Issue 4's and issue 9's CPU targets, from whatever cells this run measured. The verdict
    uses the median of the per-repetition (paired) figures; the medians of each side are shown."""
    out: list[Target] = []

    def get(suite, variant, tokens, batch=None, conc=None):
        return find_row(rows, suite, variant, tokens, batch, conc)

    def ratio(x, y):
        return x / y if y else math.nan

    def diff(x, y):
        return x - y

    def add(name, a, b, what, op, bar4, bar9, fmt, unit, better="higher"):
        if a is None or b is None:
            return
        vals = paired(a, b, what, op)
        v = median(vals)
        if math.isnan(v):
            return
        def ok(bar):
            return None if bar is None else (v >= bar if better == "higher" else v <= bar)

        def label(bar):
            return "–" if bar is None else f"{'≥' if better == 'higher' else '≤'} {fmt(bar)}{unit}"

        lo, hi = min(vals), max(vals)
        side = (f"{a.med(what):,.2f} / {b.med(what):,.2f} ms" if what == "p50"
                else f"{a.med(what):,.0f} / {b.med(what):,.0f} inputs/s")
        if not b.med(what):  # an absolute bar
            side = f"{a.med(what):,.2f} ms"
        measured = f"{side}; paired: **{fmt(v)}{unit}** ({len(vals)} reps {fmt(lo)}…{fmt(hi)}{unit})"
        out.append(Target(name, label(bar4), label(bar9), measured, v, ok(bar4), ok(bar9)))

    def pct(x):
        return f"{x:.0%}"

    def times(x):
        return f"{x:.2f}"

    def ms(x):
        return f"{x:+.2f}"

    for variant, bar4, bar9 in (("fp32", 0.80, 0.85), ("int8", 0.65, 0.70)):
        add(f"{variant}, 16 clients vs ceiling batch 16 [{short} tok]",
            get("headwise", variant, short, conc=16), get("ceiling", variant, short, batch=16),
            "throughput", ratio, bar4, bar9, pct, "")
    add(f"int8, 16 clients vs sentence-transformers batch 32 [{short} tok]",
        get("headwise", "int8", short, conc=16), get("sentence-transformers", "fp32", short, batch=32),
        "throughput", ratio, None, 2.0, times, "×")
    for variant in ("fp32", "int8"):
        add(f"{variant}, 1 client p50 − ceiling batch-1 p50 [{short} tok]",
            get("headwise", variant, short, conc=1), get("ceiling", variant, short, batch=1),
            "p50", diff, 2.0, 1.5, ms, " ms", better="lower")
    add(f"attention (all heads, base64 fp16) / none, 1 client p50 [{short} tok]",
        get("headwise", "attention", short, conc=1), get("headwise", "fp32", short, conc=1),
        "p50", ratio, 2.0, 1.8, times, "×", better="lower")
    plain, att = get("headwise", "fp32", short, conc=16), get("headwise", "attention", short, conc=16)
    add(f"attention / none, time per input at 16 clients [{short} tok]", plain, att,
        "throughput", ratio, 2.0, 1.8, times, "×", better="lower")
    for variant in ("fp32", "int8"):
        add(f"{variant}, 128 tokens, 16 clients vs ceiling batch 16",
            get("headwise", variant, 128, conc=16), get("ceiling", variant, 128, batch=16),
            "throughput", ratio, None, 0.80, pct, "")
    # GPU (issue 9): fp16 on CUDA
    for tokens in sorted({r.tokens for r in rows if r.variant == "fp16"}):
        add(f"GPU fp16, 64 clients vs ceiling batch 64 [{tokens} tok]",
            get("headwise", "fp16", tokens, conc=64), get("ceiling", "fp16", tokens, batch=64),
            "throughput", ratio, None, 0.80, pct, "")
    hw = get("headwise", "fp16", 128, conc=1)
    if hw is not None:
        zero = Row("ceiling", "fp16", 128, 128, batch=1,
                   samples=[Sample(0, 0, 0, 0) for _ in hw.samples])
        add("GPU fp16, 1 client p50 [128 tok] (absolute)", hw, zero, "p50", diff, None, 3.0,
            lambda x: f"{x:.2f}", " ms", better="lower")
    return out


def targets_table(ts: Sequence[Target]) -> str:
    lines = ["| target | measured: medians, then the paired figure | issue 4 bar | issue 4 | issue 9 bar | issue 9 |",
             "|---|---|---|---|---|---|"]
    for t in ts:
        lines.append(f"| {t.name} | {t.measured} | {t.issue4} | {_verdict(t.ok4)} | {t.issue9} "
                     f"| {_verdict(t.ok9)} |")
    return "\n".join(lines) + "\n"


def facts_table(facts: dict) -> str:
    lines = ["| fact | value |", "|---|---|"]
    for k, v in facts.items():
        lines.append(f"| {k} | {v} |")
    return "\n".join(lines) + "\n"


def report_markdown(title: str, facts: dict, rows: Sequence[Row], plot: str | None,
                    command: str, notes: Sequence[str] = ()) -> str:
    parts = [f"# {title}\n", f"Command: `{command}`\n", "## Machine\n", facts_table(facts)]
    ts = targets(rows)
    if ts:
        parts += ["## Targets (issues 4 and 9)\n",
                  "Each verdict uses the median over repetitions of the paired figure (the two "
                  "cells ran back to back in each repetition; disturbed pairs left out as below).\n", targets_table(ts)]
    parts += ["## Results\n",
              "Medians over the repetitions (`reps` = used/run: a repetition during which other "
              "processes used more than " + (f"{DISTURBED_CORES:g}" if DISTURBED_CORES is not None else "∞") +
              " cores is left out when two undisturbed ones remain); `spread` = (max − min) / median of the "
              "throughputs used. `vs ceiling` = throughput / the ceiling's throughput for the same graph "
              "and length at `ceiling ref` (in-process: the same batch; HTTP: the largest measured "
              "batch ≤ clients). `server batch` = mean inputs per inference call on the server "
              "during the cell and `ORT busy` = the share of the cell's wall time the server spent inside onnxruntime, summed over workers (both from its /metrics). `others' cores` = CPU used by processes outside the benchmark during the cell (median; the machine is shared). `tokens` counts [CLS]/[SEP]; `a→b` = truncated to "
              "the model's max_len.\n", markdown_table(rows)]
    if plot:
        parts += ["\n## Plot\n", f"![throughput vs concurrency]({plot})\n"]
    if notes:
        parts += ["\n## Notes\n", "\n".join(f"- {n}" for n in notes) + "\n"]
    return "\n".join(parts)


# -- machine facts -------------------------------------------------------------------------------
def usable_cores() -> int:
    try:
        from service.resources import usable_cores as cores

        return cores()
    except ImportError:  # pragma: no cover - bench run outside the repo
        try:
            return len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            return os.cpu_count() or 1


def _version(mod: str) -> str:
    try:
        from importlib.metadata import version

        return version(mod)
    except Exception:
        return "not installed"


def machine_facts(provider: str) -> dict:
    from export import cpu as cpu_info  # stdlib only: no torch, no onnx

    cpu = cpu_info.label()
    # HEADWISE_BENCH_COMMIT: when run from an export of a commit (git archive), not a checkout
    commit = os.environ.get("HEADWISE_BENCH_COMMIT") or _git("rev-parse", "--short", "HEAD") or "?"
    dirty = _git("status", "--porcelain", "--", "service", "model", "export", "headwise", "bench")
    if dirty:
        files = sorted(line[3:] for line in dirty.splitlines())
        commit += f" + uncommitted changes in {', '.join(files)}"
    import onnxruntime as ort

    build = "onnxruntime-gpu" if _version("onnxruntime-gpu") != "not installed" else "onnxruntime"
    return {
        "cores usable (affinity, cgroup)": usable_cores(),
        "cores on host": os.cpu_count(),
        "cpu": cpu,  # the model and its avx2 / avx512 / vnni / amx flags: ratios hold only for it
        "provider": provider,
        "onnxruntime": f"{ort.__version__} ({build}); available: {', '.join(ort.get_available_providers())}",
        "python": platform.python_version(),
        "torch": _version("torch"),
        "sentence-transformers": _version("sentence-transformers"),
        "wrk": _wrk_version(),
        "git commit": commit,
    }


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, timeout=10,
                              cwd=Path(__file__).resolve().parent).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _wrk_version() -> str:
    try:
        out = subprocess.run(["wrk", "--version"], capture_output=True, text=True, timeout=5)
        return (out.stdout or out.stderr).splitlines()[0].split(" Copyright")[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return "not found (python load generator)"


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=1, default=str))
