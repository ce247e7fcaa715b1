"""The one server starter every harness uses: a process on a free loopback port, in a session
of its own (stopping it stops whatever it forked), its output in a log file, ready once its
readiness path answers 200. `start_headwise` is `headwise serve`, from this checkout or another.

Stdlib only: the GPU machine has no httpx, and bench.soak and bench.limits need nothing else.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

HOST = "127.0.0.1"
PRECISION = {"fp32": "fp32", "int8": "int8", "fp16": "fp16"}


def http(method: str, url: str, body: bytes | None = None, timeout: float = 60) -> tuple[int, bytes]:
    """(status, body) with the standard library only; (0, b"") when nothing answers."""
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


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without its HEADWISE_* settings, then `extra`: a server runs
    with the settings its harness names and no others."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEADWISE_")}
    env.update(extra or {})
    return env


def python_of(tree: Path | None) -> str:
    """The Python that runs a checkout's code: its own .venv's when it has one, else this one."""
    own = tree / ".venv" / "bin" / "python" if tree is not None else None
    return str(own) if own is not None and own.exists() else sys.executable


class Server:
    """A server process on loopback, started and stopped by the harness (its own process group).
    `log_dir` None: its output is dropped. `ready_streak`: how many readiness answers in a row
    make it ready (default: from HEADWISE_WORKERS, see wait_ready)."""

    def __init__(self, name: str, argv: list[str], env: dict, port: int, ready_path: str,
                 log_dir: Path | None, cwd: Path | None = None, ready_streak: int | None = None):
        self.name = name
        self.port = port
        self.url = f"http://{HOST}:{port}"
        self.ready_path = ready_path
        self.env = env
        self.ready_streak = ready_streak
        self.log = log_dir / f"{name}.log" if log_dir is not None else None
        self._log = self.log.open("wb") if self.log is not None else None
        out = self._log if self._log is not None else subprocess.DEVNULL
        self.proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                     cwd=cwd)

    def wait_ready(self, timeout: float = 300) -> None:
        """Until the server answers ready; with HEADWISE_WORKERS > 1, until 8 × workers probes
        in a row do (each probe is a new connection, which any worker may accept). A server that
        exits or is not ready in time is stopped, and the error carries its log's end."""
        deadline = time.monotonic() + timeout
        need = self.ready_streak or self._streak_for_workers()
        streak = 0
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._fail(f"{self.name} exited with {self.proc.returncode}")
            streak = streak + 1 if http("GET", self.url + self.ready_path, timeout=5)[0] == 200 else 0
            if streak >= need:
                return
            time.sleep(0.1 if streak == 0 else 0.01)
        self._fail(f"{self.name}: {self.ready_path} not 200 within {timeout:.0f} s")

    def _streak_for_workers(self) -> int:
        workers = self.env.get("HEADWISE_WORKERS", "auto")
        if workers == "1":
            return 1
        return 8 * (int(workers) if workers.isdigit() else 8)  # auto: up to 8 on CUDA

    def _fail(self, why: str) -> None:
        self.stop()
        raise RuntimeError(f"{why}:\n{self.tail()}")

    def tail(self, n: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:] if self.log is not None else ""
        except OSError:
            return ""

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM to its process group; SIGKILL after `timeout` s. Stopping twice is harmless."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        if self._log is not None:
            self._log.close()

    def metrics_text(self) -> str:
        status, body = http("GET", self.url + "/metrics", timeout=10)
        return body.decode(errors="replace") if status == 200 else ""


def start_headwise(models: str | Path, precision: str, provider: str, log_dir: Path | None,
                   extra_env: dict | None = None, tree: Path | None = None, name: str | None = None,
                   ready_streak: int | None = None) -> Server:
    """`headwise serve --models MODELS` (a package, or a folder of them) on a free port with a
    clean HEADWISE_* environment; from another checkout `tree` (its own .venv when it has one)
    for A/B runs. Not yet ready: call wait_ready."""
    env = clean_env({"HEADWISE_PROVIDER": provider, "HEADWISE_PRECISION": PRECISION[precision], **(extra_env or {})})
    port = free_port()
    argv = [python_of(tree), "-m", "headwise.cli", "serve", "--models", str(models),
            "--host", HOST, "--port", str(port), "--log-level", "warning"]
    return Server(name or f"headwise-{precision}", argv, env, port, "/health/ready", log_dir, cwd=tree,
                  ready_streak=ready_streak)
