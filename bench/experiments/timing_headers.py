"""What TEI's timing headers add to one answer's host work, in process (issue 29): the same
response sent with and without them through uvicorn's own request cycle on a loopback TCP
connection wrapped as `headwise serve` wraps it (bench.stages_http), on a uvloop loop.

    python -m bench.experiments.timing_headers                    # → stdout: a Markdown table
    python -m bench.experiments.timing_headers --blocks 41 --per-block 2000

"with" is service.api.timing.tei_headers (its clock read and eight header lines) plus the
response carrying them (service.api.responses.BudgetedResponse) sent; "without" is the response
alone sent. Blocks of each alternate; the process's CPU time per answer is the median over the
blocks. A whole-server A/B (bench.overhead, before and after) cannot resolve a few µs on a
shared 2-core machine; this can, since both sides run in one process, alternating.
"""

from __future__ import annotations

import argparse
import statistics
import time
from types import SimpleNamespace

from bench.stages_http import Loopback, body_receive, http_scope

PATH = "/v1/embed"
ANSWER = b'{"model":"all-minilm-l6-v2","data":[{"index":0,"embedding":[' + b"0.0123456," * 383 + \
    b'0.1]}],"usage":{"prompt_tokens":16,"total_tokens":16}}'


async def _block(conn: Loopback, n: int, headers: bool) -> float:
    """µs of process CPU per answer, over `n` answers sent."""
    from headwise.service.api.responses import BudgetedResponse
    from headwise.service.api.timing import tei_headers
    from headwise.service.engine.budget import ResponseBudget
    from headwise.service.engine.stats import Timing

    budget = ResponseBudget(1 << 30)
    rt = SimpleNamespace(backend=SimpleNamespace(provider="cpu"))
    result = SimpleNamespace(timing=Timing(tokenize=0.0004, queue=0.0011, infer=0.0031), n_tokens=16)
    scope, receive = http_scope(PATH, b"{}"), body_receive(b"{}")
    t0 = time.process_time_ns()
    for _ in range(n):
        started = time.perf_counter()
        with budget.reserve(len(ANSWER)) as reservation:
            h = tei_headers(rt, result, started, 71) if headers else None
            response = BudgetedResponse(ANSWER, reservation, headers=h)
        await response(scope, receive, conn.cycle(scope).send)
        conn.flush()
        await conn.drained()
    return (time.process_time_ns() - t0) / n / 1000


async def measure(blocks: int, per_block: int) -> dict:
    conn = await Loopback.open()
    try:
        await _block(conn, per_block, True)  # warm both
        await _block(conn, per_block, False)
        without, with_ = [], []
        for _ in range(blocks):
            without.append(await _block(conn, per_block, False))
            with_.append(await _block(conn, per_block, True))
    finally:
        await conn.close()
    diffs = [w - o for w, o in zip(with_, without, strict=True)]
    return {"without_us": statistics.median(without), "with_us": statistics.median(with_),
            "added_us": statistics.median(diffs), "added_us_q1_q3": statistics.quantiles(diffs, n=4)[::2]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blocks", type=int, default=21)
    ap.add_argument("--per-block", type=int, default=2000)
    a = ap.parse_args()
    import uvloop

    from headwise.export import cpu as cpu_info

    r = uvloop.run(measure(a.blocks, a.per_block))
    print(f"bench.experiments.timing_headers on {cpu_info.label()}, {a.blocks} blocks of {a.per_block} answers each side\n")
    print("| answer sent | µs of process CPU per answer (median of blocks) |")
    print("|---|---:|")
    print(f"| without the timing headers | {r['without_us']:.2f} |")
    print(f"| with them (tei_headers + the response carrying them) | {r['with_us']:.2f} |")
    q1, q3 = r["added_us_q1_q3"]
    print(f"| added (median of the blocks' differences; quartiles) | {r['added_us']:.2f} ({q1:.2f} … {q3:.2f}) |")


if __name__ == "__main__":
    main()
