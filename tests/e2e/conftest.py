"""End-to-end fixtures: the real default model package and real `headwise serve` processes.

- `default_package` (session): folder of the real all-MiniLM-L6-v2 package: the session's
  `minilm_package` (tests/conftest.py), exported once into a temp folder with the current
  exporter, or the one HEADWISE_TEST_PACKAGE names.
- `start_server` (module): factory `start_server(models=None, env=None, args=(), wait="ready",
  timeout=180) -> HeadwiseServer` running `headwise serve` on a free 127.0.0.1 port with a clean
  HEADWISE_* environment (provider cpu unless `env` says otherwise). Every server it started is
  stopped (SIGTERM, then SIGKILL) at the end of the test module, or earlier with `.stop()`:
  servers kept for the whole session (each holds its sessions' memory) outgrew the machine's
  memory. `_start_server` (session) is the same factory for the session's own servers.
- `server` (session): one fp32 CPU server on the default package, for tests that need nothing special;
  `matryoshka_server` (session): the same with HEADWISE_MATRYOSHKA_DIMENSIONS, for `dimensions`.
- `docker_engine` (session): a Docker engine that answers, started here when none runs;
  `image_build` / `image` (session): `make image` with the session's package, once per session
  for every module that asks (tests/e2e/test_docker*.py; helpers in tests/fixtures/docker.py).
- `browser` (module): Debian's chromium driven by Playwright; `open_viewer` (function): a factory
  that opens a server's viewer in a fresh page and, after the test, checks that the page raised
  no JavaScript error and requested nothing from another origin.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from tests.fixtures.docker import IMAGE, docker_engine_answers, make_image, models_copy, no_docker
from tests.fixtures.ports import free_port

REPO = Path(__file__).resolve().parents[2]
DEFAULT_NAME = "all-minilm-l6-v2"
# The engine in its own process, fed by two front-ends; ENGINE_MODES: each layout `headwise serve`
# ships, by name, for the suites that run in both
PROCESS_MODE = {"HEADWISE_ENGINE": "process", "HEADWISE_FRONTENDS": "2"}
ENGINE_MODES = {"inproc": {}, "process": PROCESS_MODE}


@dataclass
class HeadwiseServer:
    url: str
    port: int
    proc: subprocess.Popen
    log: Path
    env: dict = field(repr=False, default_factory=dict)

    def get(self, path: str, **kw) -> httpx.Response:
        return httpx.get(self.url + path, timeout=kw.pop("timeout", 60), **kw)

    def post(self, path: str, json=None, **kw) -> httpx.Response:
        return httpx.post(self.url + path, json=json, timeout=kw.pop("timeout", 120), **kw)

    def metrics(self) -> str:
        return self.get("/metrics").text

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def wait(self, path: str = "/health/ready", timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"headwise serve exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(self.url + path, timeout=5).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"{self.url}{path} not 200 within {timeout:.0f} s:\n{self.log_tail()}")

    def signal(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM, wait, then SIGKILL the process group; returns the exit code."""
        if self.proc.poll() is None:
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        return self.proc.returncode


def rss_mib(pid: int) -> float:
    """A process's resident memory, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def clean_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("HEADWISE_") and k != "PROMETHEUS_MULTIPROC_DIR"}
    env["HEADWISE_PROVIDER"] = "cpu"
    env.update({k: str(v) for k, v in extra.items()})
    return env


@pytest.fixture(scope="session")
def default_package(minilm_package) -> Path:
    """The real all-MiniLM-L6-v2 package (tests/conftest.py: exported once per session, or
    HEADWISE_TEST_PACKAGE)."""
    return minilm_package


@pytest.fixture(scope="session")
def _start_server(default_package, tmp_path_factory):
    started: list[HeadwiseServer] = []
    logs = tmp_path_factory.mktemp("server-logs")

    def start(models: Path | None = None, env: dict | None = None, args=(), wait: str | None = "ready",
              timeout: float = 180) -> HeadwiseServer:
        port = free_port()
        log = logs / f"serve-{port}.log"
        cmd = [sys.executable, "-m", "headwise.cli", "serve", "--models", str(models or default_package),
               "--host", "127.0.0.1", "--port", str(port), *args]
        with open(log, "wb") as fh:
            proc = subprocess.Popen(cmd, cwd=REPO, env=clean_env(**(env or {})), stdout=fh,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        srv = HeadwiseServer(f"http://127.0.0.1:{port}", port, proc, log, env or {})
        started.append(srv)
        if wait:
            srv.wait("/health/" + wait, timeout)
        return srv

    yield start
    for srv in started:
        srv.stop()


@pytest.fixture(scope="module")
def start_server(_start_server):
    mine: list[HeadwiseServer] = []

    def start(*args, **kwargs) -> HeadwiseServer:
        srv = _start_server(*args, **kwargs)
        mine.append(srv)
        return srv

    yield start
    for srv in mine:
        srv.stop()


@pytest.fixture(scope="session")
def server(_start_server) -> HeadwiseServer:
    return _start_server(env={"HEADWISE_PRECISION": "fp32"})


MATRYOSHKA = (1, 8, 64, 256, 383)


@pytest.fixture(scope="session")
def matryoshka_server(_start_server) -> HeadwiseServer:
    """`server` told (HEADWISE_MATRYOSHKA_DIMENSIONS) that the model may be cut to MATRYOSHKA's
    sizes: all-MiniLM-L6-v2 was not trained for it, so this tests the cut's arithmetic, never
    its quality; `server` itself refuses every cut."""
    return _start_server(env={"HEADWISE_PRECISION": "fp32",
                              "HEADWISE_MATRYOSHKA_DIMENSIONS": ",".join(map(str, MATRYOSHKA))})


CHROMIUM = os.environ.get("HEADWISE_CHROMIUM", "/usr/bin/chromium")
# Without the background-networking flags Chromium reaches for the internet, which is closed here.
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


@pytest.fixture(scope="session")
def model(server) -> str:
    """The served model's name (the first, when several are)."""
    return server.get("/v1/models").json()["data"][0]["name"]


