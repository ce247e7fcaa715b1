"""Run a package graph in onnxruntime (CPU) over many sentences, batched by length."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

from headwise.export.optimize import CPU_DISABLED_OPTIMIZERS
from headwise.model.tokenizer import Tokenizer


def session(path: Path, threads: int = 0) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if threads:
        so.intra_op_num_threads = threads
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"],
                                disabled_optimizers=list(CPU_DISABLED_OPTIMIZERS))


def feeds(tokenizer: Tokenizer, texts: list[str]) -> dict[str, np.ndarray]:
    b = tokenizer(texts)
    return {
        "input_ids": b.input_ids.numpy(),
        "attention_mask": b.attention_mask.numpy(),
        "token_type_ids": b.token_type_ids.numpy(),
    }


def session_feeds(sess: ort.InferenceSession, tokenizer: Tokenizer, texts: list,
                  head_mask: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """`feeds` for the inputs `sess` takes; the analysis graph's head_mask (B, L, H) all ones
    (every head kept) unless given."""
    f = feeds(tokenizer, texts)
    out = {}
    for i in sess.get_inputs():
        if i.name == "head_mask":
            out[i.name] = head_mask if head_mask is not None else np.ones((len(texts), *i.shape[1:]), np.float32)
        else:
            out[i.name] = f[i.name]
    return out


def embed(sess: ort.InferenceSession, tokenizer: Tokenizer, texts: list[str], batch: int = 64) -> np.ndarray:
    """Sentence embeddings in input order; sorted by length so batches carry little padding."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out = np.empty((len(texts), sess.get_outputs()[0].shape[1] or 0), dtype=np.float32)
    for s in range(0, len(order), batch):
        idx = order[s : s + batch]
        out[idx] = sess.run(["sentence_embedding"], session_feeds(sess, tokenizer, [texts[i] for i in idx]))[0]
    return out
