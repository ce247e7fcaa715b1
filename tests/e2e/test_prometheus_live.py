"""A real Prometheus server scrapes a real headwise process, both on loopback (issue 7).

Prometheus (Debian's package) runs with a temporary data folder on a free 127.0.0.1 port,
scrapes headwise every second and loads docker/prometheus/alerts.yml. After some traffic
(inference, attention, tokenisation and client errors) the test asks Prometheus's HTTP API
for `headwise_requests_total > 0`, for every query of the Grafana dashboard (each must
return data) and for the alert rules' health. Both processes are stopped at the end;
Prometheus also runs under `timeout` so that it cannot outlive a crashed test run, and the
headwise server comes from tests/e2e/conftest.py's `start_server`, which stops every server
it started.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import yaml

from tests.fixtures.dashboard import dashboard_queries, substitute
from tests.fixtures.programs import require_program
from tests.fixtures.traffic import send_traffic

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "docker" / "prometheus" / "alerts.yml"
LOOPBACK = "127.0.0.1"
SCRAPE_S = 1
LIFETIME_S = 600  # hard cap on the Prometheus process (coreutils `timeout`)
RATE_INTERVAL = "30s"  # what Grafana's $__rate_interval becomes here (traffic lasts ~8 s)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]


def _need(program: str) -> str:
    return require_program(program, "apt-get install prometheus")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def _bounded(cmd: list[str]) -> list[str]:
    timeout = shutil.which("timeout")
    return [timeout, "--signal=TERM", "--kill-after=10", str(LIFETIME_S), *cmd] if timeout else cmd


def _stop(proc: subprocess.Popen, grace: float = 30) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def _wait_http(url: str, proc: subprocess.Popen, log: Path, within: float) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"{url}: the process exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.25)
    pytest.fail(f"{url} not 200 within {within:.0f} s:\n{log.read_text()[-3000:]}")


# ------------------------------------------------------------------ headwise


@pytest.fixture(scope="module", params=[1, 2], ids=lambda n: f"workers{n}")
def headwise_url(request, start_server):
    """A real `headwise serve` on the real default package (tests/e2e/conftest.py), with one
    worker and with two (prometheus-client's multiprocess mode, as HEADWISE_WORKERS=2 in
    compose gives)."""
    # every request sampled for head drift, so that the dashboard's Head drift row has data too
    srv = start_server(env={"HEADWISE_WORKERS": str(request.param), "HEADWISE_ATTENTION_SAMPLE": "1"})
    try:
        yield srv.url
    finally:
        srv.stop()


# ------------------------------------------------------------------ Prometheus


@pytest.fixture(scope="module")
def prometheus_url(headwise_url, tmp_path_factory):
    binary = _need("prometheus")
    work = tmp_path_factory.mktemp("prometheus")
    target = headwise_url.removeprefix("http://")
    config = {
        "global": {"scrape_interval": f"{SCRAPE_S}s", "scrape_timeout": f"{SCRAPE_S}s",
                   "evaluation_interval": f"{SCRAPE_S}s"},
        "rule_files": [str(ALERTS)],
        "scrape_configs": [{"job_name": "headwise", "static_configs": [{"targets": [target]}]}],
    }
    (work / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = _free_port()
    log = work / "prometheus.log"
    cmd = [binary, f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'data'}",
           f"--web.listen-address={LOOPBACK}:{port}", "--storage.tsdb.retention.time=1h",
           "--log.level=warn"]
    with log.open("wb") as out:
        proc = subprocess.Popen(_bounded(cmd), stdout=out, stderr=subprocess.STDOUT, cwd=work,
                                start_new_session=True)
    url = f"http://{LOOPBACK}:{port}"
    try:
        _wait_http(url + "/-/ready", proc, log, within=60)
        yield url
    finally:
        _stop(proc)


def _query(prom: str, expr: str) -> list[dict]:
    r = httpx.get(prom + "/api/v1/query", params={"query": expr}, timeout=10)
    body = r.json()
    assert r.status_code == 200 and body["status"] == "success", f"{expr}: {body}"
    return body["data"]["result"]


def _wait_for(prom: str, expr: str, within: float) -> list[dict]:
    deadline = time.monotonic() + within
    while True:
        result = _query(prom, expr)
        if result or time.monotonic() > deadline:
            return result
        time.sleep(0.5)


# ------------------------------------------------------------------ the test


def test_prometheus_scrapes_headwise_and_every_dashboard_query_has_data(headwise_url, prometheus_url):
    prom = prometheus_url
    assert _wait_for(prom, 'up{job="headwise"} == 1', within=30), "Prometheus never scraped headwise"

    sent = send_traffic(headwise_url)
    assert sent["ok"] > 20 and sent["error"] > 0, sent
    time.sleep(3 * SCRAPE_S + 1)  # let the last requests be scraped

    result = _wait_for(prom, 'headwise_requests_total{job="headwise"} > 0', within=15)
    assert result, "headwise_requests_total > 0 returned nothing"
    embed = _query(prom, 'sum(headwise_requests_total{job="headwise", route="/v1/embed", code="200"})')
    assert float(embed[0]["value"][1]) >= sent["ok"] * 0.5

    empty = []
    gpu = bool(_query(prom, 'count({__name__=~"headwise_gpu_.*"})'))  # NVML and a driver answered
    for where, q in dashboard_queries():
        expr = substitute(q, rate_interval=RATE_INTERVAL)
        if "headwise_gpu_" in expr and not gpu:
            continue  # the GPU row stays empty on a machine without one
        if not _query(prom, expr):
            empty.append(f"{where}: {expr}")
    assert not empty, "dashboard queries with no data:\n" + "\n".join(empty)


def test_alert_rules_load_and_evaluate_cleanly(prometheus_url):
    deadline = time.monotonic() + 20
    while True:
        groups = httpx.get(prometheus_url + "/api/v1/rules", timeout=10).json()["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        if (rules and all(r["health"] == "ok" for r in rules)) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    names = {r["name"] for r in rules}
    assert {"HeadwiseHighErrorRatio", "HeadwiseLatencySLOBreach", "HeadwiseQueueSaturated",
            "HeadwiseInstanceDown"} <= names
    bad = {r["name"]: r.get("lastError") for r in rules if r["health"] != "ok"}
    assert not bad, bad
    # headwise is up and healthy: nothing fires (client 4xx are not failures).
    firing = [r["name"] for r in rules if r.get("state") == "firing"]
    assert not firing, firing
