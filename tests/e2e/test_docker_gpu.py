"""docker/Dockerfile.gpu as far as it builds without nvidia/cuda (issue 20).

Every stage of the GPU image is built by `make image-gpu`, on a stand-in for its CUDA base:
the local Debian base (BASE_GPU=local/python:3.11-bookworm), which has a Python and apt but no
CUDA libraries and no driver. What that proves: the venv stage installs onnxruntime-gpu and
the gpu extra (nvidia-ml-py) and no torch, the package (fp16 variant included) is copied in,
the image runs as uid 10001 on a read-only root; with the image's own HEADWISE_PROVIDER=cuda
it exits 2 in seconds naming what is missing, and with HEADWISE_PROVIDER=cpu it serves.
What it cannot prove: the CUDA 13 base itself, and serving on a GPU (docs/deployment.md).
"""

from __future__ import annotations

import time

import httpx
import pytest

from tests.e2e.conftest import REPO
from tests.fixtures.docker import Container, docker, make_image, models_copy

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

IMAGE = "headwise:gpu-standin-e2e"
STAND_IN = "local/python:3.11-bookworm"


@pytest.fixture(scope="module")
def gpu_image(docker_engine, minilm_package, tmp_path_factory):
    took = make_image("image-gpu", IMAGE_GPU=IMAGE, BASE_GPU=STAND_IN,
                      IMAGE_MODELS_GPU=str(models_copy(minilm_package, tmp_path_factory)))
    print(f"make image-gpu on the stand-in base: {took:.0f} s")
    return IMAGE


def test_cuda_that_cannot_be_had_stops_the_gpu_image_naming_why(gpu_image):
    t0 = time.monotonic()
    r = docker("run", "--rm", "--network", "none", "--read-only", "--tmpfs", "/tmp", gpu_image,
               check=False, timeout=120)
    took = time.monotonic() - t0
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    assert "HEADWISE_PROVIDER=cuda, but CUDA cannot be used here" in r.stderr
    assert "libcuda.so.1" in r.stderr and "libcublas" in r.stderr, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    print(f"refused in {took:.1f} s (docker run included)")


def test_the_gpu_image_runtime_has_onnxruntime_gpu_and_nvml_and_no_torch(gpu_image):
    code = ("import importlib.util as u, onnxruntime as ort, pynvml; "
            "print(ort.__version__, 'CUDAExecutionProvider' in ort.get_available_providers(), "
            "u.find_spec('torch') is None, u.find_spec('pip') is None)")
    r = docker("run", "--rm", "--network", "none", "--entrypoint", "python", gpu_image, "-c", code)
    version, cuda, no_torch, no_pip = r.stdout.split()
    pinned = next(line.split("==")[1] for line in (REPO / "constraints.txt").read_text().splitlines()
                  if line.startswith("onnxruntime-gpu=="))
    assert (version, cuda, no_torch, no_pip) == (pinned, "True", "True", "True"), r.stdout


def test_the_gpu_image_serves_on_cpu_when_told_to(gpu_image):
    c = Container(gpu_image, env={"HEADWISE_PROVIDER": "cpu"})
    try:
        c.wait_healthy(timeout=300)
        card = httpx.get(c.url + "/v1/models", timeout=30).json()["data"][0]
        assert card["provider"] == "cpu" and "fast.fp16" in card["variants"]
        r = httpx.post(c.url + "/v1/embed", json={"inputs": ["a GPU image on a CPU"]}, timeout=60)
        assert r.status_code == 200 and len(r.json()["data"][0]["embedding"]) == 384
        assert docker("exec", c.name, "id", "-u").stdout.strip() == "10001"
    finally:
        c.remove()
