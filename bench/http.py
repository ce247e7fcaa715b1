"""headwise (and any server taking the same JSON) over HTTP, loaded by `wrk` with
bench/wrk/embed.lua: one request shape per run, N keep-alive connections (clients), closed
loop, loopback only. Falls back to bench/loadgen.py where no `wrk` is installed.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from bench.cells import Row, Sample
from bench.noise import TICK, group_ticks, ticks_since
from bench.workload import Workload

HERE = Path(__file__).resolve().parent
LUA = HERE / "wrk" / "embed.lua"
HOST = "127.0.0.1"
PRECISION = {"fp32": "fp32", "int8": "int8", "fp16": "fp16"}


def http(method: str, url: str, body: bytes | None = None, timeout: float = 60) -> tuple[int, bytes]:
    """(status, body) with the standard library only (the GPU machine has no httpx);
    (0, b"") when nothing answers."""
    req = urllib.request.Request(url, data=body, method=method,
                                 headers={"content-type": "application/json"} if body else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (urllib.error.URLError, OSError):
        return 0, b""


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class Server:
    """A server process on loopback, started and stopped by the harness (its own process group)."""

    def __init__(self, name: str, argv: list[str], env: dict, port: int, ready_path: str,
                 log_dir: Path, cwd: Path | None = None):
        self.name = name
        self.port = port
        self.url = f"http://{HOST}:{port}"
        self.ready_path = ready_path
        self.env = env
        self.log = log_dir / f"{name}.log"
        self._log = self.log.open("wb")
        self.proc = subprocess.Popen(argv, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True, cwd=cwd)

    def wait_ready(self, timeout: float = 300) -> None:
        """Until the server answers ready; with HEADWISE_WORKERS > 1, until 8 × workers probes
        in a row do (each probe is a new connection, which any worker may accept)."""
        deadline = time.monotonic() + timeout
        workers = self.env.get("HEADWISE_WORKERS", "auto")
        need = 8 * (int(workers) if workers.isdigit() else 8)  # auto: up to 8 on CUDA
        need = 1 if workers == "1" else need
        streak = 0
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.tail()}")
            streak = streak + 1 if http("GET", self.url + self.ready_path, timeout=5)[0] == 200 else 0
            if streak >= need:
                return
            time.sleep(0.1 if streak == 0 else 0.01)
        raise RuntimeError(f"{self.name}: {self.ready_path} not 200 within {timeout:.0f} s\n{self.tail()}")

    def tail(self, n: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def stop(self, timeout: float = 30) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._log.close()

    def metrics_text(self) -> str:
        status, body = http("GET", self.url + "/metrics", timeout=10)
        return body.decode(errors="replace") if status == 200 else ""


def start_headwise(workload: Workload, precision: str, provider: str, log_dir: Path,
                   extra_env: dict | None = None, tree: Path | None = None,
                   name: str | None = None) -> Server:
    """`headwise serve` on a free port with a clean HEADWISE_* environment; from another
    checkout `tree` (its own .venv when it has one) for A/B runs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEADWISE_")}
    env.update(HEADWISE_PROVIDER=provider, HEADWISE_PRECISION=PRECISION[precision])
    env.update(extra_env or {})
    python = sys.executable
    if tree is not None and (tree / ".venv" / "bin" / "python").exists():
        python = str(tree / ".venv" / "bin" / "python")
    port = free_port()
    argv = [python, "-m", "headwise.cli", "serve", "--models", str(workload.dir),
            "--host", HOST, "--port", str(port), "--log-level", "warning"]
    return Server(name or f"headwise-{precision}", argv, env, port, "/health/ready", log_dir, cwd=tree)


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
