"""docker/: hadolint on both Dockerfiles, their structure, .dockerignore and compose.yaml (issue 7).

No container engine runs here, so images are not built: these tests check what can be
checked without one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
DOCKER = ROOT / "docker"
DOCKERFILES = {"cpu": DOCKER / "Dockerfile", "gpu": DOCKER / "Dockerfile.gpu"}
HADOLINT_CONFIG = ROOT / ".hadolint.yaml"
GRACE_SECONDS = 25  # the default of HEADWISE_GRACE_SECONDS (service/settings.py)


def _program(name: str) -> str:
    """The program in this venv or on PATH; skip without it locally, fail in CI (CI=true)."""
    here = Path(sys.executable).parent / name
    found = str(here) if here.is_file() else shutil.which(name)
    if found:
        return found
    message = f"{name} not found (it comes with pip install -e '.[test]')"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


# ------------------------------------------------------------------ hadolint


@pytest.mark.parametrize("kind", DOCKERFILES)
def test_hadolint_passes(kind):
    hadolint = _program("hadolint")
    res = subprocess.run(
        [hadolint, "--config", str(HADOLINT_CONFIG), "--no-color", str(DOCKERFILES[kind])],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )
    assert res.returncode == 0 and not res.stdout.strip(), res.stdout + res.stderr


def test_hadolint_is_strict_on_a_bad_dockerfile(tmp_path):
    """The same config fails an unpinned, cached, root, shell-form Dockerfile."""
    hadolint = _program("hadolint")
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python\nRUN pip install flask\nCMD python -m flask run\n")
    res = subprocess.run(
        [hadolint, "--config", str(HADOLINT_CONFIG), "--no-color", "-f", "json", str(bad)],
        capture_output=True, text=True, timeout=60,
    )
    assert res.returncode != 0
    codes = {f["code"] for f in json.loads(res.stdout)}
    assert {"DL3006", "DL3013", "DL3042", "DL3025"} <= codes


def test_hadolint_ignores_are_documented():
    text = HADOLINT_CONFIG.read_text()
    cfg = yaml.safe_load(text)
    assert cfg.get("failure-threshold") == "style"
    ignored = cfg.get("ignored") or []
    assert len(ignored) <= 2, "keep hadolint ignores few"
    lines = text.splitlines()
    for code in ignored:
        (at,) = [i for i, line in enumerate(lines) if re.fullmatch(rf"\s*-\s*{code}\s*", line)]
        reason = []
        for line in reversed(lines[:at]):
            if not line.strip().startswith("#"):
                break
            reason.append(line)
        assert any(code in r for r in reason), f"{code}: no comment above it says why it is ignored"
        assert len(" ".join(reason)) > 80, f"{code}: the reason is too short"
    # No inline `# hadolint ignore=` pragmas hiding elsewhere.
    for path in DOCKERFILES.values():
        assert "hadolint ignore" not in path.read_text()


# ------------------------------------------------------------------ Dockerfile structure


def _instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out, buf = [], ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if buf and line.startswith("#"):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        word, _, rest = buf.partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = ""
    return out


def _stages(path: Path) -> list[list[tuple[str, str]]]:
    stages: list[list[tuple[str, str]]] = []
    for ins in _instructions(path):
        if ins[0] == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(ins)
    return stages


@pytest.mark.parametrize("kind", DOCKERFILES)
def test_dockerfile_multi_stage_with_clean_runtime(kind):
    stages = _stages(DOCKERFILES[kind])
    assert len(stages) >= 2
    names = [re.search(r"\bAS\s+(\S+)", s[0][1], re.I).group(1) for s in stages]
    assert names[-1] == "runtime"
    build = "\n".join(a for s in stages[:-1] for _, a in s)
    # The build stage: torch's CPU wheel and the export extras, then the export itself.
    assert "https://download.pytorch.org/whl/cpu" in build
    assert '".[export]"' in build and "-c constraints.txt" in build
    assert "headwise export" in build and "--out /models" in build
    assert "CHECKPOINT_DIR" in build
    runtime = stages[-1]
    runtime_text = "\n".join(f"{i} {a}" for i, a in runtime)
    # The runtime stage installs nothing with pip and has no torch nor compiler.
    assert "pip install" not in runtime_text
    for banned in ("torch", "gcc", "build-essential", "g++", "[export]"):
        assert banned not in runtime_text, banned
    copies = [a for i, a in runtime if i == "COPY"]
    assert any("--from=venv" in a and "/opt/venv" in a for a in copies)
    assert any("--from=export" in a and "/models" in a for a in copies)
    assert "PIP_NO_CACHE_DIR=1" in "\n".join(a for s in stages[:-1] for i, a in s if i == "ENV")


@pytest.mark.parametrize("kind", DOCKERFILES)
def test_dockerfile_runtime_contract(kind):
    runtime = _stages(DOCKERFILES[kind])[-1]
    by = {}
    for ins, args in runtime:
        by.setdefault(ins, []).append(args)
    # Non-root, numeric (Kubernetes' runAsNonRoot can check it).
    (user,) = by["USER"]
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) != 0
    # Exec-form entrypoint: the server gets SIGTERM itself.
    (entrypoint,) = by["ENTRYPOINT"]
    assert json.loads(entrypoint) == ["headwise", "serve"]
    (cmd,) = by["CMD"]
    cmd = json.loads(cmd)
    assert cmd[cmd.index("--models") + 1] == "/models"
    assert cmd[cmd.index("--host") + 1] == "0.0.0.0"
    assert cmd[cmd.index("--port") + 1] == "8000"
    assert by["EXPOSE"] == ["8000"]
    # HEALTHCHECK on /health/ready, exec form, with the image's python (no curl/wget).
    (hc,) = by["HEALTHCHECK"]
    assert "/health/ready" in hc
    probe = json.loads(hc[hc.index("CMD") + 3:])
    assert probe[0] == "python" and probe[1] == "-c"
    assert "curl" not in hc and "wget" not in hc
    # Read-only root: temp and home under /tmp, no bytecode writes.
    env = " ".join(by["ENV"])
    for setting in ("PYTHONDONTWRITEBYTECODE=1", "HOME=/tmp", "TMPDIR=/tmp",
                    "HEADWISE_MODELS_DIR=/models", "PATH=/opt/venv/bin"):
        assert setting in env, setting


def test_healthcheck_one_liner_runs(tmp_path):
    """The HEALTHCHECK command exits 0 on 200 and non-zero on 503 or no server."""
    import http.server
    import threading

    (hc,) = [a for i, a in _stages(DOCKERFILES["cpu"])[-1] if i == "HEALTHCHECK"]
    code = json.loads(hc[hc.index("CMD") + 3:])[2]
    status = {"code": 200}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(status["code"] if self.path == "/health/ready" else 404)
            self.end_headers()

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = {**os.environ, "HEADWISE_PORT": str(server.server_address[1])}

    def run() -> int:
        return subprocess.run([sys.executable, "-c", code], env=env,
                              capture_output=True, timeout=30).returncode

    try:
        assert run() == 0
        status["code"] = 503
        assert run() != 0
    finally:
        server.shutdown()
        server.server_close()
    assert run() != 0  # nothing listening


def test_gpu_image_is_cuda13_with_cudnn():
    text = DOCKERFILES["gpu"].read_text()
    (base,) = re.findall(r"^ARG CUDA_IMAGE=(\S+)$", text, re.M)
    assert re.fullmatch(r"nvidia/cuda:13\.\d+\.\d+-cudnn-runtime-ubuntu\d\d\.\d\d", base)
    assert text.count("FROM ${CUDA_IMAGE}") == 2  # the venv is built on the runtime's own Python


def test_copied_sources_exist_and_are_in_the_build_context():
    """Every COPY source is in the repo and let through by .dockerignore's allowlist."""
    ignore = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    assert ignore[0] == "*", ".dockerignore starts by excluding everything"
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    for d in ("venv", ".venv", ".git", "models"):
        assert d not in allowed
    for path in DOCKERFILES.values():
        for ins, args in _instructions(path):
            if ins != "COPY" or "--from=" in args:
                continue
            *sources, _dest = args.split()
            for src in sources:
                name = src.rstrip("/")
                assert name in allowed, f"{path.name}: COPY {src} is excluded by .dockerignore"
                assert (ROOT / name).exists(), f"{path.name}: COPY {src}: no such path in the repo"


