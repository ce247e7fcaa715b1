"""docker/: hadolint on both Dockerfiles, their structure, .dockerignore and the build scripts (issues 7 and 20), all without a container engine. The images themselves are
built and run by tests/e2e/test_docker.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.fixtures.programs import require_program

ROOT = Path(__file__).resolve().parents[3]
DOCKER = ROOT / "docker"
DOCKERFILES = {"cpu": DOCKER / "Dockerfile", "gpu": DOCKER / "Dockerfile.gpu"}
# Linted too: Prometheus from Debian's package, for compose where prom/prometheus cannot be pulled.
LINTED = {**DOCKERFILES, "prometheus": DOCKER / "Dockerfile.prometheus"}
HADOLINT_CONFIG = ROOT / ".hadolint.yaml"


def _program(name: str) -> str:
    """The program in this venv or on PATH; skip without it locally, fail in CI (CI=true)."""
    return require_program(name, "it comes with pip install -e '.[test]'", in_venv=True)


# ------------------------------------------------------------------ hadolint


@pytest.mark.parametrize("kind", LINTED)
def test_hadolint_passes(kind):
    hadolint = _program("hadolint")
    res = subprocess.run(
        [hadolint, "--config", str(HADOLINT_CONFIG), "--no-color", str(LINTED[kind])],
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
    for path in LINTED.values():
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
    text = DOCKERFILES[kind].read_text()
    # No `# syntax=` line: BuildKit would pull a frontend image (offline builds fail).
    assert not re.search(r"^#\s*syntax\s*=", text, re.M | re.I)
    stages = _stages(DOCKERFILES[kind])
    names = [re.search(r"\bAS\s+(\S+)", s[0][1], re.I).group(1) for s in stages]
    assert names == ["venv", "models", "runtime"]
    build = "\n".join(a for s in stages[:-1] for _, a in s)
    # No stage installs torch: the package is exported outside (make image) and copied in.
    assert "torch" not in build.replace('"import torch"', "").replace('"torch in the runtime"', "")
    assert 'if /opt/venv/bin/python -c "import torch"' in build  # and the venv stage checks it
    assert "download.pytorch.org" not in text and "[export]" not in text
    assert "-c constraints.txt" in build and "docker/requirements.py" in build
    # pip's CA bundle is a build secret (never a layer), its wheels a BuildKit cache.
    pip_runs = [a for s in stages for i, a in s if i == "RUN" and "pip install" in a]
    assert len(pip_runs) == 2
    for run in pip_runs:
        assert "--mount=type=secret,id=pipcert" in run and "/run/secrets/pipcert" in run
        assert "--mount=type=cache,target=/root/.cache/pip" in run
    assert "--no-deps" in pip_runs[1] and "uninstall --yes --quiet setuptools pip" in pip_runs[1]
    (models,) = [s for s in stages if re.search(r"\bAS\s+models\b", s[0][1])]
    assert models[0][1].startswith("scratch") and any(i == "COPY" and "/models/" in a for i, a in models)
    runtime = stages[-1]
    runtime_text = "\n".join(f"{i} {a}" for i, a in runtime)
    # The runtime stage installs nothing with pip and has no torch nor compiler.
    assert "pip install" not in runtime_text
    for banned in ("torch", "gcc", "build-essential", "g++", "[export]", "--mount"):
        assert banned not in runtime_text, banned
    copies = [a for i, a in runtime if i == "COPY"]
    assert any("--from=venv" in a and "/opt/venv" in a for a in copies)
    assert any("--from=models" in a and "/models" in a for a in copies)


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
    # No CMD: flags would override HEADWISE_PORT (and the HEALTHCHECK probes HEADWISE_PORT);
    # the settings come from the environment, arguments after the image name are extra flags.
    assert "CMD" not in by
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
                    "HEADWISE_MODELS_DIR=/models", "HEADWISE_HOST=0.0.0.0", "HEADWISE_PORT=8000",
                    "PATH=/opt/venv/bin"):
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
    assert "docker/requirements.py onnxruntime-gpu gpu" in text  # nvidia-ml-py, the GPU metrics


def test_copied_sources_exist_and_are_in_the_build_context():
    """Every COPY source is in the repo and let through by .dockerignore's allowlist."""
    ignore = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    assert ignore[0] == "*", ".dockerignore starts by excluding everything"
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    for d in ("venv", ".venv", ".git", "models", "build", "docker"):
        assert d not in allowed
    # The exported packages docker/build.sh stages, whole (after the *.onnx exclusions).
    assert ignore[-1] == "!build/image/**" and "build/image" in allowed
    for path in DOCKERFILES.values():
        for ins, args in _instructions(path):
            if ins != "COPY" or "--from=" in args:
                continue
            *sources, _dest = args.split()
            for src in sources:
                name = src.rstrip("/")
                if name == "${MODELS}":
                    (default,) = re.findall(r"^ARG MODELS=(\S+)$", path.read_text(), re.M)
                    assert default == "build/image/models" and default.startswith("build/image/")
                    continue
                assert name in allowed, f"{path.name}: COPY {src} is excluded by .dockerignore"
                assert (ROOT / name).exists(), f"{path.name}: COPY {src}: no such path in the repo"


