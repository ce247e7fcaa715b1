"""The CPU a figure was measured on: its model name and the instruction sets int8 and fp32
kernels care about. Speed ratios hold only for the CPU that measured them (an int8 speed-up
on an AVX-512 VNNI Intel is not the one on an AVX2-only AMD EPYC)."""

from __future__ import annotations

import platform
from pathlib import Path

# In the order of what they add for onnxruntime's kernels: AVX2 fp32/int8, AVX-512, VNNI int8
# dot products (512- and 256-bit), AMX tiles.
RELEVANT_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8", "amx_bf16")


def describe(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict:
    """{"model": "AMD EPYC 7B13", "flags": ["avx2", "fma"]}: the flags of RELEVANT_FLAGS it has."""
    model, flags = None, set()
    try:
        for line in cpuinfo.read_text().splitlines():  # the first core speaks for all
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model is None:
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
                break
    except OSError:
        pass
    return {"model": model or platform.processor() or "unknown", "flags": [f for f in RELEVANT_FLAGS if f in flags]}


def label(info: dict | None = None) -> str:
    """One line: `Intel(R) Xeon(R) Processor (avx2 fma avx512f avx512_vnni amx_int8)`."""
    info = info or describe()
    return f"{info['model']} ({' '.join(info['flags']) or 'no avx2'})"
