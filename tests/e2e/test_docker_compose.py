"""docker/compose.yaml for real, as far as this machine allows (issue 20): the compose file
itself, run by a real compose (Debian's docker-compose 1.29, or `docker compose`), with the
image `make image` built (the session's `image`, tests/e2e/conftest.py) and Prometheus from
Debian's package (`make image-prometheus`: prom/prometheus cannot be pulled here). Prometheus
finds headwise through compose's DNS, as the mounted docker/prometheus/prometheus.yml says, and
after some traffic every query of the Grafana dashboard returns data and the alert rules
evaluate cleanly. Grafana's image cannot be had here: its provisioning is checked by
tests/unit/deploy/test_docker.py and test_dashboard.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import httpx
import pytest

from tests.e2e.conftest import REPO, free_port
from tests.fixtures.dashboard import dashboard_queries, substitute
from tests.fixtures.docker import docker, no_docker
from tests.fixtures.traffic import send_traffic

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

COMPOSE_FILE = REPO / "docker" / "compose.yaml"
PROMETHEUS_IMAGE = "headwise/prometheus:debian"
RATE_INTERVAL = "2m"  # Grafana's $__rate_interval here: the scrape interval is 15 s


def _compose_command() -> list[str]:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    no_docker("no compose (apt-get install docker-compose)")
    raise AssertionError("unreachable")


@pytest.fixture(scope="module")
def prometheus_image(docker_engine):
    r = subprocess.run(["make", "--no-print-directory", "image-prometheus", f"PROMETHEUS_IMAGE={PROMETHEUS_IMAGE}"],
                       cwd=REPO, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-3000:]
    return PROMETHEUS_IMAGE


@pytest.fixture(scope="module")
def stack(image, prometheus_image):
    headwise_port, prometheus_port = free_port(), free_port()
    project = f"headwise-e2e-{headwise_port}"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("HEADWISE_")},
           "HEADWISE_IMAGE": image, "PROMETHEUS_IMAGE": prometheus_image,
           "HEADWISE_HOST_PORT": str(headwise_port), "PROMETHEUS_HOST_PORT": str(prometheus_port)}
    compose = [*_compose_command(), "-p", project, "-f", str(COMPOSE_FILE)]

    def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run([*compose, *args], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=timeout)

    up = run("up", "-d", "headwise", "prometheus")
    try:
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        yield {"headwise": f"http://127.0.0.1:{headwise_port}", "prometheus": f"http://127.0.0.1:{prometheus_port}",
               "project": project, "run": run}
    finally:
        if up.returncode != 0 or os.environ.get("HEADWISE_KEEP_LOGS"):
            print(run("logs", "--no-color").stdout[-5000:])
        run("down", "-v", "--timeout", "40")


def _container(stack, service: str) -> str:
    out = stack["run"]("ps", "-q", service).stdout.split()
    assert len(out) == 1, out
    return out[0]


def _query(prom: str, expr: str) -> list[dict]:
    r = httpx.get(prom + "/api/v1/query", params={"query": expr}, timeout=10)
    body = r.json()
    assert r.status_code == 200 and body["status"] == "success", f"{expr}: {body}"
    return body["data"]["result"]


def _wait(what, within: float, every: float = 1.0):
    deadline = time.monotonic() + within
    while True:
        got = what()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(every)


def test_compose_runs_headwise_locked_down_and_healthy(stack):
    cid = _container(stack, "headwise")

    def health():
        state = json.loads(docker("inspect", "-f", "{{json .State}}", cid).stdout)
        assert state["Status"] == "running", state
        return state.get("Health", {}).get("Status") == "healthy"

    assert _wait(health, 240), "the headwise service never turned healthy"
    host = json.loads(docker("inspect", "-f", "{{json .HostConfig}}", cid).stdout)
    assert host["ReadonlyRootfs"] is True and host["CapDrop"] == ["ALL"]
    assert "no-new-privileges:true" in host["SecurityOpt"]
    assert docker("exec", cid, "id", "-u").stdout.strip() == "10001"
    assert httpx.get(stack["headwise"] + "/health/ready", timeout=10).status_code == 200


def test_prometheus_scrapes_headwise_in_compose_and_the_dashboard_has_data(stack):
    prom = stack["prometheus"]
    assert _wait(lambda: _ready(prom), 120), "Prometheus never became ready"
    # dns_sd_configs: the A record of the compose service `headwise`, refreshed every 15 s.
    up = _wait(lambda: _query(prom, 'up{job="headwise"} == 1'), 120)
    assert up, _query(prom, "up")
    assert up[0]["metric"]["service"] == "headwise"

    sent = send_traffic(stack["headwise"], seconds=40)  # spans at least two 15 s scrapes
    assert sent["ok"] > 20 and sent["error"] > 0, sent
    embed = 'sum(headwise_requests_total{job="headwise", route="/v1/embed", code="200"})'
    assert _wait(lambda: [r for r in _query(prom, embed) if float(r["value"][1]) >= sent["ok"] * 0.5], 45)

    # The GPU panels read headwise_gpu_* (NVML): the CPU image has no GPU and no nvidia-ml-py,
    # so those panels are empty by design, as are the Head drift row's (headwise_head_*: the
    # compose file leaves HEADWISE_ATTENTION_SAMPLE at 0); every other query must return data.
    empty, gpu = [], []
    for where, q in dashboard_queries():
        expr = substitute(q, rate_interval=RATE_INTERVAL)
        if not _query(prom, expr):
            (gpu if "headwise_gpu_" in expr or "headwise_head_" in expr else empty).append(f"{where}: {expr}")
    assert not empty, "dashboard queries with no data:\n" + "\n".join(empty)
    print(f"{len(dashboard_queries()) - len(gpu)} dashboard queries return data; "
          f"{len(gpu)} GPU and head-drift queries are empty on the CPU image with sampling off")

    groups = httpx.get(prom + "/api/v1/rules", timeout=10).json()["data"]["groups"]
    rules = [r for g in groups for r in g["rules"]]
    assert len(rules) >= 4 and all(r["health"] == "ok" for r in rules), rules


def _ready(prom: str) -> bool:
    try:
        return httpx.get(prom + "/-/ready", timeout=5).status_code == 200
    except httpx.TransportError:
        return False