@pytest.mark.parametrize("kind", DOCKERFILES)
def test_image_commands_match_the_cli(kind, monkeypatch):
    """The export flags `make image`/`make image-gpu` use are accepted by headwise's CLI, and the
    image's settings (HEADWISE_* in its ENV) are accepted by `headwise serve`'s settings."""
    import argparse

    from headwise.export import cli_export
    from headwise.service.settings import load_settings

    var = {"cpu": "IMAGE_EXPORT_ARGS", "gpu": "IMAGE_GPU_EXPORT_ARGS"}[kind]
    (export_args,) = re.findall(rf"^{var} \?= (.*)$", (ROOT / "Makefile").read_text(), re.M)
    p = argparse.ArgumentParser()
    cli_export.add_arguments(p)
    args = p.parse_args(["--out", "/models", *export_args.split()])
    assert (args.int8, args.fp16) == ((True, False) if kind == "cpu" else (False, True))
    p.parse_args(["checkpoints/x", "--name", "x", "--out", "/models", *export_args.split()])

    env = " ".join(a for i, a in _stages(DOCKERFILES[kind])[-1] if i == "ENV")
    for name in [k for k in os.environ if k.startswith("HEADWISE_")]:
        monkeypatch.delenv(name)
    for name, value in re.findall(r"\b(HEADWISE_[A-Z_]+)=(\S+)", env):
        monkeypatch.setenv(name, value)
    settings = load_settings()
    assert (str(settings.models_dir), settings.host, settings.port) == ("/models", "0.0.0.0", 8000)
    assert settings.provider == {"cpu": "cpu", "gpu": "cuda"}[kind]


# ------------------------------------------------------------------ build scripts


def _requirements_module():
    sys.path.insert(0, str(DOCKER))
    try:
        import requirements as reqs
    finally:
        sys.path.remove(str(DOCKER))
    return reqs


def _pin(name: str, text: str | None = None) -> str:
    text = (ROOT / "constraints.txt").read_text() if text is None else text
    (pin,) = re.findall(rf"^{re.escape(name)}==(\S+)$", text, re.M)
    return pin


def test_runtime_requirements_are_pyprojects_with_the_cpu_wheel_pinned_in_constraints():
    """The CPU image's default: onnxruntime's CPU wheel at constraints.txt's onnxruntime pin,
    which is onnxruntime-gpu's version; the GPU image: pyproject.toml's own requirements."""
    reqs = _requirements_module()
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    # Both wheels pinned, at one version: the CPU image answers as the tested onnxruntime-gpu does.
    assert _pin("onnxruntime") == _pin("onnxruntime-gpu")
    assert reqs.cpu_wheel_version(ROOT) == _pin("onnxruntime")
    assert reqs.requirements(ROOT, "onnxruntime-gpu") == project["dependencies"]
    assert reqs.requirements(ROOT, "onnxruntime-gpu", "gpu") == [*project["dependencies"],
                                                                  *project["optional-dependencies"]["gpu"]]
    cpu = reqs.requirements(ROOT)
    assert cpu == reqs.requirements(ROOT, "onnxruntime")
    assert not any(r.startswith("onnxruntime-gpu") for r in cpu)
    assert f"onnxruntime=={_pin('onnxruntime')}; platform_system == 'Linux' and platform_machine == 'x86_64'" in cpu
    assert len(cpu) == len(project["dependencies"])
    with pytest.raises(SystemExit):
        reqs.requirements(ROOT, "onnxruntime-rocm")
    # Run as the image runs it (standard library only, any working directory), no argument
    # meaning the CPU wheel.
    for argv in ([], ["onnxruntime"]):
        out = subprocess.run([sys.executable, str(DOCKER / "requirements.py"), *argv], cwd=DOCKER,
                             capture_output=True, text=True, check=True, timeout=30).stdout.splitlines()
        assert out == cpu