# ------------------------------------------------------------------ compose.yaml


def _compose() -> dict:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


def _published(service: dict) -> set[int]:
    return {int(p.rsplit(":", 2)[-2]) for p in service.get("ports", [])}


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


def test_compose_gpu_profile_reserves_a_gpu():
    gpu = _compose()["services"]["headwise-gpu"]
    assert gpu["profiles"] == ["gpu"]
    assert gpu["build"]["dockerfile"] == "docker/Dockerfile.gpu"
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


@pytest.mark.parametrize("kind", DOCKERFILES)
def test_image_commands_match_the_cli(kind):
    """The export flags and the serve arguments the images use are accepted by headwise's CLI."""
    import argparse

    from export import cli_export
    from service import cli as serve_cli

    text = DOCKERFILES[kind].read_text()
    (export_args,) = re.findall(r'^ARG EXPORT_ARGS="([^"]*)"$', text, re.M)
    p = argparse.ArgumentParser()
    cli_export.add_arguments(p)
    p.parse_args(["--out", "/models", *export_args.split()])
    p.parse_args(["/context/checkpoints/x", "--name", "x", "--out", "/models", *export_args.split()])

    (cmd,) = [a for i, a in _stages(DOCKERFILES[kind])[-1] if i == "CMD"]
    p = argparse.ArgumentParser()
    serve_cli.add_arguments(p)
    args = p.parse_args(json.loads(cmd))
    assert (args.models, args.host, args.port) == ("/models", "0.0.0.0", 8000)
