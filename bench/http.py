"""headwise (and any server taking the same JSON) over HTTP, loaded by `wrk` with
bench/wrk/embed.lua: one request shape per run, N keep-alive connections (clients), closed
loop, loopback only. Falls back to bench/loadgen.py where no `wrk` is installed. The servers
come from bench/server.py.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from bench.cells import Row, Sample
from bench.noise import TICK, group_ticks, ticks_since
from bench.server import Server, http
from bench.workload import Workload

HERE = Path(__file__).resolve().parent
LUA = HERE / "wrk" / "embed.lua"


def histogram_totals(metrics_text: str, name: str) -> tuple[float, float]:
    """(sum, count) of a Prometheus histogram over every label set (e.g. every variant)."""
    pattern = re.compile(rf"^{re.escape(name)}_(sum|count)\{{[^}}]*\}}\s+([0-9.eE+-]+)$", re.M)
    tot = {"sum": 0.0, "count": 0.0}
    for kind, value in pattern.findall(metrics_text):
        tot[kind] += float(value)
    return tot["sum"], tot["count"]


def batch_totals(metrics_text: str) -> tuple[float, float]:
    """(sum, count) of headwise_batch_size: inputs and inference calls."""
    return histogram_totals(metrics_text, "headwise_batch_size")


def server_stats(before: str, after: str, wall_s: float) -> dict:
    """What the server's own metrics say about a cell: mean inputs per inference call, mean
    padded length per input, mean onnxruntime time per call, and the share of the wall time
    onnxruntime was running."""
    out: dict = {}
    (b_sum, b_n), (a_sum, a_n) = batch_totals(before), batch_totals(after)
    if a_n > b_n:
        out["mean_batch"] = (a_sum - b_sum) / (a_n - b_n)
        out["calls"] = a_n - b_n
        (b_tok, _), (a_tok, _) = (histogram_totals(x, "headwise_batch_tokens") for x in (before, after))
        if a_tok > b_tok:
            out["padded"] = (a_tok - b_tok) / (a_sum - b_sum)
    (b_t, b_c), (a_t, a_c) = (histogram_totals(x, "headwise_inference_duration_seconds")
                              for x in (before, after))
    if a_c > b_c and wall_s > 0:
        out["infer_ms"] = 1000 * (a_t - b_t) / (a_c - b_c)
        out["ort_busy"] = (a_t - b_t) / wall_s
    return out


def probe(url: str, body: bytes, expect_attention: bool) -> None:
    """One request before timing: it must answer 200 with an embedding (and attention if asked)."""
    status, answer = http("POST", url, body, timeout=120)
    if status != 200:
        raise RuntimeError(f"{url} answered {status}: {answer[:300]!r}")
    item = json.loads(answer)["data"][0]
    if not item.get("embedding"):
        raise RuntimeError(f"{url}: no embedding in the answer")
    if expect_attention and "attention" not in item:
        raise RuntimeError(f"{url}: attention asked for but not returned")


def have_wrk() -> bool:
    return shutil.which("wrk") is not None


def load(url: str, body: bytes, connections: int, seconds: float, timeout: float = 60) -> dict:
    """Run one load cell; → wrk's numbers (latency in µs)."""
    if not have_wrk():
        from bench import loadgen

        return loadgen.load(url, body, connections, seconds, timeout)
    with tempfile.NamedTemporaryFile("wb", suffix=".json", delete=False) as f:
        f.write(body)
        body_file = f.name
    try:
        env = dict(os.environ, HEADWISE_BENCH_BODY=body_file)
        argv = ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s",
                f"--timeout={int(timeout)}s", "-s", str(LUA), url]
        out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=seconds + timeout + 30)
    finally:
        os.unlink(body_file)
    return parse_wrk(out.stdout, out.stderr)


def parse_wrk(stdout: str, stderr: str = "") -> dict:
    for line in stdout.splitlines():
        if line.startswith("HEADWISE_JSON "):
            return json.loads(line[len("HEADWISE_JSON "):])
    raise RuntimeError(f"wrk gave no result line:\n{stdout[-1500:]}\n{stderr[-1500:]}")


def sample_from(res: dict, inputs_per_request: int = 1) -> Sample:
    n = res.get("requests", 0)
    dur = res.get("duration_us", 0) / 1e6
    errors = sum(res.get(k, 0) for k in ("connect", "read", "write", "status", "timeout"))
    ok = n > 0 and "p50" in res
    return Sample(
        throughput=(n * inputs_per_request / dur) if dur else 0.0,
        p50=res["p50"] / 1000 if ok else float("nan"),
        p95=res["p95"] / 1000 if ok else float("nan"),
        p99=res["p99"] / 1000 if ok else float("nan"),
        requests=n, errors=errors,
    )


def tree_ticks(server) -> dict[int, int] | None:
    """CPU ticks of the server's process group (it and what it forked), by pid; None for a
    server the harness did not start, whose processes it does not know."""
    proc = getattr(server, "proc", None)
    return group_ticks([proc.pid]) if proc is not None else None


def cpu_us_per_input(before: dict | None, after: dict | None, inputs: int) -> float:
    """User + system CPU of a server's processes between two `tree_ticks` snapshots, in µs per
    input completed; nan when unknown."""
    if before is None or after is None or inputs <= 0:
        return math.nan
    return ticks_since(before, after) / TICK / inputs * 1e6


def measure(server: Server, path: str, body: bytes, connections: int, seconds: float,
            timeout: float = 60, inputs_per_request: int = 1) -> Sample:
    """One repetition of one cell, with the server's mean batch size and its CPU per input over
    it when known. The /metrics scrapes fall outside the CPU snapshots."""
    before = server.metrics_text()
    t0 = tree_ticks(server)
    res = load(server.url + path, body, connections, seconds, timeout)
    t1 = tree_ticks(server)
    after = server.metrics_text()
    s = sample_from(res, inputs_per_request)
    s.extra.update(server_stats(before, after, res.get("duration_us", 0) / 1e6))
    s.extra["server_cpu_us_per_input"] = cpu_us_per_input(t0, t1, s.requests * inputs_per_request)
    return s


def headwise_row(workload: Workload, variant: str, tokens: int, clients: int) -> Row:
    return Row("headwise", variant, tokens, workload.effective(tokens), concurrency=clients)