@pytest.mark.parametrize("edit", ["drop", "differ"])
def test_the_cpu_wheel_needs_its_own_pin_at_the_gpu_wheels_version(tmp_path, edit):
    """No onnxruntime pin, or one at another version than onnxruntime-gpu's: the build stops
    saying so (the gpu requirements, which do not use it, still work)."""
    reqs = _requirements_module()
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    text = (ROOT / "constraints.txt").read_text()
    line = f"onnxruntime=={_pin('onnxruntime', text)}\n"
    assert line in text
    (tmp_path / "constraints.txt").write_text(text.replace(line, "" if edit == "drop" else "onnxruntime==0.1\n"))
    with pytest.raises(SystemExit, match="onnxruntime"):
        reqs.requirements(tmp_path, "onnxruntime")
    assert reqs.requirements(tmp_path, "onnxruntime-gpu", "gpu") == reqs.requirements(ROOT, "onnxruntime-gpu", "gpu")


def test_the_cpu_image_defaults_to_the_cpu_wheel_and_the_gpu_image_keeps_onnxruntime_gpu():
    assert re.findall(r"^ARG ONNXRUNTIME=(\S+)$", DOCKERFILES["cpu"].read_text(), re.M) == ["onnxruntime"]
    assert re.findall(r"^ONNXRUNTIME \?= (\S+)$", (ROOT / "Makefile").read_text(), re.M) == ["onnxruntime"]
    assert "ONNXRUNTIME=${ONNXRUNTIME:-onnxruntime}\n" in (DOCKER / "build.sh").read_text()
    # Dockerfile.gpu has no switch: onnxruntime-gpu, always (build.sh passes ONNXRUNTIME only
    # where the Dockerfile declares it).
    gpu = DOCKERFILES["gpu"].read_text()
    assert "ONNXRUNTIME" not in gpu and "docker/requirements.py onnxruntime-gpu gpu" in gpu


@pytest.mark.parametrize("script", ["build.sh", "make-base.sh"])
def test_scripts_parse_and_are_executable(script):
    path = DOCKER / script
    assert os.access(path, os.X_OK)
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True, timeout=30).returncode == 0


def test_make_image_targets_call_the_scripts():
    make = (ROOT / "Makefile").read_text()
    for target in ("image", "image-gpu", "image-prometheus", "base-image"):
        assert re.search(rf"^{target}:", make, re.M), target
    res = subprocess.run(["make", "-n", "image", "IMAGE_MODELS=tests/unit/data"], cwd=ROOT,
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    assert "docker/build.sh" in res.stdout and "IMAGE=headwise:cpu" in res.stdout
    assert "BASE=auto" in res.stdout and re.search(r"\bONNXRUNTIME=onnxruntime\s", res.stdout), res.stdout
    res = subprocess.run(["make", "-n", "image", "IMAGE_MODELS=tests/unit/data", "ONNXRUNTIME=onnxruntime-gpu"],
                         cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert res.returncode == 0 and "ONNXRUNTIME=onnxruntime-gpu " in res.stdout, res.stderr
    # The CI machine gets Docker and mmdebstrap from the project's own script.
    deps = (ROOT / ".ci" / "system-deps.sh").read_text()
    for program, package in (("dockerd", "docker.io"), ("mmdebstrap", "mmdebstrap"),
                             ("docker-compose", "docker-compose")):
        assert f"command -v {program} >/dev/null 2>&1 || need+=({package})" in deps
