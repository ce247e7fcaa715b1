"""Can this process serve on CUDA? A probe that answers in milliseconds and says why not.

onnxruntime-gpu lists CUDAExecutionProvider on every machine, GPU or not, and a session that
cannot load the CUDA libraries falls back to CPU with only a log line. So before any session
is made, the probe checks, in this order, and reports every failure it finds:

1. the onnxruntime build has the CUDA provider;
2. the CUDA libraries the provider links against (libcudart, libcublas, libcublasLt, libcurand
   of the CUDA major version onnxruntime was built for), found on the system's library path or
   in the `nvidia/*/lib` folders of the pip wheels on `sys.path`, which are loaded from there,
   since the dynamic linker never looks in site-packages (then `onnxruntime.preload_dlls()`);
3. the NVIDIA driver (`libcuda.so.1`), that it initialises, and that the device id exists.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import glob
import io
import logging
import os
import sys
from dataclasses import dataclass, field

log = logging.getLogger("headwise.service")

CUDA_EP = "CUDAExecutionProvider"


@dataclass(frozen=True)
class CudaProbe:
    ok: bool
    reasons: tuple[str, ...] = ()
    devices: int = 0
    loaded: tuple[str, ...] = field(default=(), compare=False)  # libraries loaded from pip wheels
    driver: bool = False  # an NVIDIA driver is installed (libcuda.so.1 loads), usable or not

    def why(self) -> str:
        return "; ".join(self.reasons)


def required_libraries(cuda_version: str) -> list[str]:
    """The CUDA libraries onnxruntime's CUDA provider is linked against (its ELF NEEDED list,
    less the driver and libc), for the CUDA major version it was built with. cuDNN is loaded
    only by kernels that use it (convolutions), so it is not required here."""
    major = (cuda_version or "12").split(".")[0]
    # cublas needs cublasLt: load that first
    return [f"libcublasLt.so.{major}", f"libcublas.so.{major}", "libcurand.so.10", f"libcudart.so.{major}"]


def wheel_library_dirs(paths: list[str] | None = None) -> list[str]:
    """`nvidia/<component>/lib` folders of the nvidia-* pip wheels on sys.path (CUDA 12 wheels
    have one folder per component, CUDA 13 wheels one `nvidia/cu13/lib`)."""
    out: list[str] = []
    for root in paths if paths is not None else sys.path:
        for d in sorted(glob.glob(os.path.join(root or ".", "nvidia", "*", "lib"))):
            if os.path.isdir(d) and d not in out:
                out.append(d)
    return out


def load_libraries(names: list[str], dirs: list[str]) -> tuple[list[str], list[str]]:
    """Load each library from the first wheel folder holding it, else by name from the system's
    search path. Returns (loaded from a wheel folder, missing with the loader's message)."""
    from_wheels, missing = [], []
    for name in names:
        path = next((os.path.join(d, name) for d in dirs if os.path.exists(os.path.join(d, name))), None)
        try:
            ctypes.CDLL(path or name)
            if path:
                from_wheels.append(path)
        except OSError as e:
            missing.append(f"{name} ({e})" if path else name)
    return from_wheels, missing


CU_ERRORS = {100: "CUDA_ERROR_NO_DEVICE", 999: "CUDA_ERROR_UNKNOWN", 3: "CUDA_ERROR_NOT_INITIALIZED",
             35: "CUDA_ERROR_INSUFFICIENT_DRIVER", 804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE"}


def _driver(libcuda: str = "libcuda.so.1"):
    """(the driver library, initialised, None) or (None, why not)."""
    try:
        cu = ctypes.CDLL(libcuda)
    except OSError:
        return None, f"no NVIDIA driver: {libcuda} cannot be loaded"
    rc = cu.cuInit(0)
    if rc != 0:
        return None, f"the NVIDIA driver did not initialise (cuInit: {CU_ERRORS.get(rc, rc)})"
    return cu, None


def driver_installed(libcuda: str = "libcuda.so.1") -> bool:
    """Whether the host has an NVIDIA driver at all: its library loads (it may still fail to
    initialise or see no device)."""
    try:
        ctypes.CDLL(libcuda)
    except OSError:
        return False
    return True


def driver_devices(libcuda: str = "libcuda.so.1") -> tuple[int, str | None]:
    """(number of CUDA devices, None) or (0, why not), through the driver API alone."""
    cu, why = _driver(libcuda)
    if why:
        return 0, why
    count = ctypes.c_int(0)
    rc = cu.cuDeviceGetCount(ctypes.byref(count))
    if rc != 0:
        return 0, f"the NVIDIA driver cannot count devices (cuDeviceGetCount: {CU_ERRORS.get(rc, rc)})"
    if count.value == 0:
        return 0, "the NVIDIA driver sees no CUDA device"
    return count.value, None


@functools.cache
def probe(device_id: int = 0) -> CudaProbe:
    """Everything a CUDA session of onnxruntime needs, checked without making one."""
    import onnxruntime as ort

    if CUDA_EP not in ort.get_available_providers():
        return CudaProbe(False, (f"this onnxruntime {ort.__version__} is built without CUDA "
                                 f"(providers: {', '.join(ort.get_available_providers())}); install onnxruntime-gpu",),
                         driver=driver_installed())
    try:
        from onnxruntime.capi import build_and_package_info as info
        cuda_version = getattr(info, "cuda_version", "") or ""
    except ImportError:
        cuda_version = ""
    reasons = []
    loaded, missing = load_libraries(required_libraries(cuda_version), wheel_library_dirs())
    if missing:
        reasons.append(f"CUDA {cuda_version or '?'} libraries not found: {', '.join(missing)} (looked on the "
                       "system's library path and in nvidia/*/lib on sys.path: install the nvidia-* CUDA "
                       f"{cuda_version.split('.')[0] or ''} wheels or the CUDA toolkit)")
    else:
        preload = getattr(ort, "preload_dlls", None)
        if preload is not None:
            with contextlib.redirect_stdout(io.StringIO()) as said:  # it prints what it could not load
                try:
                    preload()
                except Exception as e:  # optional ones (cuDNN, cuFFT) may be missing: not ours to fail on
                    log.debug("onnxruntime.preload_dlls(): %s", e)
            if said.getvalue().strip():
                log.debug("onnxruntime.preload_dlls(): %s", said.getvalue().strip())
    devices, why = driver_devices()
    if why:
        reasons.append(why)
    elif device_id >= devices:
        reasons.append(f"HEADWISE_DEVICE_ID={device_id} but the driver sees {devices} device(s)")
    return CudaProbe(not reasons, tuple(reasons), devices, tuple(loaded), driver=driver_installed())


@functools.cache
def warn_cpu_once(found: CudaProbe) -> None:
    """HEADWISE_PROVIDER=auto found no usable CUDA: one line per process. A host with an NVIDIA
    driver that cannot be used gets a WARNING with the reasons (a GPU machine that silently
    serves on CPU is the failure this exists for); a host with no driver at all, where the CPU
    is the expected choice, one INFO line."""
    if found.driver:
        log.warning("HEADWISE_PROVIDER=auto: serving on CPU, CUDA cannot be used here: %s", found.why())
    else:
        log.info("HEADWISE_PROVIDER=auto: serving on CPU (no NVIDIA driver on this host)")


# A worker is one process with its own CUDA context, sessions and memory arena (about 1.9 GiB
# for all-MiniLM-L6-v2 after warm-up on an H100: bench/results/gpu-h100.md); 4 GiB
# leaves room for larger models. Past 8 workers the H100 host gained nothing more there.
GIB_PER_WORKER = 4
MAX_AUTO_WORKERS = 8


def device_memory(device_id: int = 0, libcuda: str = "libcuda.so.1") -> int | None:
    """Bytes of memory on CUDA device `device_id` (the driver API), or None."""
    cu, why = _driver(libcuda)
    if why:
        return None
    dev, total = ctypes.c_int(0), ctypes.c_size_t(0)
    try:
        if cu.cuDeviceGet(ctypes.byref(dev), device_id) != 0:
            return None
        if cu.cuDeviceTotalMem_v2(ctypes.byref(total), dev) != 0:
            return None
    except AttributeError:  # a driver library without these entry points
        return None
    return total.value


def auto_workers(cores: int, memory: int | None) -> int:
    """HEADWISE_WORKERS=auto on CUDA: one Python process cannot parse, tokenise and answer fast
    enough to keep a GPU busy, so several share it: one per two cores (the other runs its
    event loop's peers: tokenizer and inference threads), one per GIB_PER_WORKER of GPU memory
    (4 when unknown), at most MAX_AUTO_WORKERS."""
    by_memory = memory // (GIB_PER_WORKER << 30) if memory else 4
    return max(1, min(MAX_AUTO_WORKERS, cores // 2, by_memory))
