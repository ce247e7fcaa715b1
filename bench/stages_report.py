"""The markdown report of bench.stages: the machine, one summary table (stage × profile), then
one table per profile with every measured call, its share of the total and the request end to
end in process."""

from __future__ import annotations

import time
from pathlib import Path

from bench.stages import MODEL_FREE, Profile, Row

BACKEND_LABEL = {MODEL_FREE: "model-free backend (bench.standin.Instant)",
                 "onnxruntime": "the real model (the service's OrtBackend)"}
STAGES = ("parse", "validate", "tokenise", "pad and batch", "device run", "post-process", "serialise", "write")


def _us(x: float) -> str:
    return f"{x:,.1f}" if abs(x) < 100 else f"{x:,.0f}"


def _title(p: Profile) -> str:
    return f"{p.inputs} × {p.tokens} tokens, {BACKEND_LABEL.get(p.backend, p.backend)}"


def stage_totals(p: Profile) -> dict[str, float]:
    """µs per request per stage: the sum of its rows (not its "of which" parts)."""
    out = dict.fromkeys(STAGES, 0.0)
    for r in p.rows:
        if not r.part:
            out[r.stage] = out.get(r.stage, 0.0) + r.timing.wall_us
    return out


def summary_table(profiles: list[Profile]) -> str:
    """Stage × profile, µs per request (and per input where a request has several)."""
    heads = [f"{p.inputs}×{p.tokens} {p.backend}" for p in profiles]
    lines = ["| stage | " + " | ".join(heads) + " |", "|---|" + "---:|" * len(profiles)]
    totals = [stage_totals(p) for p in profiles]

    def cell(p: Profile, us: float) -> str:
        share = us / p.total.wall_us if p.total.wall_us else 0.0
        per = f" ({_us(us / p.inputs)}/input)" if p.inputs > 1 else ""
        return f"{_us(us)}{per}, {share:.0%}"

    for stage in STAGES:
        lines.append(f"| {stage} | " + " | ".join(cell(p, t[stage]) for p, t in zip(profiles, totals, strict=True))
                     + " |")
    lines.append("| **Σ stages** | " + " | ".join(cell(p, p.total.wall_us) for p in profiles) + " |")
    for key, label in WHOLE.items():
        lines.append(f"| {label} | " + " | ".join(cell(p, w[key].timing.wall_us) if key in w else "–"
                                                  for p, w in ((p, whole(p)) for p in profiles)) + " |")
    return "\n".join(lines) + "\n"


WHOLE = {"hop": "↳ one empty hop to the inference thread", "engine": "engine.embed, end to end",
         "request": "the whole request, in process"}


def whole(p: Profile) -> dict[str, Row]:
    return {r.stage: r for r in p.whole}


def _row(p: Profile, r: Row, stage: str) -> str:
    t, total = r.timing, p.total.wall_us
    share = f"{t.wall_us / total:.1%}" if total else "–"
    what = f"*{r.what}*" if r.part else r.what
    return (f"| {stage} | {what} | {_us(t.wall_us)} | {_us(t.wall_us / p.inputs)} | {share} | {_us(t.cpu_us)} "
            f"| {t.reps} |")


def profile_table(p: Profile) -> str:
    """Every measured call of one profile, then Σ, and the request end to end in process."""
    lines = ["| stage | what runs | µs / request | µs / input | share | CPU µs / request | calls |",
             "|---|---|---:|---:|---:|---:|---:|"]
    lines += [_row(p, r, "↳ of which" if r.part else r.stage) for r in p.rows]
    total = p.total
    lines.append(f"| **Σ stages** | | **{_us(total.wall_us)}** | **{_us(total.wall_us / p.inputs)}** | 100% "
                 f"| **{_us(total.cpu_us)}** | |")
    lines += [_row(p, r, f"*end to end: {r.stage}*") for r in p.whole]
    if (request := whole(p).get("request")) is not None:
        gap, cpu = request.timing.wall_us - total.wall_us, request.timing.cpu_us - total.cpu_us
        lines.append(f"| *left out of the stages* | whole request − Σ stages: middleware, fast path, job, futures "
                     f"and the inference thread's hops, metrics | {_us(gap)} | {_us(gap / p.inputs)} | "
                     f"{gap / total.wall_us:.0%} | {_us(cpu)} | |")
    runs = ", ".join(f"{n} × {t}" for n, t in p.batches)
    body, bound = p.body_bytes
    return (f"### {_title(p)}\n\n{p.served}. Batches run (inputs × padded tokens): {runs}. Response body: {body:,} bytes "
            f"(the bound the route counts, which picks how it is serialised: {bound:,}).\n\n" + "\n".join(lines) + "\n")


def facts(provider: str) -> dict:
    """The machine and the code measured (bench.facts), the few facts this report needs."""
    from bench.facts import load_average, machine_facts

    f = machine_facts(provider)
    keep = ("cpu", "cores usable (affinity, cgroup)", "cores on host", "onnxruntime", "python", "git commit")
    return {"date": time.strftime("%Y-%m-%d %H:%M %Z"), **{k: f[k] for k in keep if k in f},
            "load average (1, 5, 15 min) at the end": load_average()}


HOW = """\
How: `bench/stages.py` builds the app as `headwise serve` does (server.fastpath installed, the
engine prepared and started on a uvloop loop) and calls, for one request, each function the
server runs for it, one stage at a time: the median wall time per call, and the process's CPU
time per call (every thread: tokenizers' and onnxruntime's pools work off the calling thread;
a JSON body over 64 KiB is built on a worker thread), both less an empty call's. Rows in italics
(↳ of which) are parts of the row above, timed on their own and not added to the total.
"End to end" rows run the same request through `Engine.embed` (the event loop, the batcher, the
inference thread and back) and through the whole app on uvicorn's request cycle and a loopback
socket; what they take beyond Σ stages is the scheduling and bookkeeping between stages (where
the device run dominates, that difference is within the run's own spread and means nothing).
Not measured here: reading the request off the socket and parsing it (httptools), and the
connection's own events; `python -m bench.overhead` and `bench/host_work.py` measure the server's
whole CPU per request over HTTP.
"""


def write_report(out: Path, profiles: list[Profile], command: str, provider: str, how: dict) -> None:
    from bench.report import facts_table

    parts = ["# Host work per stage of one POST /v1/embed request, in process (issue 27)\n",
             f"Command: `{command}` ({', '.join(f'{k} {v}' for k, v in how.items())})\n",
             "## Machine\n", facts_table(facts(provider)), HOW,
             "## Summary: µs per request (per input), share of Σ stages\n", summary_table(profiles),
             "## Every stage\n", *(profile_table(p) for p in profiles)]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(parts))
