"""docker/compose.yaml and Grafana's provisioning, without a container engine: the services,
their ports, mounts and lock-down, and the dashboard Grafana is given (compose is run for real
by tests/e2e/test_docker_compose.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

DOCKER = Path(__file__).resolve().parents[3] / "docker"
GRACE_SECONDS = 25  # the default of HEADWISE_GRACE_SECONDS (headwise/service/settings.py)


def _compose() -> dict:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


def _published(service: dict) -> set[int]:
    """Host ports, with ${VAR:-default} read as its default."""
    ports = set()
    for p in service.get("ports", []):
        p = re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", p)
        ports.add(int(p.rsplit(":", 2)[-2]))
    return ports


def test_compose_services_ports_and_mounts():
    compose = _compose()
    services = compose["services"]
    assert {"headwise", "prometheus", "grafana", "headwise-gpu"} <= services.keys()
    # `docker compose -f docker/compose.yaml up`: 8000, 9090 and 3000 without any profile.
    default = {n: s for n, s in services.items() if not s.get("profiles")}
    assert {"headwise", "prometheus", "grafana"} <= default.keys()
    assert 8000 in _published(services["headwise"])
    assert 9090 in _published(services["prometheus"])
    assert 3000 in _published(services["grafana"])
    for name, svc in services.items():
        if "build" in svc:
            assert (DOCKER / svc["build"]["context"] / svc["build"]["dockerfile"]).is_file(), name
        for vol in svc.get("volumes", []):
            src = vol.split(":")[0]
            if src.startswith("."):
                assert (DOCKER / src).exists(), f"{name}: {src} does not exist"
    prom_cmd = " ".join(services["prometheus"]["command"])
    assert "--config.file=/etc/prometheus/prometheus.yml" in prom_cmd
    # compose builds nothing (make image does: the package is exported outside, BuildKit's
    # secrets); docker-compose 1.29 (Debian's) refuses a top-level `name:`.
    assert not any("build" in s for s in services.values())
    assert "name" not in compose
    assert services["headwise"]["image"] == "${HEADWISE_IMAGE:-headwise:cpu}"
    assert services["prometheus"]["image"] == "${PROMETHEUS_IMAGE:-prom/prometheus:v3.5.0}"


def test_compose_gpu_profile_reserves_a_gpu():
    gpu = _compose()["services"]["headwise-gpu"]
    assert gpu["profiles"] == ["gpu"]
    assert gpu["image"] == "headwise:gpu" and "build" not in gpu  # make image-gpu builds it
    (device,) = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]


@pytest.mark.parametrize("name", ["headwise", "headwise-gpu"])
def test_compose_headwise_is_locked_down(name):
    svc = _compose()["services"][name]
    assert svc["read_only"] is True
    assert any(t.split(":")[0] == "/tmp" for t in svc["tmpfs"])
    assert svc["cap_drop"] == ["ALL"]
    assert "no-new-privileges:true" in svc["security_opt"]
    assert int(svc["stop_grace_period"].rstrip("s")) > GRACE_SECONDS
    # `headwise serve --workers N` makes its own multiprocess directory under TMPDIR (/tmp);
    # a PROMETHEUS_MULTIPROC_DIR set here would have to exist already on the empty tmpfs.
    assert "PROMETHEUS_MULTIPROC_DIR" not in svc["environment"]


def test_grafana_provisioning_matches_dashboard():
    ds = yaml.safe_load((DOCKER / "grafana/provisioning/datasources/prometheus.yaml").read_text())
    (source,) = ds["datasources"]
    assert source["type"] == "prometheus" and source["url"] == "http://prometheus:9090"
    dash = json.loads((DOCKER / "grafana/dashboards/headwise.json").read_text())
    (ds_var,) = [v for v in dash["templating"]["list"] if v["type"] == "datasource"]
    assert ds_var["current"]["value"] == source["uid"]
    prov = yaml.safe_load((DOCKER / "grafana/provisioning/dashboards/headwise.yaml").read_text())
    (provider,) = prov["providers"]
    grafana = _compose()["services"]["grafana"]
    mounts = dict(v.split(":")[:2] for v in grafana["volumes"])
    assert mounts["./grafana/dashboards"] == provider["options"]["path"]
    assert mounts["./grafana/provisioning"] == "/etc/grafana/provisioning"