def _no_browser(reason: str):
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: the browser tests must run)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser():
    """Debian's chromium driven by Playwright (never a downloaded browser)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _no_browser("playwright (Python) is not installed")
    exe = CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium")
    if not exe:
        _no_browser(f"no chromium at {CHROMIUM} (apt-get install chromium)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
        yield b
        b.close()


# The viewer has run its example sentence once on load. A function, not a bare expression:
# Playwright evals a bare expression inside the page while polling, which the page's CSP
# (no 'unsafe-eval') refuses whenever the first check fails.
VIEWER_READY = "() => document.body.dataset.state === 'ready' && Number(document.body.dataset.run) > 0"


def foreign_requests(urls: list[str], base: str) -> list[str]:
    """The URLs (data: and blob: aside) whose scheme and host:port are not those of `base`."""
    origin = urlsplit(base)
    return [u for u in urls if urlsplit(u).scheme not in ("data", "blob")
            and (urlsplit(u).scheme, urlsplit(u).netloc) != (origin.scheme, origin.netloc)]


@pytest.fixture
def open_viewer(browser):
    """Factory `open_viewer(url, ready=VIEWER_READY, height=800, timeout=60_000,
    accept_downloads=False) -> Page`: the viewer at `url` + "/" in a fresh 1280-wide context,
    once the JavaScript function `ready` is true. The page records what it requested
    (`page.requests`) and its JavaScript errors (`page.errors`); after the test every context
    is closed and each page must have had no error and requested nothing from another origin."""
    opened = []

    def open_(url: str, ready: str = VIEWER_READY, height: int = 800, timeout: float = 60_000,
              accept_downloads: bool = False):
        ctx = browser.new_context(viewport={"width": 1280, "height": height}, accept_downloads=accept_downloads)
        pg = ctx.new_page()
        pg.requests, pg.errors = [], []
        pg.on("request", lambda r: pg.requests.append(r.url))
        pg.on("pageerror", lambda e: pg.errors.append(str(e)))
        opened.append((ctx, pg, url))
        pg.goto(url + "/")
        pg.wait_for_function(ready, timeout=timeout)
        return pg

    yield open_
    for ctx, _, _ in opened:
        ctx.close()
    for _, pg, url in opened:
        assert not pg.errors, f"JavaScript errors on the page: {pg.errors}"
        assert foreign_requests(pg.requests, url) == []


# ---------------------------------------------------------------- Docker


@pytest.fixture(scope="session")
def docker_engine(tmp_path_factory):
    """A Docker engine that answers: the one running, or dockerd started here (and stopped)."""
    if not shutil.which("docker"):
        no_docker("no docker client (apt-get install docker.io)")
    started = None
    if not docker_engine_answers():
        dockerd = shutil.which("dockerd") or ("/usr/sbin/dockerd" if Path("/usr/sbin/dockerd").exists() else None)
        if not dockerd:
            no_docker("no Docker engine answers and there is no dockerd (apt-get install docker.io)")
        if os.geteuid() != 0:
            no_docker("no Docker engine answers and dockerd needs root")
        log = tmp_path_factory.mktemp("dockerd") / "dockerd.log"
        with open(log, "wb") as fh:
            started = subprocess.Popen([dockerd], stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 90
        while not docker_engine_answers():
            if started.poll() is not None or time.monotonic() > deadline:
                started.kill()
                pytest.fail(f"dockerd did not come up:\n{log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.5)
        print(f"started dockerd (pid {started.pid}, log {log})")
    yield
    if started:
        started.terminate()
        try:
            started.wait(60)
        except subprocess.TimeoutExpired:
            started.kill()


@pytest.fixture(scope="session")
def image_build(docker_engine, minilm_package, tmp_path_factory) -> dict:
    """`make image` with the session's package; returns what it took."""
    took = make_image("image", IMAGE=IMAGE, IMAGE_MODELS=str(models_copy(minilm_package, tmp_path_factory)))
    print(f"make image: {took:.0f} s")
    return {"seconds": round(took, 1)}


@pytest.fixture(scope="session")
def image(image_build) -> str:
    return IMAGE
