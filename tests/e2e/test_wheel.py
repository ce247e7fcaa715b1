"""The built wheel is complete: it carries the viewer's files and the STS-B split with their
licences, holds `headwise` as its only top-level package (issue 28), and `headwise serve` runs
from it alone, away from the checkout (issue 16)."""

from __future__ import annotations

import subprocess
import sys
import zipfile

import httpx
import pytest

from tests.e2e.conftest import REPO, clean_env, free_port

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    # No build isolation: the venv's setuptools (constraints.txt) builds it, with no download.
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "--no-build-isolation",
                        "-w", str(out)], capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "SetuptoolsDeprecationWarning" not in r.stdout + r.stderr
    (path,) = out.glob("headwise-*.whl")
    return path


def test_the_wheel_carries_the_viewer_the_data_and_the_licences(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    static = [f"headwise/service/static/{p.name}" for p in (REPO / "headwise" / "service" / "static").iterdir() if p.is_file()]
    assert {"headwise/service/static/index.html", "headwise/service/static/app.js", "headwise/service/static/generate.js",
            "headwise/service/static/style.css"} <= set(static)
    for f in (*static, "headwise/export/data/stsb/sts-dev.csv", "headwise/export/data/stsb/LICENSE.txt"):  # every viewer module
        assert f in names, f
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert not any(n.startswith("tests/") or n.endswith(".onnx") for n in names)
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    # One top-level name (issue 28): a user's own model.py or service/ cannot collide with ours,
    # and the benchmarks stay in the checkout.
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == {"headwise"}
    top = next(n for n in names if n.endswith(".dist-info/top_level.txt")) if any(
        n.endswith("top_level.txt") for n in names) else None
    assert top is None or zipfile.ZipFile(wheel).read(top).decode().split() == ["headwise"]
    assert "License-Expression: Apache-2.0" in zipfile.ZipFile(wheel).read(meta).decode()


def test_headwise_serve_runs_from_the_wheel(wheel, tiny_package, tmp_path):
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    port = free_port()
    env = clean_env(PYTHONPATH=str(site), HEADWISE_PRECISION="fp32")
    proc = subprocess.Popen([sys.executable, "-c", "from headwise.cli import main; main()", "serve",
                             "--models", str(tiny_package.parent), "--port", str(port)],
                            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(600):
            try:
                if httpx.get(url + "/health/ready", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, proc.stderr.read()[-3000:]
            subprocess.run(["sleep", "0.1"])
        code = "import headwise.service, sys; print(headwise.service.__file__)"
        where = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert where.stdout.startswith(str(site)), where  # not the checkout's headwise/
        page = httpx.get(url + "/", timeout=10)
        assert page.status_code == 200 and "<html" in page.text.lower()
        assert httpx.get(url + "/static/app.js", timeout=10).status_code == 200
        r = httpx.post(url + "/v1/embed", json={"inputs": ["hello world"]}, timeout=30)
        assert r.status_code == 200 and len(r.json()["data"][0]["embedding"]) == 32
    finally:
        proc.terminate()
        proc.wait(30)
