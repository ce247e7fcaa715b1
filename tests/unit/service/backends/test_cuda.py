
"""The CUDA path's decisions, checked without a GPU: the probe's reasons, provider choice,
int8 refused on CUDA, session options (one thread, no spinning, TF32 off for fp32, device id,
memory limit) and warm-up at the largest batch shape."""

import logging

import pytest

from headwise.service.api.sizes import JSON
from headwise.service.backends import cuda
from headwise.service.backends.onnxruntime import OrtBackend, check_precision, choose_variant
from headwise.service.package import PackageError, load_package
from headwise.service.settings import Settings
from tests.unit.fakes import FakeBackend, make_package


def test_probe_names_every_missing_piece_here():
    found = cuda.probe(0)
    assert not found.ok
    why = found.why()
    assert "libcuda.so.1" in why  # no driver on this machine
    assert "libcublas" in why  # and no CUDA 13 wheels in the venv


def test_required_libraries_follow_onnxruntimes_cuda_major():
    assert cuda.required_libraries("13.0") == ["libcublasLt.so.13", "libcublas.so.13", "libcurand.so.10",
                                               "libcudart.so.13"]
    assert "libcublas.so.12" in cuda.required_libraries("12.8")


def test_wheel_library_dirs_finds_both_layouts(tmp_path):
    for d in ("nvidia/cu13/lib", "nvidia/cublas/lib", "nvidia/cudnn/include"):
        (tmp_path / d).mkdir(parents=True)
    assert cuda.wheel_library_dirs([str(tmp_path)]) == [str(tmp_path / "nvidia/cu13/lib"),
                                                        str(tmp_path / "nvidia/cublas/lib")]


def test_libraries_load_from_a_wheel_folder_first(tmp_path):
    import ctypes.util

    libm = ctypes.util.find_library("m")  # a real library standing in for a CUDA one
    assert libm
    loaded, missing = cuda.load_libraries([libm, "libnothere.so.99"], [])
    assert loaded == [] and missing == ["libnothere.so.99"]


def test_driver_check_without_a_driver_says_so():
    assert cuda.driver_devices("libcuda-not-here.so.1") == (0, "no NVIDIA driver: libcuda-not-here.so.1 cannot be loaded")


@pytest.fixture
def tiny(tiny_package):
    return load_package(tiny_package)


def test_cuda_asked_for_fails_naming_the_reason(tiny, tmp_path):
    with pytest.raises(PackageError, match=r"HEADWISE_PROVIDER=cuda, but CUDA cannot be used here: .*libcuda\.so\.1"):
        OrtBackend(tiny, Settings(models_dir=tmp_path, provider="cuda"))


def test_auto_without_a_driver_says_so_in_one_info_line(tiny, tmp_path, caplog):
    """Issue 40, item 8: on a host with no NVIDIA driver (this one), `auto` choosing the CPU is
    the expected path: one INFO line, no WARNING."""
    cuda.warn_cpu_once.cache_clear()
    assert not cuda.probe(0).driver
    with caplog.at_level(logging.INFO, logger="headwise.service"):
        for _ in range(2):
            b = OrtBackend(tiny, Settings(models_dir=tmp_path, provider="auto"))
    assert b.provider == "cpu"
    said = [(r.levelno, r.getMessage()) for r in caplog.records if "HEADWISE_PROVIDER" in r.getMessage()]
    assert said == [(logging.INFO, "HEADWISE_PROVIDER=auto: serving on CPU (no NVIDIA driver on this host)")]


def test_auto_with_a_driver_it_cannot_use_warns_once_why(caplog):
    cuda.warn_cpu_once.cache_clear()
    found = cuda.CudaProbe(False, ("the NVIDIA driver did not initialise (cuInit: CUDA_ERROR_NO_DEVICE)",), driver=True)
    with caplog.at_level(logging.INFO, logger="headwise.service"):
        cuda.warn_cpu_once(found)
        cuda.warn_cpu_once(found)
    said = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert said == [(logging.WARNING, "HEADWISE_PROVIDER=auto: serving on CPU, CUDA cannot be used here: "
                                      "the NVIDIA driver did not initialise (cuInit: CUDA_ERROR_NO_DEVICE)")]
    cuda.warn_cpu_once.cache_clear()


def test_driver_installed():
    assert not cuda.driver_installed("libcuda-not-here.so.1")
    import ctypes.util

    assert cuda.driver_installed(ctypes.util.find_library("m"))  # a library that loads stands in


def test_int8_is_refused_on_cuda(tmp_path):
    pkg = load_package(make_package(tmp_path / "m"))
    with pytest.raises(PackageError, match=r"int8 is for CPUs.*HEADWISE_PROVIDER=cpu"):
        choose_variant(pkg, "cuda", "int8")
    with pytest.raises(PackageError, match="int8 is for CPUs"):
        check_precision([pkg], "int8", "cuda")


def test_cuda_session_options(tiny, tmp_path):
    s = Settings(models_dir=tmp_path, provider="cpu", device_id=1, gpu_mem_limit=2 << 30)
    b = OrtBackend(tiny, s)
    fp32, fp16 = b.cuda_options("fp32"), b.cuda_options("fp16")
    assert fp32["use_tf32"] == "0" and fp16["use_tf32"] == "1"
    assert fp32["device_id"] == "1" and fp32["gpu_mem_limit"] == str(2 << 30)
    so = b._options("cuda")
    assert so.intra_op_num_threads == 1
    assert so.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert "gpu_mem_limit" not in OrtBackend(tiny, Settings(models_dir=tmp_path, provider="cpu")).cuda_options("fp32")


class CudaFake(FakeBackend):
    provider = "cuda"


def test_warm_up_on_cuda_runs_the_largest_batch_of_each_length(tmp_path):
    from headwise.service.engine import Engine
    from headwise.service.metrics import Metrics

    make_package(tmp_path / "models")
    s = Settings(models_dir=tmp_path / "models", max_batch_size=16, max_batch_tokens=256,
                 attention_budget_bytes=1 << 20)
    engine = Engine(s, Metrics(gpu=None), CudaFake, measure=JSON)
    engine.load_packages()
    engine._prepare()
    rt = next(iter(engine.models.values()))
    calls = rt.backend.calls
    embed = {shape[1]: shape[0] for role, shape in calls if role == "embed"}
    assert embed == {n: min(16, 256 // n) for n in rt.buckets}
    att = {shape[1]: shape[0] for role, shape in calls if role == "attention"}
    cell = rt.package.n_layers * rt.package.n_heads * 4
    assert att == {n: max(1, min(16, 256 // n, (1 << 20) // (cell * n * n))) for n in rt.buckets}
