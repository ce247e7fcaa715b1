"""Issue 4's and issue 9's targets (throughput against the ceiling, latency added by the
service, the cost of attention), checked on whatever cells a run measured."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from bench.cells import Row, Sample, find_row, kept, quiet
from bench.stats import median


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
    keep = kept([quiet(x) and quiet(y) for x, y in pairs])
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
