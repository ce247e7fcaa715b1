"""vLLM's `embed_dtype` and `endianness` on /v1/embeddings' base64 (compat.openai.packed): the
bytes torch's `.to(dtype)` writes (vLLM's tensor2binary), at the torch constraints.txt pins,
for ordinary values, the extremes of each format, infinities and overflow."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from headwise.service.api.compat.openai import packed

TORCH = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
         "fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}


def torch_bytes(v: np.ndarray, dtype: str, big: bool) -> bytes:
    t = torch.from_numpy(v).to(TORCH[dtype])
    a = t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()]).numpy()
    return (a.byteswap() if big and a.itemsize > 1 else a).tobytes()


@pytest.mark.parametrize("dtype", list(TORCH))
@pytest.mark.parametrize("endianness", ["native", "little", "big"])
def test_bytes_equal_torchs(dtype, endianness):
    rng = np.random.default_rng(0)
    v = np.concatenate([rng.standard_normal(4096), rng.standard_normal(512) * 1e3, rng.standard_normal(512) * 1e-6,
                        [0.0, -0.0, 447.9, 448, 449, 464, 465, 1e5, -1e5, 57344, 60000, 65504, 70000, 3.4e38,
                         np.inf, -np.inf, 1e-40]]).astype(np.float32)
    assert packed(v, dtype, endianness) == torch_bytes(v, dtype, big=endianness == "big"), dtype
