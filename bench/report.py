"""The markdown report of a run: the results table, the targets, the machine facts; and the raw
JSON beside it."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from bench import cells  # cells.DISTURBED_CORES: `headwise bench --disturbed-cores` sets it
from bench.cells import Row, Sample, ceiling_for
from bench.stats import spread
from bench.targets import targets, targets_table


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
            "| vs ceiling | ceiling ref | reps | spread | server batch | ORT busy | server CPU µs/input "
            "| others' cores | errors |")
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
            _fmt(r.med_extra("server_cpu_us_per_input"), 0),
            _fmt(r.med_extra("foreign_cores"), 2),
            str(r.errors),
        ]) + " |")
    return "\n".join(lines) + "\n"


def emit(text: str, out: Path | None) -> None:
    """A report to `out` (saying so on stderr), or to stdout when no file is named."""
    if out:
        out.write_text(text)
        print(f"written: {out}", file=sys.stderr)
    else:
        print(text)


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
              "processes used more than " + (f"{cells.DISTURBED_CORES:g}" if cells.DISTURBED_CORES is not None else "∞") +
              " cores is left out when two undisturbed ones remain); `spread` = (max − min) / median of the "
              "throughputs used. `vs ceiling` = throughput / the ceiling's throughput for the same graph "
              "and length at `ceiling ref` (in-process: the same batch; HTTP: the largest measured "
              "batch ≤ clients). `server batch` = mean inputs per inference call on the server "
              "during the cell and `ORT busy` = the share of the cell's wall time the server spent inside onnxruntime, summed over workers (both from its /metrics). `server CPU µs/input` = user + system CPU of the server's whole process tree during the cell (from /proc) per input completed: HTTP, tokenising, batching and onnxruntime together. `others' cores` = CPU used by processes outside the benchmark during the cell (median; the machine is shared). `tokens` counts [CLS]/[SEP]; `a→b` = truncated to "
              "the model's max_len.\n", markdown_table(rows)]
    if plot:
        parts += ["\n## Plot\n", f"![throughput vs concurrency]({plot})\n"]
    if notes:
        parts += ["\n## Notes\n", "\n".join(f"- {n}" for n in notes) + "\n"]
    return "\n".join(parts)


def write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=1, default=str))


def write_report(out: Path, name: str, facts: dict, cfg: dict, rows: list[Row], notes: list[str],
                 command: str) -> None:
    notes = list(notes)
    plot_path = None
    if rows:
        try:
            from bench.plot import plot

            plot_path = plot(rows, out / f"{name}.png", f"headwise bench: {name} ({facts.get('cpu', '?')})")
        except ImportError as e:  # matplotlib missing (e.g. the GPU machine): table only
            notes.append(f"no plot: {e}")
    md = report_markdown(f"headwise bench: {name}", facts, rows,
                         plot_path.name if plot_path else None, command, notes)
    (out / f"{name}.md").write_text(md)
    write_json(out / f"{name}.raw.json", {"facts": facts, "config": cfg, "command": command,
                                         "notes": [n for n in notes if not n.startswith("no plot")],
                                         "rows": [r.to_json() for r in rows]})
    print(f"\nwrote {out / (name + '.md')}" + (f" and {plot_path}" if plot_path else ""))
    ts = targets(rows)
    if ts:
        print(targets_table(ts))


def rows_from_json(data: list[dict]) -> list[Row]:
    rows = []
    for d in data:
        row = Row(d["suite"], d["variant"], d["tokens"], d["effective_tokens"], d.get("batch"),
                  d.get("concurrency"), note=d.get("note", ""))
        row.samples = [Sample(**smp) for smp in d["samples"]]
        rows.append(row)
    return rows


def rerender(args: argparse.Namespace) -> int:
    """--from-raw: the report again (e.g. with another --disturbed-cores), nothing measured."""
    raw = json.loads(args.from_raw.read_text())
    if not isinstance(raw, dict) or "rows" not in raw:
        print(f"headwise bench: {args.from_raw} is a partial file (the run stopped early); "
              "nothing to report", file=sys.stderr)
        return 2
    name = args.name or args.from_raw.name.removesuffix(".raw.json")
    write_report(args.out, name, raw["facts"], raw.get("config", {}), rows_from_json(raw["rows"]),
                 raw.get("notes", []), raw.get("command", "?"))
    return 0
